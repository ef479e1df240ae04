"""The gated metrics: one row each (what it reads, which policy setting, which way is better) and
its judge, a pure function of the current and the baseline record.

Latency regresses only when the slowdown of the median is larger than the tolerance AND
statistically significant on the raw samples (one-sided Mann-Whitney U, scipy): on a shared
2-core machine a 5% threshold on one number alarms all the time, a significance test alone flags
trivial shifts. On a CPU the samples tested are, by default (`normalise`), each round's step time
divided by a fixed reference workload timed in the same round (perfgate.measure.core): the whole
machine's speed drifts between two runs by more than the slowdowns worth catching, and the ratio
cancels it. Reported medians stay in milliseconds. Memory is gated by tolerance plus an absolute
slack; accuracy against the baseline's error; a variant's speedup over the eager baseline of the
same run travels across machines.

A new gated metric is one `GatedMetric` row in `GATED` plus its judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfgate.gate import detectable
from perfgate.gate.detectable import detects
from perfgate.gate.instructions import judge_instructions, judge_kernels
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED, Verdict
from perfgate.record import CaseRecord

Judge = Callable[[str, CaseRecord, CaseRecord, GateSettings], "Verdict | None"]


@dataclass(frozen=True, kw_only=True)
class GatedMetric:
    name: str  # the verdict's metric and the policy's `metric` selector
    reads: str  # the record field it judges (for the reader: what the verdict is about)
    setting: str  # the GateSettings field that sizes its tolerance
    better: str  # "lower" or "higher"
    unit: str  # of the verdict's baseline and current
    timing: bool  # a busy machine spoils it: not judged on an unreliable run
    judge: Judge


# What a latency verdict's change_pct is of (its baseline and current are median milliseconds either way).
NORMALISED = "step/reference ratio"
RAW_MS = "median ms"


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


def judge_latency_samples(
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
        compared = RAW_MS
    else:
        from perfgate.measure.stats import ratios

        ratio, p_slower, p_faster = latency_test(ratios(current, reference[0]), ratios(baseline, reference[1]))
        ref_change = float(np.median(reference[0]) / np.median(reference[1]) - 1) * 100
        what = (
            f"median {cur_med:.3f} ms vs {base_med:.3f} ms ({(cur_med / base_med - 1) * 100:+.1f}% raw, "
            f"reference workload {ref_change:+.1f}%), normalised"
        )
        compared = NORMALISED
    change = (ratio - 1) * 100
    kw = dict(case=case, metric="latency", baseline=base_med, current=cur_med, change_pct=change, compared=compared)
    tol = f"the {s.latency_tolerance:.0%} tolerance"
    faster_pct = (1 / (1 + s.latency_tolerance) - 1) * 100  # the improvement threshold: ratio below 1/(1+tol)
    big_slow, big_fast = ratio > 1 + s.latency_tolerance, ratio < 1 / (1 + s.latency_tolerance)
    if big_slow and p_slower < s.alpha:
        return Verdict(
            **kw,
            verdict=REGRESSION,
            p_value=p_slower,
            message=f"{what}: +{change:.1f}% > {s.latency_tolerance:.0%}, p={p_slower:.2g}",
        )
    if big_fast and p_faster < s.alpha:
        return Verdict(
            **kw,
            verdict=IMPROVEMENT,
            p_value=p_faster,
            message=f"{what}: {change:.1f}% < {faster_pct:.1f}% ({tol} as a speed-up), p={p_faster:.2g}",
        )
    if big_slow or big_fast:
        p = p_slower if big_slow else p_faster
        return Verdict(
            **kw,
            verdict=INCONCLUSIVE,
            p_value=p,
            message=f"{what}: moved {change:+.1f}% but not significantly (p={p:.2g} >= {s.alpha:g}): too noisy to tell",
        )
    return Verdict(
        **kw, verdict=UNCHANGED, p_value=min(p_slower, p_faster), message=f"{what}: {change:+.1f}% within {tol}"
    )


def judge_latency(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict:
    """`_judge_latency`, never claiming more precision than the baseline's recorded noise allows."""
    return within_noise(_judge_latency(case, cur, base, s), base, "latency", s)


