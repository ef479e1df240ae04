"""The paired latency judge: per-pair log ratios current/base, as same-job A/B measures them.

`perfgate ab` pairs fresh processes of the base and the head revision (or, interleaved, the two
revisions' rounds inside each process); the GPU quality run pairs the rounds of one interleaved
window. Either way what is judged is the list of log ratios, here, with one rule: a regression
needs p < alpha AND an estimate above 1 + `ab_min_effect`; "unchanged" once the 95% confidence
interval lies within +-`ab_min_effect`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED, UNRELIABLE, Verdict
from perfgate.measure.stats import median_ci, median_ci_holds

MIN_PAIRS = 3  # fewer pairs than this decide nothing


def _wilcoxon(logs: Sequence[float]) -> tuple[float, float]:
    """(p slower, p faster): one-sided Wilcoxon signed-rank tests of the log ratios against 0."""
    from scipy import stats as sps

    if all(x == 0 for x in logs):
        return 1.0, 1.0
    slower = float(sps.wilcoxon(logs, alternative="greater").pvalue)
    faster = float(sps.wilcoxon(logs, alternative="less").pvalue)
    return slower, faster


def _t_test(logs: Sequence[float]) -> tuple[float, float, float, float]:
    """(p slower, p faster, CI low, CI high) of the mean log ratio: one-sample t-tests (scipy)."""
    from scipy import stats as sps

    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    if sd == 0:  # identical figures: no spread to test against, the sign decides
        return (0.0 if mean > 0 else 1.0), (0.0 if mean < 0 else 1.0), mean, mean
    p_slower = float(sps.ttest_1samp(logs, 0.0, alternative="greater").pvalue)
    p_faster = float(sps.ttest_1samp(logs, 0.0, alternative="less").pvalue)
    half = float(sps.t.ppf(0.975, len(logs) - 1)) * sd / math.sqrt(len(logs))
    return p_slower, p_faster, mean - half, mean + half


def judge_logs(
    case: str,
    logs: Sequence[float],
    s: GateSettings,
    *,
    final: bool,
    unit: str,
    test: str,
    baseline_ms: float | None,
    current_ms: float | None,
    n_total: int,
    metric: str = "latency",
) -> Verdict | None:
    """A latency verdict on per-process log ratios head/base, or None while more are needed (never
    when `final`: then an undecided case is inconclusive, saying why).

    `test`: "wilcoxon" for process pairs (a rank test: one outlying process cannot decide) or "t" for
    the per-process medians of interleaved rounds (nearly normal: 3 processes decide, where the rank
    test needs 7 for p < 0.01)."""
    if len(logs) < MIN_PAIRS:
        if not final:
            return None
        why = f"{len(logs)} reliable {unit}(s) of {n_total}: too few to judge"
        return Verdict(case=case, metric=metric, verdict=UNRELIABLE if n_total else INCONCLUSIVE, message=why)
    if test == "t":
        p_slower, p_faster, lo_log, hi_log = _t_test(logs)
        est = math.exp(statistics.fmean(logs))
    else:
        p_slower, p_faster = _wilcoxon(logs)
        lo_log, hi_log = median_ci(logs)
        est = math.exp(statistics.median(logs))
        if not median_ci_holds(len(logs)):  # [min, max] of 5 or fewer covers the median less than 95% of the time
            lo_log, hi_log = -math.inf, math.inf
    lo, hi = math.exp(lo_log), math.exp(hi_log)
    up, down = 1 + s.ab_min_effect, 1 / (1 + s.ab_min_effect)
    ci = f"95% CI {(lo - 1) * 100:+.1f}%..{(hi - 1) * 100:+.1f}%" if math.isfinite(hi_log) else "no 95% CI from so few"
    units = unit + ("es" if unit.endswith("s") else "s")  # "processes", "rounds", "process pairs"
    what = f"head/base {(est - 1) * 100:+.1f}% ({ci}) over {len(logs)} {units}"
    judged = partial(
        Verdict,
        case=case,
        metric=metric,
        change_pct=(est - 1) * 100,
        baseline=baseline_ms,
        current=current_ms,
        compared=f"head/base per {unit}",
    )
    p = min(p_slower, p_faster)
    if p_slower < s.alpha and est > up:
        return judged(verdict=REGRESSION, p_value=p_slower, message=f"{what}, p={p_slower:.2g}")
    if p_faster < s.alpha and est < down:
        return judged(verdict=IMPROVEMENT, p_value=p_faster, message=f"{what}, p={p_faster:.2g}")
    if down < lo and hi < up:
        return judged(verdict=UNCHANGED, p_value=p, message=f"{what}: within +-{s.ab_min_effect * 100:g}%")
    if not final:
        return None
    # Undecided when the pairs ran out: never "unchanged" on the estimate alone, whose interval
    # still reaches past the smallest effect (a +2.5% change read so in about 1 run of 4).
    moved = est > up or est < down
    why = (
        "moved but not significantly"
        if moved
        else f"within +-{s.ab_min_effect * 100:g}% by its estimate, but its interval reaches beyond: not told apart"
    )
    nonzero = sum(1 for x in logs if x != 0)  # the rank test drops zero differences
    if test != "t" and 0.5**nonzero >= s.alpha:  # its smallest one-sided p: 2 ** -n
        why += f"; {len(logs)} {units} cannot reach p < {s.alpha:g} by the rank test (at best {0.5**nonzero:.2g})"
    return judged(verdict=INCONCLUSIVE, p_value=p, message=f"{what}: {why} (p={p:.2g})")


def judge_rounds(
    case: str,
    current: Sequence[float],
    base: Sequence[float],
    s: GateSettings,
    *,
    metric: str = "latency",
    test: str = "wilcoxon",
    unit: str = "round",
) -> Verdict:
    """Same-job A/B within one window: the per-round log ratios current/base of two steps
    interleaved round by round (a phase lasting many rounds hits both sides of a round alike),
    by the rule above (`ab_min_effect`; Wilcoxon signed-rank unless `test` is "t")."""
    logs = [math.log(c / b) for c, b in zip(current, base, strict=True) if c > 0 and b > 0]
    v = judge_logs(
        case,
        logs,
        s,
        final=True,
        unit=unit,
        test=test,
        baseline_ms=statistics.median(base) if base else None,
        current_ms=statistics.median(current) if current else None,
        n_total=len(logs),
        metric=metric,
    )
    assert v is not None  # final: always a verdict
    return v


def judge_device_time_rounds(
    case: str, current_ms: Sequence[float], base_ms: Sequence[float], s: GateSettings, *, block_steps: int = 1
) -> Verdict | None:
    """The GPU busy time judged as same-job A/B: the per-block log ratios of one profiler window in
    which the two steps alternate (perfgate.measure.op_counts.interleaved_device_ms, `block_steps`
    steps a block), `device_time_tolerance` the smallest effect. By their MEAN (a t test), not the
    median the wall-time rounds use: device time adds up, host phases do not reach it, and a
    slowdown that hits some blocks only is a slowdown (the H200's bf16 block, GPU-side +2% hitting
    one step in five: the median of single-step rounds read it +0.0%, "unchanged", 20 times of 20).
    None without device time (a CPU run)."""
    if not current_ms or not base_ms:
        return None
    unit = "round" if block_steps == 1 else "block"
    v = judge_rounds(
        case,
        current_ms,
        base_ms,
        replace(s, ab_min_effect=s.device_time_tolerance),
        metric="device_time",
        test="t",
        unit=unit,
    )
    per = "round" if block_steps == 1 else f"block of {block_steps} steps"
    return replace(v, compared=f"GPU busy ms per step, current/base per {per} of one window")
