#!/usr/bin/env bash
# The wheels a GPU lease carries (.whl/, ignored; `carry: [".whl"]`): the lent machine's image has
# CUDA torch and most of perfgate's needs but no registry, and older pytest, pytest-benchmark,
# pytest-xdist and no torchao. Each is downloaded at the GPU lock's pin, checked against its hashes
# (requirements/gpu.txt), for the image's Python 3.12 on x86-64; the call scripts install them with
# `pip install --no-index --no-deps --target /tmp/site .whl/*.whl`. Run from the repository root.
set -euo pipefail
names=(torchao pytest pytest-benchmark pytest-xdist)
req=$(mktemp); trap 'rm -f "$req"' EXIT
for n in "${names[@]}"; do
  # a pin's block: its "name==version \" line and the "--hash=..." lines under it
  awk -v n="$n" '$0 ~ "^"n"==" {on=1; print; next} on && /^ +--hash/ {print; next} {on=0}' \
    requirements/gpu.txt >> "$req"
  grep -q "^$n==" "$req" || { echo "wheels.sh: $n is not pinned in requirements/gpu.txt; add it to the lock (scripts/_lock.sh)" >&2; exit 2; }
done
rm -rf .whl; mkdir -p .whl
python3 -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl -r "$req"
ls -la .whl; du -sh .whl
