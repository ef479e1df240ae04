"""The regression gate: `compare(current, baseline, policy) -> list[Verdict]`, pure.

Latency regresses only when the slowdown of the median is larger than the tolerance AND
statistically significant on the raw samples (one-sided Mann-Whitney U, scipy): on a shared
2-core machine a 5% threshold on one number alarms all the time, a significance test alone flags
trivial shifts. Memory is gated by tolerance plus an absolute slack; accuracy against the
baseline's error; a variant's speedup over the baseline of the same run travels across machines.

On a CPU the samples the latency test sees are, by default (`normalise`), each round's step time
divided by a fixed reference workload timed in the same round (perfgate.measure): on a shared machine
the whole machine's speed drifts between two runs by more than the slowdowns worth catching, and
the ratio cancels it. Reported medians stay in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from perfgate.policy import GateSettings, Policy

REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no baseline"
UNRELIABLE = "unreliable"
BUDGET = "budget"  # an absolute real-time target missed
VERDICT_ORDER = (REGRESSION, BUDGET, UNRELIABLE, INCONCLUSIVE, IMPROVEMENT, NO_BASELINE, UNCHANGED)
FAILING = (REGRESSION, BUDGET)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    case: str
    metric: str
    verdict: str
    baseline: float | None = None
    current: float | None = None
    change_pct: float | None = None
    p_value: float | None = None
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(cur: float, base: float) -> float | None:
    return (cur / base - 1.0) * 100.0 if base else None


def latency_test(current: Sequence[float], baseline: Sequence[float]) -> tuple[float, float, float]:
    """(median ratio current/baseline, p slower, p faster): one-sided Mann-Whitney U on raw samples."""
    from scipy import stats as sps  # imported here: history and report start faster without scipy

    cur, base = np.asarray(current, float), np.asarray(baseline, float)
    ratio = float(np.median(cur) / np.median(base))
    p_slower = float(sps.mannwhitneyu(cur, base, alternative="greater").pvalue)
    p_faster = float(sps.mannwhitneyu(cur, base, alternative="less").pvalue)
    return ratio, p_slower, p_faster


def judge_latency(
    case: str,
    current: Sequence[float],
    baseline: Sequence[float],
    s: GateSettings,
    *,
    reference: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Verdict:
    """Latency verdict on raw samples in ms, or with `reference` = (current's, baseline's reference
    samples, paired round by round) on the step/reference ratios; medians are reported in ms."""
    base_med, cur_med = float(np.median(baseline)), float(np.median(current))
    if reference is None:
        ratio, p_slower, p_faster = latency_test(current, baseline)
        what = f"median {cur_med:.3f} ms vs {base_med:.3f} ms"
    else:
        from perfgate.stats import ratios

        ratio, p_slower, p_faster = latency_test(ratios(current, reference[0]), ratios(baseline, reference[1]))
        ref_change = float(np.median(reference[0]) / np.median(reference[1]) - 1) * 100
        what = (f"median {cur_med:.3f} ms vs {base_med:.3f} ms ({(cur_med / base_med - 1) * 100:+.1f}% raw, "
                f"reference workload {ref_change:+.1f}%), normalised")
    kw = dict(case=case, metric="latency", baseline=base_med, current=cur_med, change_pct=(ratio - 1) * 100)
    big_slow, big_fast = ratio > 1 + s.latency_tolerance, ratio < 1 / (1 + s.latency_tolerance)
    if big_slow and p_slower < s.alpha:
        return Verdict(**kw, verdict=REGRESSION, p_value=p_slower,
                       message=f"{what}: +{(ratio - 1) * 100:.1f}% > {s.latency_tolerance:.0%}, p={p_slower:.2g}")
    if big_fast and p_faster < s.alpha:
        return Verdict(**kw, verdict=IMPROVEMENT, p_value=p_faster, message=f"{what}: {(ratio - 1) * 100:.1f}%, p={p_faster:.2g}")
    if big_slow or big_fast:
        p = p_slower if big_slow else p_faster
        return Verdict(**kw, verdict=INCONCLUSIVE, p_value=p,
                       message=f"{what}: moved {(ratio - 1) * 100:+.1f}% but not significantly (p={p:.2g} >= {s.alpha:g}): too noisy to tell")
    return Verdict(**kw, verdict=UNCHANGED, p_value=min(p_slower, p_faster), message=what if reference else "")


def judge_latency_entries(case: str, cur: Mapping[str, Any], base: Mapping[str, Any], s: GateSettings) -> Verdict:
    """Latency of two entries' extra_info: normalised when the policy asks and both sides carry
    reference samples, else raw (saying why when normalisation was asked for)."""
    if s.normalise and cur.get("reference_ms") and base.get("reference_ms"):
        return judge_latency(case, cur["samples_ms"], base["samples_ms"], s, reference=(cur["reference_ms"], base["reference_ms"]))
    v = judge_latency(case, cur["samples_ms"], base["samples_ms"], s)
    if not s.normalise or not (cur.get("reference_ms") or base.get("reference_ms")):
        return v  # not asked for, or neither side normalisable (a GPU case)
    side = "the baseline" if not base.get("reference_ms") else "this run"
    note = f"raw ms: {side} has no reference samples to normalise by (re-record the baseline with this perfgate)"
    # A CPU tolerance sized for normalised ratios is too tight for raw ms: no failure on raw ms alone.
    verdict = INCONCLUSIVE if v.verdict == REGRESSION else v.verdict
    return replace(v, verdict=verdict, message=f"{v.message}; {note}" if v.message else note)


def pool_entries(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The timing keys of several runs' extra_info pooled into one: samples concatenated, reference
    samples only when every run has them, unreliable when any run was."""
    pooled: dict[str, Any] = {"samples_ms": [x for i in infos for x in i["samples_ms"]], "reference_ms": None}
    if all(i.get("reference_ms") for i in infos):
        pooled["reference_ms"] = [x for i in infos for x in i["reference_ms"]]
    pooled["unreliable"] = "; ".join(i["unreliable"] for i in infos if i.get("unreliable")) or None
    return pooled


