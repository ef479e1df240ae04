#!/bin/bash
# tests/data/history-step: 8 real runs of physicsnemo-block baseline on the CPU, each at its own (empty) commit; runs 5-8 with a
# model-local 20% slowdown injected (perfgate.gate.inject). Niced: the machine is shared.
cd /tmp/cp-repo
for i in 1 2 3 4 5 6 7 8; do
  git -c user.name=m -c user.email=m@x commit -q --allow-empty -m "history step run $i"
  extra=""; env=""
  if [ $i -ge 5 ]; then extra="-p perfgate.gate.inject"; export PERFGATE_INJECT=local:20; fi
  echo "=== run $i $(date -u +%T) commit $(git rev-parse --short HEAD) inject=${PERFGATE_INJECT:-none}"
  nice -n 19 /work/main/.venv/bin/python -m pytest benchmarks -q -p no:cacheprovider $extra \
    --perfgate-device cpu --perfgate-models physicsnemo-block --perfgate-variants baseline \
    --perfgate-baselines /tmp/cp-hist/baselines --perfgate-record=run$i --perfgate-no-gate 2>&1 | tail -25
  echo "=== end run $i $(date -u +%T) rc=${PIPESTATUS[0]}"
done
