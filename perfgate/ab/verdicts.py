"""Same-job A/B: the verdict on a case measured in both revisions, in alternating fresh processes.

A stored baseline was measured days earlier, in another process, maybe on another machine; an A/B
comparison measures the base revision (A) and the head (B) in the same job, process after
process, in pairs whose order is random. Per process a case gives one statistic (its median step
time, on a CPU the median step/reference ratio, which cancels the machine's speed), and per pair
the ratio B/A; the pairs' log ratios are tested with the Wilcoxon signed-rank test (scipy),
one-sided: a regression needs p < alpha AND a median ratio above 1 + `ab_min_effect`. Pairing
cancels what two adjacent processes share (the machine's state at that minute); repeating fresh
processes averages what one process has alone (memory layout, thread placement).

The decision is sequential, so a clear case stops early: "unchanged" as soon as the 95%
confidence interval of the median ratio lies within +-`ab_min_effect`, a regression or improvement
as soon as it is significant (Wilcoxon's exact test needs at least 7 pairs for p < 0.01), else
"inconclusive" when the pairs run out. Memory, accuracy and speedup are judged on the per-side
medians with the stored gate's own judges; on a GPU the device time per step by the pairs' (or,
interleaved, one window's blocks') log ratios, whose mean a t test judges.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfgate.ab.job import CaseResult, Measured, NotMeasured
from perfgate.gate.instructions import judge_instructions
from perfgate.gate.metrics import judge_accuracy, judge_memory, judge_speedup
from perfgate.gate.paired import judge_device_time_rounds, judge_logs
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import ERROR, INCONCLUSIVE, UNRELIABLE, Verdict
from perfgate.record import CaseRecord


@dataclass(frozen=True, kw_only=True)
class Pair:
    """One case measured once in each revision, in adjacent processes."""

    base: CaseRecord
    head: CaseRecord

    @property
    def reliable(self) -> bool:
        return not (self.base.unreliable or self.head.unreliable)


def timing(rec: CaseRecord, normalise: bool) -> float:
    """The per-process statistic paired: the step/reference ratio's median where both are there."""
    if normalise and rec.normalised_median is not None:
        return rec.normalised_median
    if rec.median_ms is None:
        raise ValueError(f"{rec.model} {rec.variant}: a record without median_ms cannot be compared")
    return rec.median_ms


def log_ratios(pairs: Sequence[Pair], s: GateSettings) -> list[float]:
    """log(head / base) per reliable pair; normalised only when every record of the pairs has it."""
    reliable = [p for p in pairs if p.reliable]
    normalise = s.normalise and all(r.normalised_median is not None for p in reliable for r in (p.base, p.head))
    return [math.log(timing(p.head, normalise) / timing(p.base, normalise)) for p in reliable]


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def latency_verdict(case: str, pairs: Sequence[Pair], s: GateSettings, *, final: bool) -> Verdict | None:
    """Process mode: the latency verdict of the process pairs so far, or None while more are needed."""
    reliable = [p for p in pairs if p.reliable]
    return judge_logs(
        case,
        log_ratios(pairs, s),
        s,
        final=final,
        unit="process pair",
        test="wilcoxon",
        n_total=len(pairs),
        baseline_ms=_median([p.base.median_ms for p in reliable]),
        current_ms=_median([p.head.median_ms for p in reliable]),
    )


def _device_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    return [p for p in pairs if p.reliable and p.base.device_ms_per_step and p.head.device_ms_per_step]


def device_time_verdict(case: str, pairs: Sequence[Pair], s: GateSettings, *, final: bool = True) -> Verdict | None:
    """Process mode: the GPU busy time per step of each process's profiler window, head/base per
    reliable pair, by the mean of the log ratios (a t test; device time adds up and host phases do
    not reach it) with `device_time_tolerance` as the smallest effect. Adjacent processes share the
    GPU's speed of that minute, which a stored record does not (an H200's 1.4 ms bf16 block read
    -0.3..+7.8% against its record on unchanged code, docs/gpu-runs.md). None without device time,
    or while more pairs are needed (not `final`)."""
    both = _device_pairs(pairs)
    if not both:
        return None
    return judge_logs(
        case,
        [math.log(p.head.device_ms_per_step / p.base.device_ms_per_step) for p in both],  # type: ignore[operator]
        replace(s, ab_min_effect=s.device_time_tolerance),
        final=final,
        unit="process pair",
        test="t",
        n_total=len(both),
        baseline_ms=_median([p.base.device_ms_per_step for p in both]),
        current_ms=_median([p.head.device_ms_per_step for p in both]),
        metric="device_time",
    )


