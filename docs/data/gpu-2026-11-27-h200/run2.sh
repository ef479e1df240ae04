#!/usr/bin/env bash
# Second call: the launch-bound world model eager (paired-round A/B beside the unpaired one) and
# PhysicsNeMo bf16 with a 40-step profiler window (its device-time pass noise at 10 steps: 1.8%).
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w2; mkdir -p "$W"
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
WM=${WM_CASE:-owl-world-model::baseline}; BF=${BF_CASE:-physicsnemo-block::bf16}; D=${REHEARSE:+--device cpu}
echo "[$(el)s] world model eager"
timeout -s INT "${WM_S:-105}" ./scripts/gpu-check --quality $D --cases "$WM" --repeats "${WM_REPEATS:-5}" --out "$W/wm" ${REHEARSE:+--rounds 3 -- --passes 2 --profile-steps 1} > "$W/wm.log" 2>&1
echo "[$(el)s] rc $?"; tail -22 "$W/wm.log"
cp "$W/wm/quality/quality.json" "$OUT/quality-wm.json"; cp "$W/wm/quality/quality.md" "$OUT/quality-wm.md"
echo "[$(el)s] bf16, 40-step profiler window"
timeout -s INT "${BF_S:-55}" ./scripts/gpu-check --quality $D --cases "$BF" --repeats "${BF_REPEATS:-6}" --out "$W/bf" -- --profile-steps "${BF_STEPS:-40}" ${REHEARSE:+--passes 2} > "$W/bf.log" 2>&1
echo "[$(el)s] rc $?"; tail -22 "$W/bf.log"
cp "$W/bf/quality/quality.json" "$OUT/quality-bf16-40steps.json"; cp "$W/bf/quality/quality.md" "$OUT/quality-bf16-40steps.md"
cat "$W/wm.log" "$W/bf.log" > "$OUT/log.txt"; echo "[$(el)s] done"
