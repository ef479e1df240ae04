#!/usr/bin/env bash
# Issue 36, call 1 of 2 on a lent GPU: the PR tier with a cold inductor cache, measured whole
# (gpu-check --tier-time pr --tier-phases cold); the cache stays in .perfgate/gt on the warm machine
# for call 2 (run4.sh: the warm run). Then, with what time is left, many unchanged comparisons and
# GPU-side +2% on the short bf16 block (40-step profiler window): the false-alarm bound.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w3; mkdir -p "$W"; G=.perfgate/gt
el() { echo $(( $(date +%s) - T0 )); }
D=${DEADLINE_S:-545}
[ -n "${REHEARSE:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
TIER=pr; [ -n "${REHEARSE:-}" ] && TIER=cpu-pr
{ date -u; nvidia-smi; lscpu | head -20; git log --oneline -1 2>/dev/null;
  python3 -c "import sys,torch,torchao,pytest,pytest_benchmark; print(sys.version); print('torch',torch.__version__,'cuda',torch.version.cuda,torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda'); print('torchao',torchao.__version__,'pytest',pytest.__version__,'pytest-benchmark',pytest_benchmark.__version__)"; } > "$W/machine.txt" 2>&1
cp "$W/machine.txt" "$OUT/"
[ -n "${REHEARSE:-}" ] || ! grep -q "no cuda" "$W/machine.txt" || { echo "no CUDA?"; cat "$W/machine.txt"; exit 4; }
lim=$(( D - $(el) - 40 )); [ "$lim" -gt "${COLD_S:-470}" ] && lim=${COLD_S:-470}
echo "[$(el)s] PR tier cold, limit $lim s"
./scripts/gpu-check --tier-time "$TIER" ${REHEARSE:+--device cpu} --tier-phases cold --stage-limit-s "$lim" --out "$G" \
  ${REHEARSE:+-- -k physicsnemo-block-tiny --perfgate-budget-s 0.3} > "$W/tier-cold.out" 2>&1; rc=$?
echo "[$(el)s] tier cold rc $rc"; tail -40 "$W/tier-cold.out"
mkdir -p "$W/gt"; cp "$G"/*.json "$G"/*.xml "$G"/*.md "$G"/*.log "$W/gt/" 2>/dev/null
cp "$G/summary.md" "$OUT/tier-cold-summary.md" 2>/dev/null
left=$(( D - $(el) - 15 ))
echo "[$(el)s] bf16 false-alarm run, $left s"
if [ "$left" -gt 30 ]; then
  ./scripts/gpu-check --quality ${REHEARSE:+--device cpu} --cases "${BF_CASE:-physicsnemo-block::bf16}" --repeats 10 --stage-limit-s "$left" --out "$W/bf" \
    -- --kinds unchanged,gpu --sizes 2 --unchanged-repeats 50 --profile-steps 40 ${REHEARSE:+--passes 2 --rounds 3} > "$W/bf.out" 2>&1; rc=$?
  echo "[$(el)s] bf16 rc $rc"; tail -30 "$W/bf.out"
fi
du -sh "$G/inductor-cache" 2>/dev/null
tar czf "$OUT/bundle3.tgz" -C "$W" . ; ls -la "$OUT"; echo "[$(el)s] done"
