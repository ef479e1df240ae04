#!/usr/bin/env bash
# Issue 36, next lease, call 2, right after run7.sh on the same warm machine: `perfgate ab` on
# unchanged code in both modes (its device-time verdicts, never run on a GPU), then the pr tier's
# 7 cases never timed cold, cut by --stage-limit-s (gpu-check marks the stage cut).
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w8; mkdir -p "$W"; G=.perfgate/gt8
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
DEV=cuda SIZE=full TIER=pr K="fp8 or bf16+compile or wan-vae or physicsnemo"
[ -n "${REHEARSE:-}" ] && { DEV=cpu SIZE=tiny TIER=cpu-pr K=physicsnemo-block-tiny; }
for m in interleaved processes; do
  echo "[$(el)s] perfgate ab --mode $m"
  python3 -m perfgate ab --base HEAD --mode $m --max-processes 3 --max-pairs 4 --budget-s "${AB_S:-80}" --json "$W/ab-$m.json" \
    -- --perfgate-device $DEV --perfgate-models physicsnemo-block --perfgate-variants bf16 --perfgate-sizes $SIZE \
    > "$W/ab-$m.out" 2>&1; echo "[$(el)s] ab $m rc $?"; tail -15 "$W/ab-$m.out"
done
lim=${COLD_S:-300}
echo "[$(el)s] $TIER tier cold, limit $lim s"
./scripts/gpu-check --tier-time "$TIER" ${REHEARSE:+--device cpu} --tier-phases cold --stage-limit-s "$lim" --out "$G" \
  -- -k "$K" ${REHEARSE:+--perfgate-budget-s 0.3} > "$W/tier-cold.out" 2>&1; rc=$?
echo "[$(el)s] tier cold rc $rc"; tail -40 "$W/tier-cold.out"
mkdir -p "$W/gt"; cp "$G"/*.json "$G"/*.xml "$G"/*.md "$G"/*.log "$W/gt/" 2>/dev/null
tar czf "$OUT/bundle8.tgz" -C "$W" . ; ls -la "$OUT"; echo "[$(el)s] done"