def interleaved_verdicts(
    case: str, results: Sequence[CaseResult], policy: Policy, *, final: bool
) -> list[Verdict] | None:
    """Interleaved mode: verdicts from per-process results of `perfgate.ab.interleave` (each a median
    head/base ratio of interleaved rounds), or None while more processes are needed."""
    ok = [r for r in results if isinstance(r, Measured)]
    if not ok:
        if not final:
            return None
        if raised := next((r.error for r in results if isinstance(r, NotMeasured) and r.raised), None):
            return [Verdict(case=case, metric="run", verdict=ERROR, message=raised)]  # as the stored gate says it
        why = next((r.skipped or r.error for r in results if isinstance(r, NotMeasured)), None) or "not measured"
        return [Verdict(case=case, metric="latency", verdict=INCONCLUSIVE, message=why)]
    last = ok[-1]

    def settings(metric: str) -> GateSettings:
        return policy.settings(last.model, last.variant, metric, last.device)

    latency = judge_logs(
        case,
        [math.log(r.ratio) for r in ok],
        settings("latency"),
        final=final,
        unit="process",
        test="t",
        n_total=len(results),
        baseline_ms=_median([r.median_base_ms for r in ok]),
        current_ms=_median([r.median_head_ms for r in ok]),
    )
    if latency is None:
        return None
    base = CaseRecord(
        model=last.model,
        variant=last.variant,
        device=last.device,
        peak_mem_mib=_median([r.peak_base_mib for r in ok]),
        accuracy=dict(last.accuracy_base),
    )
    head = replace(base, peak_mem_mib=_median([r.peak_head_mib for r in ok]), accuracy=dict(last.accuracy_head))
    blocks = [r for r in ok if r.device_base_ms and r.device_head_ms]
    others = [
        judge_device_time_rounds(
            case,
            [x for r in blocks for x in r.device_head_ms or ()],
            [x for r in blocks for x in r.device_base_ms or ()],
            settings("device_time"),
            block_steps=blocks[-1].device_block_steps or 1,
        )
        if blocks
        else _device_not_measured(case, ok),
        judge_memory(case, head, base, settings("memory")),
        judge_accuracy(case, head, base, settings("accuracy")),
    ]
    return [latency, *(v for v in others if v is not None)]


def _device_not_measured(case: str, results: Sequence[Measured]) -> Verdict | None:
    """Interleaved mode on a GPU whose device-time window failed in every process: said, not silent."""
    errors = [r.device_error for r in results if r.device_error]
    if not errors:
        return None
    return Verdict(case=case, metric="device_time", verdict=INCONCLUSIVE, message=f"not measured: {errors[-1]}")


def _side(pairs: Sequence[Pair], side: str) -> CaseRecord:
    """One side's record with the medians over its processes (peak memory, error, speedup)."""
    recs = [getattr(p, side) for p in pairs]

    med = _median
    acc = {k: med([r.accuracy.get(k) for r in recs]) for k in recs[-1].accuracy}
    return replace(
        recs[-1],
        peak_mem_mib=med([r.peak_mem_mib for r in recs]),
        speedup=med([r.speedup for r in recs]),
        accuracy={k: v for k, v in acc.items() if v is not None},
    )


def verdicts(case: str, pairs: Sequence[Pair], policy: Policy, *, final: bool) -> list[Verdict] | None:
    """Every metric's verdict for a case, or None while its latency needs more pairs."""
    head_rec = pairs[-1].head if pairs else None
    if head_rec is None:
        return (
            None if not final else [Verdict(case=case, metric="latency", verdict=INCONCLUSIVE, message="not measured")]
        )

    def settings(metric: str) -> GateSettings:
        return policy.settings(head_rec.model, head_rec.variant, metric, head_rec.device)

    # On a CPU with instruction counts on both sides they decide, one process per side (counts do not
    # need pairs to average noise away); the time verdict of the pairs so far stands beside them.
    counted = next((p for p in pairs if None not in (p.base.instructions_per_step, p.head.instructions_per_step)), None)
    latency = latency_verdict(case, pairs, settings("latency"), final=final or counted is not None)
    if latency is None:
        return None
    # The case stays scheduled while its device time is undecided too (latency alone can settle first).
    device = device_time_verdict(case, pairs, settings("device_time"), final=final)
    if device is None and not final and _device_pairs(pairs):
        return None
    base, head = _side(pairs, "base"), _side(pairs, "head")
    others = [
        judge_instructions(case, counted.head, counted.base, settings("instructions")) if counted else None,
        device,
        judge_memory(case, head, base, settings("memory")),
        judge_accuracy(case, head, base, settings("accuracy")),
    ]
    if latency.verdict != UNRELIABLE:
        others.append(judge_speedup(case, head, base, settings("speedup")))
    return [latency, *(v for v in others if v is not None)]