def judge_memory(case: str, current: float, baseline: float, s: GateSettings) -> Verdict:
    kw = dict(case=case, metric="memory", baseline=baseline, current=current, change_pct=_pct(current, baseline))
    if current > baseline * (1 + s.memory_tolerance) + s.memory_slack_mib:
        return Verdict(**kw, verdict=REGRESSION, message=f"peak {current:.1f} MiB vs {baseline:.1f} MiB (> {s.memory_tolerance:.0%} + {s.memory_slack_mib:g} MiB)")
    if current < baseline * (1 - s.memory_tolerance) - s.memory_slack_mib:
        return Verdict(**kw, verdict=IMPROVEMENT, message=f"peak {current:.1f} MiB vs {baseline:.1f} MiB")
    return Verdict(**kw, verdict=UNCHANGED)


def judge_accuracy(case: str, current: float, baseline: float, s: GateSettings) -> Verdict:
    kw = dict(case=case, metric="accuracy", baseline=baseline, current=current, change_pct=_pct(current, baseline) if baseline else None)
    if not math.isfinite(current) or current > baseline * s.accuracy_factor + s.accuracy_slack:
        return Verdict(**kw, verdict=REGRESSION, message=f"relative L2 error {current:.3g} vs {baseline:.3g} in the baseline")
    return Verdict(**kw, verdict=UNCHANGED)


def judge_speedup(case: str, current: float, baseline: float, s: GateSettings) -> Verdict:
    kw = dict(case=case, metric="speedup", baseline=baseline, current=current, change_pct=_pct(current, baseline))
    if current < baseline * (1 - s.speedup_tolerance):
        return Verdict(**kw, verdict=REGRESSION, message=f"speedup over baseline {current:.2f}x vs {baseline:.2f}x recorded")
    if current > baseline * (1 + s.speedup_tolerance):
        return Verdict(**kw, verdict=IMPROVEMENT, message=f"speedup over baseline {current:.2f}x vs {baseline:.2f}x recorded")
    return Verdict(**kw, verdict=UNCHANGED)


