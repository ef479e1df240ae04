#!/usr/bin/env bash
# Issue 36, next lease, call 2, right after run5.sh on the same warm machine: the pr tier cold for
# what is left of the lease (cut by --stage-limit-s; gpu-check marks the stage cut).
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w6; mkdir -p "$W"; G=.perfgate/gt
el() { echo $(( $(date +%s) - T0 )); }
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
TIER=pr; [ -n "${REHEARSE:-}" ] && TIER=cpu-pr
lim=${COLD_S:-250}
echo "[$(el)s] pr tier cold, limit $lim s"
./scripts/gpu-check --tier-time "$TIER" ${REHEARSE:+--device cpu} --tier-phases cold --stage-limit-s "$lim" --out "$G" \
  ${REHEARSE:+-- -k physicsnemo-block-tiny --perfgate-budget-s 0.3} > "$W/tier-cold.out" 2>&1; rc=$?
echo "[$(el)s] tier cold rc $rc"; tail -40 "$W/tier-cold.out"
mkdir -p "$W/gt"; cp "$G"/*.json "$G"/*.xml "$G"/*.md "$G"/*.log "$W/gt/" 2>/dev/null
tar czf "$OUT/bundle6.tgz" -C "$W" . ; ls -la "$OUT"; echo "[$(el)s] done"
