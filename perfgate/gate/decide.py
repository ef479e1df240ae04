"""The gate's decisions, pure: is a run reliable, what does it say against its baseline, must it be
re-measured, and the absolute checks (accuracy tolerance, real-time budgets, graph breaks).

`decide(runs, baseline, policy)` is the one rule for a case: the session calls it after each
measurement and re-measures while it asks to; the gate-quality experiment calls it on its runs;
the profiler asks `unreliable_reason`. A suspected latency regression is re-measured (a bounded
number of times) before it stands, since one noisy neighbour can fake a slowdown. By default
(`remeasure_pooled`) the suspect run and its re-measurements are judged once, pooled: on the
development VM that caught a 10% slowdown 49 and 47 times in 50 (two runs) against 45 and 43 when
every re-measurement had to regress on its own (docs/gate-quality.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfgate.gate.metrics import GATED
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import BUDGET, INCONCLUSIVE, NO_BASELINE, REGRESSION, UNCHANGED, UNRELIABLE, Verdict
from perfgate.measure.stats import TAIL_MIN_SAMPLES
from perfgate.measure.telemetry import SLOWDOWN_REASONS
from perfgate.record import CaseRecord, Pooled, Telemetry

# --- reliability --------------------------------------------------------------------------------

# Clock-event reasons (perfgate.measure.telemetry decodes them) that mean the clocks were pulled down by heat
# or hardware protection: a sample taken then measures the cooling, not the code. The power cap
# alone is normal under full load on data-centre GPUs; it counts only through the clock check.


@dataclass(frozen=True, kw_only=True)
class TelemetryRule:
    """When GPU telemetry makes a measurement untrustworthy.

    slowdown_share_max: share of the samples that read a clock-event mask with a thermal /
      hardware slowdown reason.
    clock_ratio_min: mean SM clock while busy (the samples where NVML saw work and no GpuIdle:
      perfgate.measure.telemetry.is_busy) over the GPU's maximum SM clock; nvbench's default
      throttle threshold is 75% of the default clock.
    """

    slowdown_share_max: float = 0.05
    clock_ratio_min: float = 0.75
    other_gpu_processes_max: int = 0


def telemetry_reason(summary: Telemetry, rule: TelemetryRule = TelemetryRule(), *, clocks: bool = True) -> str | None:
    """Why a measurement with this telemetry summary is not trustworthy, or None. `clocks=False`:
    the rounds were checked for throttling one by one (perfgate.measure.throttle), so the sampler's
    clock shares say nothing about the samples kept."""
    reasons = []
    events = (summary.clock_events or {}) if clocks else {}
    slow = {r: events[r] for r in SLOWDOWN_REASONS if events.get(r, 0.0) > rule.slowdown_share_max}
    if slow:
        listed = ", ".join(f"{r} in {share:.0%} of samples" for r, share in slow.items())
        reasons.append(f"GPU clocks were slowed ({listed})")
    busy_clock = summary.busy_sm_clock_mhz.mean if summary.busy_sm_clock_mhz else None
    max_clock = summary.gpu.max_sm_clock_mhz if summary.gpu else None
    if clocks and busy_clock and max_clock and busy_clock < rule.clock_ratio_min * max_clock:
        reasons.append(
            f"mean SM clock while busy {busy_clock:.0f} MHz is {busy_clock / max_clock:.0%} of the maximum "
            f"{max_clock:.0f} MHz (< {rule.clock_ratio_min:.0%})"
        )
    others = summary.gpu_other_processes_max
    if others is not None and others > rule.other_gpu_processes_max:
        reasons.append(f"{others} other process(es) computed on the GPU")
    return "; ".join(reasons) + ": timings are not trustworthy" if reasons else None


def unreliable_reason(record: CaseRecord, settings: GateSettings) -> str | None:
    """Why this measurement's timings cannot be trusted, or None: on a CPU, other processes' CPU
    use above `contention_max` (on a 2-core machine one busy neighbour slows a 2-thread run tenfold);
    on a GPU, throttled clocks or other processes on it."""
    problems: list[str | None] = []
    if record.device.startswith("cpu") and (record.contention_cores or 0.0) > settings.contention_max:
        problems.append(
            f"other processes used {record.contention_cores:.2f} cores during the measurement "
            f"(> {settings.contention_max:g}): timings are not trustworthy"
        )
    problems.append(gpu_state_reason(record))
    return "; ".join(p for p in problems if p) or None


def against_distrusted_baseline(v: Verdict, gpu: str) -> Verdict:
    """A verdict against a baseline whose GPU was in no state to time it (`gpu_state_reason`):
    inconclusive, saying why; the figures it compared stay in its message."""
    why = f"the baseline was measured unreliably ({gpu}); re-record it"
    return replace(v, verdict=INCONCLUSIVE, message=f"{v.message}; {why}" if v.message else why)


def gpu_state_reason(record: CaseRecord) -> str | None:
    """Why the GPU a record was measured on was in no state to time it (throttled clocks, too few
    clean rounds, other processes on it), from the record's own telemetry; None where it was, or
    where no telemetry was kept (a CPU run)."""
    problems: list[str | None] = []
    if record.telemetry:
        problems.append(telemetry_reason(record.telemetry, clocks=record.throttle is None))
    throttle = record.throttle
    if throttle is not None and throttle.too_few:
        problems.append(
            f"{throttle.dropped} of {throttle.dropped + throttle.kept} rounds ran throttled "
            f"({', '.join(f'{k} {v}x' for k, v in throttle.reasons.items())}); "
            f"only {throttle.kept} clean rounds remain: timings are not trustworthy"
        )
    return "; ".join(p for p in problems if p) or None


# --- against the baseline -----------------------------------------------------------------------


def pool(records: Sequence[CaseRecord]) -> CaseRecord:
    """The last record with the timings of all pooled: samples concatenated, reference samples only
    when every run has them, unreliable when any run was."""
    last = records[-1]
    reference = [x for r in records for x in r.reference_ms] if all(r.reference_ms for r in records) else None
    unreliable = "; ".join(r.unreliable for r in records if r.unreliable) or None
    return replace(
        last, samples_ms=[x for r in records for x in r.samples_ms], reference_ms=reference, unreliable=unreliable
    )


def pooled_block(records: Sequence[CaseRecord]) -> Pooled:
    """What a re-measured case keeps in its record (`pooled`), so `perfgate compare` on the JSON
    judges what the session judged."""
    p = pool(records)
    return Pooled(runs=len(records), samples_ms=p.samples_ms, reference_ms=p.reference_ms, unreliable=p.unreliable)


def timing_record(record: CaseRecord) -> CaseRecord:
    """The record with its pooled timings where it was re-measured."""
    block = record.pooled
    if block is None:
        return record
    return replace(
        record,
        samples_ms=list(block.samples_ms),
        reference_ms=block.reference_ms,
        unreliable=record.unreliable or block.unreliable,
    )


def compare(case: str, current: CaseRecord, baseline: CaseRecord | None, policy: Policy) -> list[Verdict]:
    """Verdicts for one case against its baseline record: every gated metric's judge, the timing
    ones only on a reliable run."""
    cur = timing_record(current)
    out = (
        [Verdict(case=case, metric="latency", verdict=UNRELIABLE, current=cur.median_ms, message=cur.unreliable)]
        if cur.unreliable
        else []
    )
    if baseline is None:
        why = "no recorded baseline holds this case: nothing to compare with"
        return out or [Verdict(case=case, metric="latency", verdict=NO_BASELINE, current=cur.median_ms, message=why)]
    for metric in GATED:
        if metric.timing and cur.unreliable:
            continue  # only timings depend on a busy machine: memory and accuracy are gated whatever the noise
        v = metric.judge(case, cur, baseline, policy.settings(cur.model, cur.variant, metric.name, cur.device))
        # The GPU's busy time and energy of a baseline measured on throttled clocks or beside another
        # process on its GPU are that state's (latency's judge reads the record's flag, which passes
        # that disagree set too: these ask the baseline's own telemetry, as the run's own was asked).
        gpu = gpu_state_reason(baseline) if v is not None and metric.name in ("device_time", "energy") else None
        if v is not None and gpu is not None:
            v = against_distrusted_baseline(v, gpu)
        if v is not None:
            out.append(v)
    return out


# --- absolute checks ----------------------------------------------------------------------------


def accuracy_violations(acc: Mapping[str, float], tol: Mapping[str, Any]) -> list[str]:
    """Why the accuracy figures break the variant's tolerance (rel_l2 at most, cosine and PSNR at
    least); empty when within it. NaN or Inf always fails."""
    if not acc.get("finite", 1.0):
        return ["output has NaN or Inf"]
    out = []
    if tol.get("rel_l2") is not None and acc.get("rel_l2", 0.0) > tol["rel_l2"]:
        out.append(f"relative L2 error {acc['rel_l2']:.3g} > {tol['rel_l2']:g}")
    if tol.get("cosine") is not None and acc.get("cosine", 1.0) < tol["cosine"]:
        out.append(f"cosine similarity {acc['cosine']:.6f} < {tol['cosine']:g}")
    if tol.get("psnr_db") is not None and "psnr_db" in acc and acc["psnr_db"] < tol["psnr_db"]:
        out.append(f"PSNR {acc['psnr_db']:.1f} dB < {tol['psnr_db']:g} dB")
    return out


def absolute_checks(
    case: str, record: CaseRecord, policy: Policy, hardware: str, *, fail_on_graph_break: bool = False
) -> list[Verdict]:
    """Verdicts that need no baseline: the variant's accuracy tolerance, the policy's real-time
    budgets (asserted whatever the baseline says) and, when asked, graph breaks."""
    out = [
        Verdict(case=case, metric="accuracy", verdict=REGRESSION, current=record.accuracy.get("rel_l2"), message=msg)
        for msg in accuracy_violations(record.accuracy, record.tolerance)
    ]
    if fail_on_graph_break and record.graph_breaks:
        out.append(
            Verdict(
                case=case,
                metric="graph_breaks",
                verdict=REGRESSION,
                current=float(record.graph_breaks),
                message=f"{record.graph_breaks} graph break(s) (--perfgate-fail-on-graph-break)",
            )
        )
    for b in policy.budgets_for(record.model, record.size, record.variant, hardware):
        checks = (
            ("fps", b.min_fps, record.fps, lambda v, t: v >= t, "at least"),
            ("p90_ms", b.max_p90_ms, record.p90_ms, lambda v, t: v <= t, "at most"),
            ("median_ms", b.max_median_ms, record.median_ms, lambda v, t: v <= t, "at most"),
            ("peak_mem_mib", b.max_peak_mem_mib, record.peak_mem_mib, lambda v, t: v <= t, "at most"),
        )
        for name, target, value, ok, word in checks:
            if target is not None and value is None and name in TAIL_MIN_SAMPLES:
                out.append(_tail_unjudged(case, record, name, target))
                continue
            if target is None or value is None:
                continue
            verdict = UNCHANGED if ok(value, target) else BUDGET
            what = f"{name} {value:.3g}, budget {word} {target:g}"
            out.append(
                Verdict(
                    case=case,
                    metric=f"budget:{name}",
                    verdict=verdict,
                    baseline=target,
                    current=value,
                    message=f"{what}: met" if verdict == UNCHANGED else f"{what}: missed",
                    compared=f"{name} against its budget",
                )
            )
    return out


def budget_min_rounds(policy: Policy, model: str, size: str, variant: str, hardware: str) -> int:
    """The fewest timed rounds the case's budgets need to be judged: a p90 budget needs as many
    samples as a p90 is reported from (MLPerf LoadGen's 64); 0 when no budget asks for a tail.
    The session raises the stop rule's minimum to it, so a real-time budget is judged, not skipped."""
    needs = [TAIL_MIN_SAMPLES["p90_ms"] for b in policy.budgets_for(model, size, variant, hardware) if b.max_p90_ms]
    return max(needs, default=0)


def _tail_unjudged(case: str, record: CaseRecord, name: str, target: float) -> Verdict:
    """A tail budget that cannot be judged: the run has too few samples for the percentile (a smoke
    run, fixed rounds under torchrun, or --perfgate-max-rounds below the floor)."""
    need = TAIL_MIN_SAMPLES[name]
    return Verdict(
        case=case,
        metric=f"budget:{name}",
        verdict=INCONCLUSIVE,
        baseline=target,
        message=f"{name[:3]} budget not judged: insufficient samples ({len(record.samples_ms)} < {need}, "
        f"MLPerf LoadGen's floor for {name[:3]}); measure at least {need} rounds (--perfgate-min-rounds {need})",
    )


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Decision:
    verdicts: list[Verdict]
    remeasure: bool  # measure once more and decide again with that run added
    record: CaseRecord  # the record the verdicts are about (pooled timings kept in `pooled`)


def _suspected(verdicts: Sequence[Verdict]) -> bool:
    return any(v.metric == "latency" and v.verdict == REGRESSION for v in verdicts)


def decide(case: str, runs: Sequence[CaseRecord], baseline: CaseRecord | None, policy: Policy) -> Decision:
    """The verdicts of a case's runs so far (the first measurement, then its re-measurements)
    against its baseline, and whether to measure again.

    Pooled (`remeasure_pooled`, the default): a suspected latency regression asks for `remeasure`
    more runs, then all are judged once, pooled. Else every re-measurement is judged alone and the
    last verdict stands; a suspect is re-measured while it regresses, at most `remeasure` times.
    """
    if not runs:
        raise ValueError("decide needs at least one measured run")
    last = runs[-1]
    s = policy.settings(last.model, last.variant, "latency", last.device)
    if s.remeasure_pooled and len(runs) > 1:
        if len(runs) <= s.remeasure:
            return Decision(verdicts=[], remeasure=True, record=last)
        record = replace(last, pooled=pooled_block(runs))
        note = f"{len(runs)} runs pooled after a suspected regression"
        verdicts = [
            v if v.metric != "latency" else replace(v, message=f"{v.message}; {note}" if v.message else note)
            for v in compare(case, record, baseline, policy)
        ]
        return Decision(verdicts=verdicts, remeasure=False, record=record)
    verdicts = compare(case, last, baseline, policy)
    again = _suspected(verdicts) and len(runs) <= s.remeasure
    return Decision(verdicts=verdicts, remeasure=again, record=last)
