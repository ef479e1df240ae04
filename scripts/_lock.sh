#!/usr/bin/env bash
# Regenerate the hashed locks that the repository's own installs use (scripts/_venv.sh picks one by
# default; PERFGATE_REQUIREMENTS=FILE names another): run it after changing a range or an extra in
# pyproject.toml, and commit the result. pyproject.toml declares ranges (what perfgate supports);
# only these files hold exact versions.
#
#   scripts/_lock.sh [UV_ARGS...]    (needs uv: it is in the dev extra)
#
#   requirements/gpu.txt         perfgate[all] for the GPU runner image and jobs (CUDA torch from
#                                PyPI), Linux x86-64, Python 3.12 (the runner image's Ubuntu has it)
#   requirements/ci-cpu.txt      perfgate[dev] (every extra but tensorrt, the docs and the test tools)
#                                with the CPU build of torch, Python 3.11: scripts/test, tests.yml
#   requirements/ci-oldest.txt   perfgate[dev] at the lowest versions pyproject.toml allows
#                                (uv's --resolution lowest-direct), Python 3.11: tests-matrix.yml
#   requirements/ci-newest.txt   perfgate[dev] at the newest releases, Python 3.13 (the newest
#                                with wheels of every dependency; ruptures has none for 3.14 yet)
#
# Each lock's first line names its Python: scripts/_venv.sh installs a lock only into that Python.
# setuptools (the build backend) is locked too: scripts/_venv.sh installs perfgate itself with
# --no-build-isolation, so that no unhashed build dependency is fetched.
#
# Not locked: the tensorrt extra. torch-tensorrt depends on tensorrt-cu13-libs, a source
# distribution on PyPI that downloads NVIDIA's wheels while it builds, so no hash on PyPI covers
# what it installs. Lock it against NVIDIA's own index with UV_ARGS (--extra-index-url ... and
# --extra tensorrt added to the gpu lock by hand) where that index is reachable.
#
# The CPU locks take torch's CPU build from the PyTorch CPU index; where that index is not
# reachable, PERFGATE_LOCK_FIND_LINKS=DIR names a folder holding the wheels (the hash is what the
# lock records: check it against the index's before committing), and a torch release not in DIR
# is locked as PyPI's (CUDA) build, which also runs on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${UV:-uv}"
if ! command -v "$uv" >/dev/null 2>&1; then
  echo "_lock.sh: uv is not on PATH; install it (pip install uv) or set UV=/path/to/uv" >&2
  exit 5
fi
common=(--generate-hashes --python-platform x86_64-manylinux_2_28 --no-header --quiet --index-url https://pypi.org/simple)
build_backend=requirements/build-backend.in  # pyproject.toml's [build-system] requires
cpu_index=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
if [[ -n ${PERFGATE_LOCK_FIND_LINKS:-} ]]; then cpu_index=(--find-links "$PERFGATE_LOCK_FIND_LINKS"); fi

# uv keeps the versions an existing lock holds while they are still allowed (--upgrade moves them):
# a baseline's torch changes only when someone means it to.
lock() {  # lock OUT PYTHON DESCRIPTION UV_ARGS...
  local out=$1 python=$2 what=$3
  shift 3
  "$uv" pip compile pyproject.toml "$build_backend" "${common[@]}" --python-version "$python" -o "$out" "$@"
  sed -i "1i # Python $python, Linux x86-64: $what (scripts/_lock.sh)" "$out"
}
lock requirements/gpu.txt 3.12 "perfgate[all] for the GPU runners" --extra all "$@"
lock requirements/ci-cpu.txt 3.11 "perfgate[dev], CPU torch" --extra dev "${cpu_index[@]}" "$@"
lock requirements/ci-oldest.txt 3.11 "perfgate[dev] at the lowest allowed versions" --extra dev \
  --resolution lowest-direct --only-binary :all: "${cpu_index[@]}" "$@"
lock requirements/ci-newest.txt 3.13 "perfgate[dev] at the newest releases" --extra dev --only-binary :all: \
  "${cpu_index[@]}" "$@"
echo "_lock.sh: wrote requirements/gpu.txt, ci-cpu.txt, ci-oldest.txt and ci-newest.txt" >&2
