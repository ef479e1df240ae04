#!/usr/bin/env bash
# Issue 36, call 2 of 2, right after run3.sh on the same warm machine: the PR tier with the warm
# inductor cache run3.sh left in .perfgate/gt (gpu-check --tier-phases warm), then the launch-bound
# world model eager: unchanged code and host-side +5% (paired and unpaired A/B, the PR default for
# wall time), then with what is left unchanged code on the world model's CUDA graphs.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w4; mkdir -p "$W"; G=.perfgate/gt
el() { echo $(( $(date +%s) - T0 )); }
D=${DEADLINE_S:-290}
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
TIER=pr; [ -n "${REHEARSE:-}" ] && TIER=cpu-pr
ls "$G" > "$W/gt-before.txt" 2>&1; du -sh "$G/inductor-cache" >> "$W/gt-before.txt" 2>&1
lim=${WARM_S:-150}
echo "[$(el)s] PR tier warm, limit $lim s"
./scripts/gpu-check --tier-time "$TIER" ${REHEARSE:+--device cpu} --tier-phases warm --stage-limit-s "$lim" --out "$G" \
  ${REHEARSE:+-- -k physicsnemo-block-tiny --perfgate-budget-s 0.3} > "$W/tier-warm.out" 2>&1; rc=$?
echo "[$(el)s] tier warm rc $rc"; tail -40 "$W/tier-warm.out"
mkdir -p "$W/gt"; cp "$G"/*.json "$G"/*.xml "$G"/*.md "$G"/*.log "$W/gt/" 2>/dev/null
cp "$G/summary.md" "$OUT/tier-warm-summary.md" 2>/dev/null
left=$(( D - $(el) - 15 )); [ "$left" -gt "${WM_S:-95}" ] && left=${WM_S:-95}
echo "[$(el)s] world model eager, $left s"
if [ "$left" -gt 30 ]; then
  ./scripts/gpu-check --quality ${REHEARSE:+--device cpu} --cases "${WM_CASE:-owl-world-model::baseline}" --repeats 10 --stage-limit-s "$left" --out "$W/wm" \
    -- --kinds unchanged,host --sizes 5 ${REHEARSE:+--passes 2 --rounds 3 --profile-steps 1} > "$W/wm.out" 2>&1; rc=$?
  echo "[$(el)s] wm rc $rc"; tail -30 "$W/wm.out"
fi
left=$(( D - $(el) - 12 ))
echo "[$(el)s] world model CUDA graphs, unchanged, $left s"
if [ "$left" -gt 25 ]; then
  ./scripts/gpu-check --quality ${REHEARSE:+--device cpu} --cases "${CG_CASE:-owl-world-model::cudagraphs}" --repeats 40 --stage-limit-s "$left" --out "$W/cg" \
    -- --kinds unchanged ${REHEARSE:+--passes 2 --rounds 3 --profile-steps 1} > "$W/cg.out" 2>&1; rc=$?
  echo "[$(el)s] cg rc $rc"; tail -20 "$W/cg.out"
fi
tar czf "$OUT/bundle4.tgz" -C "$W" . ; ls -la "$OUT"; echo "[$(el)s] done"
