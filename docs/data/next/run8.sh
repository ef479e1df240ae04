#!/usr/bin/env bash
# Issue 36, next lease, call 2, right after run7.sh on the same warm machine: `perfgate ab` on
# unchanged code in both modes (its device-time verdicts, never run on a GPU), then the pr tier's
# cases never timed cold, eager ones first, each stage cut by what is left before DEADLINE_S (gpu-check
# marks a stage cut). Files reach $OUT as each part ends, so a call cut short still brings them back.
set -u
export PYTHONUNBUFFERED=1 PERFGATE_SKIP_INSTALL=1
T0=$(date +%s); W=/tmp/w8; G=.perfgate/gt8; rm -rf "$W" "$G"-*; mkdir -p "$W"  # nothing of an earlier call
D=${DEADLINE_S:-520}  # seconds from the start by which the last stage ends (the call's limit is 600)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( D - $(el) - ${1:-0} )); }
# rewritten after each part (at most 8 files come back), whole or not at all: a kill mid-write keeps the last
keep() { tar czf "$OUT/.bundle8.tgz" -C "$W" . && mv "$OUT/.bundle8.tgz" "$OUT/bundle8.tgz"; }
[ -n "${REHEARSE:-}" ] || [ -d /tmp/site/torchao ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
# The lent machine's copy of the tree may sit on an older commit than its files (the fifth run's
# `git log` named 6a4e715 beside 79b9adb's files): the base is this very tree, committed aside.
IDX=$W/ab-index; T=$(GIT_INDEX_FILE=$IDX git add -A . && GIT_INDEX_FILE=$IDX git write-tree)
BASE=$(GIT_AUTHOR_NAME=run8 GIT_AUTHOR_EMAIL=run8@localhost GIT_COMMITTER_NAME=run8 GIT_COMMITTER_EMAIL=run8@localhost \
  git commit-tree "$T" -p HEAD -m "run8: the tree as it is here")
{ git log --oneline -1; git status --porcelain --untracked-files=no | head; echo "base $BASE (tree $T)"; } > "$W/commit.txt" 2>&1
[ -n "$BASE" ] || { echo "run8: could not commit the tree as the base: $(cat "$W/commit.txt")"; keep; exit 3; }
DEV=cuda SIZE=full TIER=pr EAGER="wan-vae or physicsnemo" COMPILED="bf16+compile and not fp8"
[ -n "${REHEARSE:-}" ] && { DEV=cpu SIZE=tiny TIER=cpu-pr EAGER=physicsnemo-block-tiny-baseline COMPILED=physicsnemo-train-tiny-baseline; }
# Each side's process measures only what the verdicts need: the step's rounds, no energy window, no FLOPs.
SEL="--perfgate-device $DEV --perfgate-models physicsnemo-block --perfgate-variants bf16 --perfgate-sizes $SIZE \
  --perfgate-budget-s 1 --perfgate-energy-window-s 0 --perfgate-no-flops"
# Processes mode: 3 pairs, the fewest from which device time (a t test) decides; latency's rank test needs 6
# pairs for "unchanged" and 7 for a regression, so it reads inconclusive here by design. No pair starts
# that would end past the budget at the last one's pace; `timeout` bounds each mode by what is left of the call.
for m in interleaved processes; do
  echo "[$(el)s] perfgate ab --mode $m"
  lim=$(left 200); [ "$lim" -gt 10 ] || lim=10
  # its own budget inside the kill: no pair is started that would end past it at the last one's pace,
  # and what it measured is written (a pair is two processes of ~30 s on a GPU, plus the collect)
  bud=$(( lim - 30 )); [ "$bud" -lt "${AB_S:-150}" ] || bud=${AB_S:-150}; [ "$bud" -gt 5 ] || bud=5
  # shellcheck disable=SC2086 # SEL is a list of pytest arguments
  timeout "$lim" python3 -m perfgate ab --base "$BASE" --mode $m --max-processes 3 --max-pairs 3 --budget-s "$bud" \
    --json "$W/ab-$m.json" -- $SEL > "$W/ab-$m.out" 2>&1; rc=$?; echo "[$(el)s] ab $m rc $rc"; tail -15 "$W/ab-$m.out"
  keep
done
n=0
for K in "$EAGER" "$COMPILED"; do
  n=$((n + 1)); lim=$(left 20)
  if [ "$lim" -lt 45 ]; then echo "[$(el)s] tier cold $n ($K): not started, $lim s left"; continue; fi
  echo "[$(el)s] $TIER tier cold $n ($K), limit $lim s"
  ./scripts/gpu-check --tier-time "$TIER" ${REHEARSE:+--device cpu} --tier-phases cold --stage-limit-s "$lim" --out "$G-$n" \
    -- -k "$K" ${REHEARSE:+--perfgate-budget-s 0.3} > "$W/tier-cold-$n.out" 2>&1; rc=$?
  echo "[$(el)s] tier cold $n rc $rc"; tail -30 "$W/tier-cold-$n.out"
  mkdir -p "$W/gt-$n"; cp "$G-$n"/*.json "$G-$n"/*.xml "$G-$n"/*.md "$G-$n"/*.log "$W/gt-$n/" 2>/dev/null
  keep
done
ls -la "$OUT"; echo "[$(el)s] done"
