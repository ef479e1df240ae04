#!/usr/bin/env bash
# Issue 36 on a lent GPU: the quality run (detection table, kept traces), then the PR tier cold
# for whatever time is left. Everything lands in /tmp/w, bundled into $OUT at the end; the
# small result files are copied to $OUT as soon as they exist.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w; mkdir -p "$W"
TV=""; [ -x /usr/bin/time ] && TV="/usr/bin/time -v"
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK,POWER | head -60; lscpu | head -20;
  python3 -c "import sys,torch,torchao,pytest,pytest_benchmark,xdist; print(sys.version); print('torch',torch.__version__,'cuda',torch.version.cuda,torch.cuda.get_device_name(0)); print('torchao',torchao.__version__,'pytest',pytest.__version__,'pytest-benchmark',pytest_benchmark.__version__,'xdist',xdist.__version__)";
  python3 -m perfgate health; } > "$W/machine.txt" 2>&1
cp "$W/machine.txt" "$OUT/"
[ -n "${REHEARSE:-}" ] || grep -q "cuda" "$W/machine.txt" || { echo "no CUDA?"; cat "$W/machine.txt"; exit 4; }
echo "[$(el)s] quality run"
$TV timeout -s INT "${QUALITY_S:-350}" ./scripts/gpu-check --quality ${REHEARSE:+--device cpu --cases physicsnemo-block:tiny:baseline --repeats 1 --rounds 3} --out "$W/gc" -- --traces "$W/traces" ${REHEARSE:+--passes 2 --profile-steps 1} > "$W/quality.log" 2>&1
echo "[$(el)s] quality rc $?"; tail -60 "$W/quality.log"
cp "$W/gc/quality/quality.json" "$W/gc/quality/quality.md" "$OUT/" 2>/dev/null
left=$(( ${TOTAL_S:-560} - $(el) - 20 ))
echo "[$(el)s] PR tier cold, $left s"
if [ "$left" -gt 30 ]; then
  $TV timeout -s INT "$left" ./scripts/bench ${REHEARSE:+-k physicsnemo-block-tiny} --perfgate-no-gate --perfgate-inductor-cache "$W/inductor" \
    --benchmark-json "$W/pr-cold.json" --durations=0 -p no:cacheprovider > "$W/pr-cold.log" 2>&1
  echo "[$(el)s] PR cold rc $?"; tail -45 "$W/pr-cold.log"
fi
rm -rf "$W/inductor"
tar czf "$OUT/bundle.tgz" -C "$W" . ; ls -la "$OUT"; echo "[$(el)s] done"
