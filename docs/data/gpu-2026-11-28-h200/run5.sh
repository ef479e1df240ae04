#!/usr/bin/env bash
# Issue 36, next lease, call 1: the goal's figures first (docs/gpu-runs.md, "For the next GPU session"):
# 200 unchanged + 40 GPU-side +2% comparisons (bf16 block, world-model CUDA graph), judged by device
# time stored AND by the new device-time A/B (never run on a GPU before this call). Then call 2
# (run6.sh) at once: the pr tier cold for what is left. REHEARSE=1 runs it on the CPU, tiny.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w5; mkdir -p "$W"
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi > "$W/nvidia-smi.txt" 2>&1; git log --oneline -1 > "$W/commit.txt"
lim=${QUALITY_S:-500}
echo "[$(el)s] quality run, limit $lim s"
./scripts/gpu-check --quality ${REHEARSE:+--device cpu} --cases "${CASES:-physicsnemo-block::bf16,owl-world-model::cudagraphs}" \
  --repeats "${REPEATS:-20}" --stage-limit-s "$lim" --out "$W/gq" -- --kinds unchanged,gpu --sizes 2 \
  --unchanged-repeats "${UNCHANGED:-100}" --profile-steps 10 --device-rounds 10 \
  ${REHEARSE:+--passes 2 --rounds 3} > "$W/gq.out" 2>&1; rc=$?
echo "[$(el)s] quality rc $rc"; tail -40 "$W/gq.out"
tar czf "$OUT/bundle5.tgz" -C "$W" . ; cp "$W/gq/summary.md" "$OUT/quality-summary.md" 2>/dev/null
ls -la "$OUT"; echo "[$(el)s] done"
