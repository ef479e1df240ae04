# shellcheck shell=bash
# Sourced by scripts/bench and scripts/test: make sure an environment with perfgate exists and
# set PY to its python. Usage: PERFGATE_SETUP_EXTRAS=dev source scripts/_venv.sh
# (a variable, not an argument: a sourced script would otherwise see the caller's arguments)
#   PERFGATE_SKIP_INSTALL=1  use $PERFGATE_PYTHON (default python3) as it is, install nothing
#   PERFGATE_VENV=DIR        where the virtual environment lives (default .venv)
#   PERFGATE_REQUIREMENTS=FILE  install exactly FILE, a hashed lock (requirements/*.txt, written by
#                            scripts/_lock.sh), with pip's --require-hashes, then perfgate itself with
#                            --no-deps: every file pip installs is checked against the lock. The extras
#                            are the lock's (the variables below that name extras are not read).
#                            Unset: the repository's own lock, requirements/ci-cpu.txt (gpu.txt where
#                            nvidia-smi is on PATH), when python3 is the lock's Python (its first line);
#                            otherwise one line says so and pyproject.toml's ranges are installed.
#                            Set and empty: pyproject.toml's ranges (what a user of the package gets).
#   PERFGATE_EXTRAS=a,b      extra extras when installing from the ranges (e.g. tensorrt on a GPU runner)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ "${PERFGATE_SKIP_INSTALL:-0}" = 1 ]; then
  PY="${PERFGATE_PYTHON:-python3}"
else
  VENV="${PERFGATE_VENV:-.venv}"
  extras="${PERFGATE_SETUP_EXTRAS:-}"
  if [ -n "${PERFGATE_EXTRAS:-}" ]; then extras="${extras:+$extras,}$PERFGATE_EXTRAS"; fi
  spec="."
  if [ -n "$extras" ]; then spec=".[$extras]"; fi
  lock="${PERFGATE_REQUIREMENTS-}"
  if [ -z "${PERFGATE_REQUIREMENTS+set}" ]; then
    python_now="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    lock=requirements/ci-cpu.txt
    if command -v nvidia-smi >/dev/null 2>&1; then lock=requirements/gpu.txt; fi
    lock_python="$(sed -n '1s/^# Python \([0-9.]*\),.*/\1/p' "$lock")"
    if [ "$lock_python" != "$python_now" ]; then
      echo "perfgate: $lock is locked for Python $lock_python and python3 is $python_now: installing pyproject.toml's ranges instead (versions not pinned; PERFGATE_REQUIREMENTS=FILE picks a lock)" >&2
      lock=""
    fi
  fi
  if [ -n "$lock" ]; then
    if [ ! -f "$lock" ]; then
      echo "perfgate: PERFGATE_REQUIREMENTS=$lock is not a file; name a lock under requirements/ (scripts/_lock.sh writes them)" >&2
      exit 4
    fi
    spec="--require-hashes -r $lock"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "perfgate: creating $VENV" >&2
    python3 -m venv "$VENV"
  fi
  PY="$VENV/bin/python"
  # Re-install only when pyproject.toml or the extras changed: a no-op pip run still costs seconds.
  stamp="$VENV/.perfgate-installed"
  want="$(sha256sum pyproject.toml | cut -c1-16) $spec $("$PY" -c 'import sys; print(sys.version.split()[0])')"
  if [ -n "$lock" ]; then want="$want $(sha256sum "$lock" | cut -c1-16)"; fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "perfgate: installing $spec into $VENV (torch and friends: about 2 minutes with a CPU torch at hand, much longer where pip downloads CUDA wheels; see README)" >&2
    if [ -n "$lock" ]; then
      "$PY" -m pip install --disable-pip-version-check -q --require-hashes -r "$lock"
      "$PY" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
    else
      "$PY" -m pip install --disable-pip-version-check -q -e "$spec"
    fi
    echo "$want" > "$stamp"
  fi
fi
export PY
