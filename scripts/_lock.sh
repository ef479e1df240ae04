#!/usr/bin/env bash
# Regenerate the hashed locks that every install on a runner uses (PERFGATE_REQUIREMENTS, see
# scripts/_venv.sh): run it after changing a pin in pyproject.toml, and commit the result.
#
#   scripts/_lock.sh [UV_ARGS...]    (needs uv: pip install uv)
#
#   requirements/gpu.txt     perfgate's dependencies for the GPU runner image and jobs (CUDA torch
#                            from PyPI), Linux x86-64, Python 3.12 (the runner image's Ubuntu has it)
#   requirements/ci-cpu.txt  the dev extra too and the CPU build of torch, Python 3.11, for tests.yml
#
# setuptools (the build backend) is locked too: scripts/_venv.sh installs perfgate itself with
# --no-build-isolation, so that no unhashed build dependency is fetched.
#
# Not locked: the tensorrt extra. torch-tensorrt depends on tensorrt-cu13-libs, a source
# distribution on PyPI that downloads NVIDIA's wheels while it builds, so no hash on PyPI covers
# what it installs. Lock it against NVIDIA's own index with UV_ARGS (--extra-index-url ... and
# --extra tensorrt added to the gpu lock by hand) where that index is reachable.
#
# ci-cpu.txt's torch==2.13.0+cpu comes from the PyTorch CPU index; where that index is not
# reachable, PERFGATE_LOCK_FIND_LINKS=DIR names a folder holding that exact wheel (its hash is
# what the lock records: check it against the index's before committing).
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${UV:-uv}"
if ! command -v "$uv" >/dev/null 2>&1; then
  echo "_lock.sh: uv is not on PATH; install it (pip install uv) or set UV=/path/to/uv" >&2
  exit 5
fi
common=(--generate-hashes --python-platform x86_64-manylinux_2_28 --no-header --quiet)
build_backend=requirements/build-backend.in  # pyproject.toml's [build-system] requires

"$uv" pip compile pyproject.toml "$build_backend" "${common[@]}" --python-version 3.12 --index-url https://pypi.org/simple \
  -o requirements/gpu.txt "$@"

cpu_index=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
if [[ -n ${PERFGATE_LOCK_FIND_LINKS:-} ]]; then cpu_index=(--find-links "$PERFGATE_LOCK_FIND_LINKS"); fi
"$uv" pip compile pyproject.toml "$build_backend" --extra dev "${common[@]}" --python-version 3.11 --index-url https://pypi.org/simple \
  "${cpu_index[@]}" -o requirements/ci-cpu.txt "$@"
echo "_lock.sh: wrote requirements/gpu.txt and requirements/ci-cpu.txt" >&2