def compare_case(current: Mapping[str, Any], baseline: Mapping[str, Any] | None, policy: Policy) -> list[Verdict]:
    """Verdicts for one benchmark entry (pytest-benchmark JSON with perfgate's extra_info)."""
    cur = current["extra_info"]
    case, model, variant = current["fullname"], cur.get("model", "*"), cur.get("variant", "*")
    device = str(cur.get("device", ""))
    pooled = cur.get("pooled") if isinstance(cur.get("pooled"), Mapping) else None
    unreliable = cur.get("unreliable") or (pooled or {}).get("unreliable")
    out = [Verdict(case=case, metric="latency", verdict=UNRELIABLE, current=cur.get("median_ms"), message=unreliable)] if unreliable else []
    if baseline is None:
        return out or [Verdict(case=case, metric="latency", verdict=NO_BASELINE, current=cur.get("median_ms"))]
    base = baseline["extra_info"]
    # Only timings depend on a busy machine: memory and accuracy are gated whatever the noise.
    if base.get("unreliable") and not unreliable:
        out.append(Verdict(case=case, metric="latency", verdict=INCONCLUSIVE, current=cur.get("median_ms"),
                           message="the baseline of this case was measured unreliably; re-record it"))
    elif not unreliable:
        # A re-measured case is judged on its pooled runs, as the session judged it.
        timing = {**cur, **pooled} if pooled else cur
        out.append(judge_latency_entries(case, timing, base, policy.settings(model, variant, "latency", device)))
    if cur.get("peak_mem_mib") is not None and base.get("peak_mem_mib") is not None:
        out.append(judge_memory(case, cur["peak_mem_mib"], base["peak_mem_mib"], policy.settings(model, variant, "memory", device)))
    cur_acc, base_acc = cur.get("accuracy", {}), base.get("accuracy", {})
    if "rel_l2" in cur_acc and "rel_l2" in base_acc:
        out.append(judge_accuracy(case, cur_acc["rel_l2"], base_acc["rel_l2"], policy.settings(model, variant, "accuracy", device)))
    if cur.get("speedup") and base.get("speedup") and not unreliable:
        bases = (cur.get("speedup_basis", "median_ms"), base.get("speedup_basis", "median_ms"))
        if bases[0] == bases[1]:
            out.append(judge_speedup(case, cur["speedup"], base["speedup"], policy.settings(model, variant, "speedup", device)))
        else:
            out.append(Verdict(case=case, metric="speedup", verdict=INCONCLUSIVE, baseline=base["speedup"], current=cur["speedup"],
                               message=f"speedup from {bases[0]} here but {bases[1]} in the baseline: not comparable; re-record the baseline"))
    return out


def judge_budgets(current: Mapping[str, Any], policy: Policy, hardware: str) -> list[Verdict]:
    """Absolute real-time targets from the policy, asserted whatever the baseline says."""
    cur = current["extra_info"]
    case = current["fullname"]
    out = []
    for b in policy.budgets_for(cur.get("model", ""), cur.get("size", ""), cur.get("variant", ""), hardware):
        checks = (
            ("fps", b.min_fps, cur.get("fps"), lambda v, t: v >= t, "at least"),
            ("p90_ms", b.max_p90_ms, cur.get("p90_ms"), lambda v, t: v <= t, "at most"),
            ("median_ms", b.max_median_ms, cur.get("median_ms"), lambda v, t: v <= t, "at most"),
            ("peak_mem_mib", b.max_peak_mem_mib, cur.get("peak_mem_mib"), lambda v, t: v <= t, "at most"),
        )
        for name, target, value, ok, word in checks:
            if target is None or value is None:
                continue
            verdict = UNCHANGED if ok(value, target) else BUDGET
            out.append(Verdict(case=case, metric=f"budget:{name}", verdict=verdict, baseline=target, current=value,
                               message="" if verdict == UNCHANGED else f"{name} {value:.3g}, budget {word} {target:g}"))
    return out


def sort_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Regressions first, then by case and metric."""
    return sorted(verdicts, key=lambda v: (VERDICT_ORDER.index(v.verdict) if v.verdict in VERDICT_ORDER else 99, v.case, v.metric))


def failing(verdicts: Sequence[Verdict], *, fail_on_improvement: bool = False) -> list[Verdict]:
    bad = set(FAILING) | ({IMPROVEMENT} if fail_on_improvement else set())
    return [v for v in verdicts if v.verdict in bad]
