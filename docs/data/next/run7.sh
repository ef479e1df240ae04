#!/usr/bin/env bash
# Issue 36, next lease, call 1 (~5 min; docs/gpu-runs.md, "For the next GPU session"): what
# 3f4bde7, b4965eb and be5a9be built and never ran on a GPU: a GPU-side +2% (an added launch), a
# slower kernel +2% (same launches) and unchanged code on the bf16 block and the world model's CUDA
# graph, device time by blocks of 5 steps, clocks sampled per comparison. Then run8.sh at once.
# Prepare: `bash docs/data/next/wheels.sh` (carry [".whl"]). REHEARSE=1 OUT=/tmp/o runs it on the CPU, tiny.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w7; mkdir -p "$W"
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi > "$W/nvidia-smi.txt" 2>&1; git log --oneline -1 > "$W/commit.txt"
# The device-time windows are read from the profiler's memory, checked against its export (never run
# on a GPU before): the test's GPU case compares both readings of eager launches and a graph replay.
# A torch before 2.12 (the leases so far had 2.11) has no activity_type() on its events and always
# reads the export: then there is nothing of it to run here, and the file says so.
python3 -c "import torch; from perfgate.measure.op_counts import _events_have_types as typed
print('torch', torch.__version__, 'reads profiler windows from', 'memory (the first of each kind checked against the export)'
      if typed() else 'the export: no activity_type() on its events, so the in-memory reading is NOT exercised')" \
  2>&1 | tee "$W/windows.txt"
if grep -q 'from memory' "$W/windows.txt"; then
  echo "[$(el)s] the profiler's events in memory against its export"
  timeout 120 python3 -m pytest tests/measure/test_op_counts.py -q -p no:cacheprovider -p no:xdist -rs > "$W/op-counts.out" 2>&1
  rc=$?; echo "[$(el)s] op-counts tests rc $rc"; tail -4 "$W/op-counts.out"
fi
lim=${QUALITY_S:-280}
echo "[$(el)s] quality run, limit $lim s"
./scripts/gpu-check --quality ${REHEARSE:+--device cpu} --cases "${CASES:-physicsnemo-block::bf16,owl-world-model::cudagraphs}" \
  --repeats "${REPEATS:-15}" --stage-limit-s "$lim" --out "$W/gq" -- --kinds unchanged,gpu,kernel --sizes 2 \
  --unchanged-repeats "${UNCHANGED:-30}" --profile-steps 10 --device-rounds 10 --device-block-steps 5 \
  ${REHEARSE:+--passes 2 --rounds 3} > "$W/gq.out" 2>&1; rc=$?
echo "[$(el)s] quality rc $rc"; tail -40 "$W/gq.out"
tar czf "$OUT/bundle7.tgz" -C "$W" . ; cp "$W/gq/summary.md" "$OUT/quality-summary.md" 2>/dev/null
ls -la "$OUT"; echo "[$(el)s] done"