def within_noise(v: Verdict, base: CaseRecord, metric: str, s: GateSettings) -> Verdict:
    """A verdict held to its case's detectable change (perfgate.gate.detectable): a regression or
    an improvement smaller than it becomes inconclusive, and so does "unchanged" where it is above
    the tolerance (within the tolerance is not told apart from a change of up to it); every verdict
    says the smallest change the gate reports for the case (`detectable.smallest_change`: never
    below the tolerance)."""
    d, tolerance = detects(base, metric), detectable.tolerance(s, metric)
    note = detectable.change_note(base, metric, s)
    if d is None or v.change_pct is None or not note:
        return v
    if d <= tolerance:
        return replace(v, message=f"{v.message}; {note}")
    note = f"this case {note} (its baseline's passes), above the {tolerance * 100:g}% tolerance"
    if v.verdict == UNCHANGED or (v.verdict in (REGRESSION, IMPROVEMENT) and abs(v.change_pct) < d * 100):
        return replace(v, verdict=INCONCLUSIVE, message=f"{v.message}; {note}: not told apart from noise")
    return replace(v, message=f"{v.message}; {note}")


def judge_instructions_within_noise(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    """`judge_instructions` held to the instruction noise the baseline's passes recorded, as latency
    and device time are: no regression smaller than it is claimed."""
    v = judge_instructions(case, cur, base, s)
    return None if v is None else within_noise(v, base, "instructions", s)


def _judge_latency(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict:
    """Normalised when the policy asks and both sides carry reference samples, else raw (saying why
    when normalisation was asked for). A baseline measured unreliably is not judged against."""
    if base.unreliable:
        return Verdict(
            case=case,
            metric="latency",
            verdict=INCONCLUSIVE,
            current=cur.median_ms,
            message="the baseline of this case was measured unreliably; re-record it",
        )
    if s.normalise and cur.reference_ms and base.reference_ms:
        normalised = judge_latency_samples(
            case, cur.samples_ms, base.samples_ms, s, reference=(cur.reference_ms, base.reference_ms)
        )
        return _guard_reference(normalised, cur, base, s)
    v = judge_latency_samples(case, cur.samples_ms, base.samples_ms, s)
    if not s.normalise or not (cur.reference_ms or base.reference_ms):
        return v  # not asked for, or neither side normalisable (a GPU case)
    side = "the baseline" if not base.reference_ms else "this run"
    note = f"raw ms: {side} has no reference samples to normalise by (re-record the baseline with this perfgate)"
    # A CPU tolerance sized for normalised ratios is too tight for raw ms: no failure on raw ms alone.
    verdict = INCONCLUSIVE if v.verdict == REGRESSION else v.verdict
    return replace(v, verdict=verdict, message=f"{v.message}; {note}" if v.message else note)


def _guard_reference(normalised: Verdict, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict:
    """A reference workload that moved beyond its own noise never turns a slowdown into
    "unchanged" or "improvement".

    Dividing by the reference cancels whatever the reference shares with the step: a change that
    slowed F.linear everywhere slowed the reference as much as the step, and the ratio read -5% to
    -29% ("improvement") on a step whose raw time grew 17-144%. So when the reference itself moved
    beyond the tolerance, significantly, raw milliseconds are judged too: a normalised regression
    stands (the step slowed more than the machine), a raw regression the ratio hides becomes
    inconclusive, saying that the machine or a shared op changed (from one run the two cannot be
    told apart)."""
    ref_ratio, p_slower, p_faster = latency_test(cur.reference_ms or [], base.reference_ms or [])
    moved = (ref_ratio > 1 + s.latency_tolerance and p_slower < s.alpha) or (
        ref_ratio < 1 / (1 + s.latency_tolerance) and p_faster < s.alpha
    )
    if not moved:
        return normalised
    raw = judge_latency_samples(normalised.case, cur.samples_ms, base.samples_ms, s)
    note = (
        f"the reference workload itself moved {(ref_ratio - 1) * 100:+.1f}% (the machine, or an op it shares with "
        "the step "
        f"such as F.linear, changed); raw ms {raw.change_pct:+.1f}% (p={raw.p_value:.2g})"
    )
    if raw.verdict == REGRESSION and normalised.verdict != REGRESSION:
        return replace(
            normalised,
            verdict=INCONCLUSIVE,
            message=f"{normalised.message}: {normalised.verdict} relative to the machine, but {note} is a regression",
        )
    return replace(normalised, message=f"{normalised.message}; {note}")


def judge_device_time(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    """The GPU's busy time per step (kernels, copies, memsets; perfgate.measure.device_time) by
    tolerance: host phases do not move it. A regression names the kernels whose time grew."""
    from perfgate.measure.device_time import grown

    current, baseline = cur.device_ms_per_step, base.device_ms_per_step
    if current is None or baseline is None or baseline <= 0:
        return None
    kw = dict(
        case=case,
        metric="device_time",
        baseline=baseline,
        current=current,
        change_pct=_pct(current, baseline),
        compared="GPU busy ms per step",
    )
    change = current / baseline - 1
    tol = s.device_time_tolerance
    what = f"GPU busy {current:.4g} ms/step vs {baseline:.4g} ms ({change:+.1%})"
    if change > tol:
        names = grown(base.kernel_ms_per_step or {}, cur.kernel_ms_per_step or {})
        grew = f"; {'; '.join(names)}" if names else ""
        v = Verdict(**kw, verdict=REGRESSION, message=f"{what} > {tol:.1%}{grew}")
    elif change < 1 / (1 + tol) - 1:
        v = Verdict(**kw, verdict=IMPROVEMENT, message=f"{what}: less by more than {tol:.1%}")
    else:
        v = Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within {tol:.1%}")
    return within_noise(v, base, "device_time", s)


def judge_memory(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    current, baseline = cur.peak_mem_mib, base.peak_mem_mib
    if current is None or baseline is None:
        return None
    kw = dict(
        case=case,
        metric="memory",
        baseline=baseline,
        current=current,
        change_pct=_pct(current, baseline),
        compared="peak MiB",
    )
    what = f"peak {current:.1f} MiB vs {baseline:.1f} MiB"
    allowance = f"{s.memory_tolerance:.0%} + {s.memory_slack_mib:g} MiB slack"
    if current > baseline * (1 + s.memory_tolerance) + s.memory_slack_mib:
        return Verdict(**kw, verdict=REGRESSION, message=f"{what} (> {allowance})")
    if current < baseline * (1 - s.memory_tolerance) - s.memory_slack_mib:
        return Verdict(**kw, verdict=IMPROVEMENT, message=f"{what} (less by more than {allowance})")
    return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within {allowance}")


def judge_energy(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    """Energy per step against the baseline's, by tolerance like memory: each side is one counter
    window of at least a second, whose own error is recorded (`energy.error_bound_pct`, <= 5%)."""
    current, baseline = cur.energy_j_per_step, base.energy_j_per_step
    if current is None or baseline is None:
        return None
    kw = dict(
        case=case,
        metric="energy",
        baseline=baseline,
        current=current,
        change_pct=_pct(current, baseline),
        compared="J per step",
    )
    what = f"{current:.4g} J/step vs {baseline:.4g} J/step"
    if current > baseline * (1 + s.energy_tolerance):
        return Verdict(**kw, verdict=REGRESSION, message=f"{what} (> {s.energy_tolerance:.0%})")
    if current < baseline / (1 + s.energy_tolerance):
        return Verdict(**kw, verdict=IMPROVEMENT, message=f"{what} (less by more than {s.energy_tolerance:.0%})")
    return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within the {s.energy_tolerance:.0%} tolerance")


def judge_accuracy(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    current, baseline = cur.accuracy.get("rel_l2"), base.accuracy.get("rel_l2")
    if current is None or baseline is None:
        return None
    kw = dict(
        case=case,
        metric="accuracy",
        baseline=baseline,
        current=current,
        change_pct=_pct(current, baseline) if baseline else None,
        compared="relative L2 error",
    )
    what = f"relative L2 error {current:.3g} vs {baseline:.3g} in the baseline"
    allowance = f"{s.accuracy_factor:g}x the baseline's + {s.accuracy_slack:g}"
    if not math.isfinite(current) or current > baseline * s.accuracy_factor + s.accuracy_slack:
        return Verdict(**kw, verdict=REGRESSION, message=f"{what} (> {allowance})")
    return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within {allowance}")


def judge_speedup(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    current, baseline = cur.speedup, base.speedup
    if not current or not baseline:
        return None
    kw = dict(
        case=case,
        metric="speedup",
        baseline=baseline,
        current=current,
        change_pct=_pct(current, baseline),
        compared="speedup over eager",
    )
    what = f"speedup over eager {current:.2f}x vs {baseline:.2f}x recorded"
    bases = (cur.speedup_basis or "median_ms", base.speedup_basis or "median_ms")
    if bases[0] != bases[1]:
        return Verdict(
            **kw,
            verdict=INCONCLUSIVE,
            message=f"speedup from {bases[0]} here but {bases[1]} in the baseline: not comparable; re-record the "
            "baseline",
        )
    if current < baseline * (1 - s.speedup_tolerance):
        return Verdict(**kw, verdict=REGRESSION, message=f"{what} (below -{s.speedup_tolerance:.0%})")
    if current > baseline * (1 + s.speedup_tolerance):
        return Verdict(**kw, verdict=IMPROVEMENT, message=f"{what} (above +{s.speedup_tolerance:.0%})")
    return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within the {s.speedup_tolerance:.0%} tolerance")


GATED: tuple[GatedMetric, ...] = (
    GatedMetric(
        name="latency",
        reads="samples_ms",
        setting="latency_tolerance",
        better="lower",
        unit="ms",
        timing=True,
        judge=judge_latency,
    ),
    GatedMetric(
        name="memory",
        reads="peak_mem_mib",
        setting="memory_tolerance",
        better="lower",
        unit="MiB",
        timing=False,
        judge=judge_memory,
    ),
    GatedMetric(
        name="energy",
        reads="energy_j_per_step",
        setting="energy_tolerance",
        better="lower",
        unit="J",
        timing=True,  # clocks and neighbours move it as they move latency
        judge=judge_energy,
    ),
    GatedMetric(
        name="accuracy",
        reads="accuracy.rel_l2",
        setting="accuracy_factor",
        better="lower",
        unit="",
        timing=False,
        judge=judge_accuracy,
    ),
    GatedMetric(
        name="speedup",
        reads="speedup",
        setting="speedup_tolerance",
        better="higher",
        unit="x",
        timing=True,
        judge=judge_speedup,
    ),
    GatedMetric(
        name="instructions",
        reads="instructions_per_step",
        setting="instructions_tolerance",
        better="lower",
        unit="instructions",
        timing=False,  # counted under callgrind: a busy machine does not move it
        judge=judge_instructions_within_noise,
    ),
    GatedMetric(
        name="device_time",
        reads="device_ms_per_step",
        setting="device_time_tolerance",
        better="lower",
        unit="ms",
        # The kernels' own durations: host phases do not move them, but slowed clocks and other processes
        # on the GPU do, which is what marks a GPU run unreliable: not judged then.
        timing=True,
        judge=judge_device_time,
    ),
    GatedMetric(
        name="kernels",
        reads="kernels_per_step",
        setting="instructions_tolerance",  # unused: any change of the launches per step counts
        better="lower",
        unit="launches",
        timing=False,
        judge=judge_kernels,
    ),
)
METRIC_NAMES = tuple(m.name for m in GATED)
METRIC_UNITS = {m.name: m.unit for m in GATED}
