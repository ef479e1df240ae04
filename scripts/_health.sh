# shellcheck shell=bash
# Sourced by scripts/ci-benchmark and scripts/record-baselines: the GPU health check before they
# measure (`perfgate health`: persistence mode, clocks, other processes, ECC errors, free memory;
# on the CPU it does not apply and passes). Numbers from an unfit GPU would be compared with, or
# recorded as, baselines.
#   PERFGATE_HEALTH=fail  (default) a failed check stops the script with exit 5, "cannot run here",
#                         after writing the reasons and their fixes to OUT/summary.md
#   PERFGATE_HEALTH=warn  report and go on;  PERFGATE_HEALTH=off  skip the check

# health_setting NAME: the setting, or exit 4 (bad input) naming the calling script.
health_setting() {
  local setting="${PERFGATE_HEALTH:-fail}"
  if [[ $setting != fail && $setting != warn && $setting != off ]]; then
    echo "$1: PERFGATE_HEALTH=$setting is not a setting; use fail (default), warn or off" >&2
    exit 4
  fi
  echo "$setting"
}

# health_check SETTING OUT PYTEST_ARGS...: run the check for the device the pytest arguments name
# (needs PY); writes OUT/health.json (and OUT/health.md when a check failed). On a failure under
# `fail`: OUT/summary.md, appended to $GITHUB_STEP_SUMMARY, then exit with perfgate health's code.
health_check() {
  local setting="$1" out="$2" rc=0
  shift 2
  if [[ $setting == off ]]; then return 0; fi
  local health_args=(--json "$out/health.json" --markdown "$out/health.md")
  if [[ $setting == warn ]]; then health_args+=(--warn); fi
  rm -f "$out/health.json" "$out/health.md"
  "$PY" -m perfgate health "${health_args[@]}" -- "$@" || rc=$?
  if (( rc != 0 )); then
    if [[ -s $out/health.md ]]; then
      cp "$out/health.md" "$out/summary.md"
    else
      printf '### perfgate: cannot run here (perfgate health exit %s)\n\nSee the job log.\n' "$rc" > "$out/summary.md"
    fi
    if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
    exit "$rc"
  fi
}
