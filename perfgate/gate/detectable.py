"""Each case's detectable change: the noise a baseline was recorded with, per metric, and the
smallest change the gate can tell from it.

A baseline is recorded in at least 3 passes (processes, interleaved: pass 1 of every case, then
pass 2 ...: `scripts/record-baselines --passes N`). Per metric, each pass gives one value: the
median latency (on a CPU the step/reference ratio, what the CPU gate judges), the GPU busy time per
step, the instructions per step. Their spread, (max - min) / median, is what a person reads; what
the gate uses is their relative standard deviation s: unchanged code moved that much between
passes. A later run is judged against the stored record, which is one of those passes, so the
difference of two unchanged runs has a standard deviation of s * sqrt(2), and the smallest change
the gate tells is the one-sided prediction bound `t(1 - FALSE_ALARM, n - 1) * s * sqrt(2)`: under
normal noise an unchanged run exceeds it with probability at most FALSE_ALARM (1 in 50; 1.2-1.4%
simulated at 3 to 8 passes, the stored pass being one of those s is taken from), and more passes make
it smaller (on average 6.1 standard deviations of the noise at 3 passes, 3.4 at 8: t x sqrt(2) is
6.86 and 3.56 times s, which underestimates the noise at few passes), never larger.
(Twice the range, the rule before 2026-11-29, alarmed in about 1 of 22 at 3 passes, and grew with
the number of passes.) The gate never reports a regression smaller than its case's detectable
change, and says so in the verdict.

Passes that disagree by more than the case's latency tolerance (`DISAGREE`, 5%, by default; the
CPU's policy allows 50%: a shared 2-core VM moved tiny cases' step/reference ratios 41% and 104%
between three passes of `scripts/record-baselines --passes 3`) caught a slow phase of the machine (the
H100 records of 2026-11-26 and -27 read launch-bound cases 9-12% slow): such a case is
re-measured, and if its passes still disagree it is not recorded (`not_recorded`; flagged
`unreliable` in the run's results): a flagged record would hide the case's older baseline, the one
each case is judged against being the newest file holding it, and un-gate its latency.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from perfgate.gate.settings import GateSettings
from perfgate.record import CaseRecord, PassNoise

FALSE_ALARM = 0.02  # one-sided: an unchanged run beyond the detectable change, 1 in 50
DISAGREE = 0.05  # latency passes further apart than this (relative): a slow phase, re-measure
MIN_PASSES = 3
TARGET = 0.05  # `perfgate doctor` lists the cases that cannot detect this


@dataclass(frozen=True, kw_only=True)
class MetricNoise:
    metric: str  # the gated metric's name: latency, device_time, instructions
    passes: int
    spread: float  # (max - min) / median of the per-pass values
    detects: float  # the smallest relative change the gate tells (`detectable_change`)

    def block(self) -> PassNoise:
        """As the record keeps it (percentages)."""
        return PassNoise(passes=self.passes, spread_pct=self.spread * 100, detects_pct=self.detects * 100)


def per_pass_value(record: CaseRecord, metric: str) -> float | None:
    """What one pass contributes to a metric's noise (None: that pass has no such figure)."""
    if metric == "latency":
        return record.normalised_median if record.normalised_median is not None else record.median_ms
    if metric == "device_time":
        return record.device_ms_per_step
    if metric == "instructions":
        return record.instructions_per_step
    raise ValueError(f"no noise is recorded for metric {metric!r}: latency, device_time or instructions")


NOISE_METRICS = ("latency", "device_time", "instructions")


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median; 0 for one value; None where the median is not positive (no scale)."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else None


def detectable_change(values: Sequence[float]) -> float | None:
    """The smallest relative change a run judged against one of these unchanged passes can be told
    from their noise: t(1 - FALSE_ALARM, n - 1) * s * sqrt(2), s their standard deviation relative
    to their median (at least 2 values; None where the median is not positive)."""
    from scipy import stats as sps

    if len(values) < 2 or (med := statistics.median(values)) <= 0:
        return None
    rel_sd = statistics.stdev(values) / med
    return float(sps.t.ppf(1 - FALSE_ALARM, len(values) - 1)) * rel_sd * math.sqrt(2)


def noise_of(passes: Sequence[CaseRecord]) -> dict[str, MetricNoise]:
    """Per metric, the noise between the passes that have it (at least 2 values). Latency mixes no
    units: step/reference ratios only where every pass has one, else milliseconds."""
    out = {}
    for metric in NOISE_METRICS:
        found = latency_values(passes) if metric == "latency" else [per_pass_value(r, metric) for r in passes]
        values = [v for v in found if v is not None]
        s = spread(values) if len(values) >= 2 else None
        d = detectable_change(values) if s is not None else None
        if s is not None and d is not None:
            out[metric] = MetricNoise(metric=metric, passes=len(values), spread=s, detects=d)
    return out


def latency_values(passes: Sequence[CaseRecord]) -> list[float | None]:
    """Each pass's latency in one unit: the step/reference ratio where every pass has one (the CPU
    gate's figure), else the median ms."""
    if all(r.normalised_median is not None for r in passes):
        return [r.normalised_median for r in passes]
    return [r.median_ms for r in passes]


def without_slow_pass(passes: Sequence[CaseRecord], limit: float = DISAGREE) -> tuple[list[CaseRecord], int | None]:
    """The passes, less the earlier one whose latency lies farthest from their median when leaving
    it out makes the others agree within `limit` (a slow phase caught by an earlier pass): (the
    passes kept, the index left out or None). The last pass is the record that will be stored: it
    is never left out (a slow last pass stays and the case is flagged). At least two passes stay."""
    noise = noise_of(passes)
    if len(passes) < 3 or disagreement(noise, limit) is None:
        return list(passes), None
    found = latency_values(passes)
    values = [v for v in found if v is not None]
    if len(values) < len(found):
        return list(passes), None
    med = statistics.median(values)
    worst = max(range(len(values) - 1), key=lambda i: abs(values[i] - med))
    kept = [r for i, r in enumerate(passes) if i != worst]
    return (kept, worst) if disagreement(noise_of(kept), limit) is None else (list(passes), None)


def disagreement(noise: Mapping[str, MetricNoise], limit: float = DISAGREE) -> str | None:
    """Why the passes disagree (a slow phase caught by one of them), or None."""
    lat = noise.get("latency")
    if lat is not None and lat.spread > limit:
        return (
            f"its {lat.passes} recording passes disagree: latency {lat.spread:.1%} apart (> {limit:.0%}), "
            "a slow phase of the machine; re-record it"
        )
    return None


def noise_block(noise: Mapping[str, MetricNoise], *, dropped: int | None = None) -> dict[str, PassNoise]:
    """The record's `pass_noise` field; `dropped`: the index of the pass `without_slow_pass` left
    out, kept on latency's block (1-based, in recording order)."""
    block = {m: n.block() for m, n in noise.items()}
    if dropped is not None and "latency" in block:
        block["latency"] = replace(block["latency"], dropped_pass=dropped + 1)
    return block


def with_pass_noise(
    earlier: Sequence[CaseRecord], latest: CaseRecord, limit: float, remeasure: Callable[[], CaseRecord]
) -> CaseRecord:
    """The record to store, `latest`, with the noise between the recording passes (`earlier`, then
    it). Passes further apart than `limit` (the case's latency tolerance: a slow phase) re-measure
    the latest once (`remeasure`); a slow phase caught by an earlier pass is then left out where the
    others agree, and passes still disagreeing flag the record unreliable and `not_recorded`: the
    recording leaves it out of the new baseline (perfgate.plugin.hooks), so the case's previous
    baseline keeps gating it. The noise kept is every measured pass's, the replaced and the left-out ones
    too: a slow phase seen while recording is this runner's noise, and a later run can catch one as
    well. The one owner of the rule: the runner's recording passes and the GPU quality run's stored
    record (perfgate.quality.gpu_quality) both take it from here."""
    measured, dropped, record = [*earlier, latest], None, latest
    if disagreement(noise_of(measured), limit) is not None:
        record = replace(remeasure(), remeasured=1)
        measured.append(record)
        kept, dropped = without_slow_pass([*earlier, record], limit)
        why = disagreement(noise_of(kept), limit)
        if why is not None:
            record = replace(record, unreliable=why, not_recorded=why)
    return replace(record, pass_noise=noise_block(noise_of(measured), dropped=dropped))


def detects(record: CaseRecord | None, metric: str) -> float | None:
    """The smallest relative change a baseline record lets the gate tell for `metric`, or None when
    it was recorded in one pass (no noise known)."""
    block = (record.pass_noise or {}).get(metric) if record is not None else None
    if block is None or block.passes < 2:
        return None
    return float(block.detects_pct) / 100


TOLERANCE = {
    "latency": "latency_tolerance",
    "device_time": "device_time_tolerance",
    "instructions": "instructions_tolerance",
}


def tolerance(settings: GateSettings, metric: str) -> float:
    """The metric's tolerance under `settings`: no change within it is reported, however quiet the case."""
    return float(getattr(settings, TOLERANCE[metric]))


def smallest_change(record: CaseRecord | None, metric: str, settings: GateSettings) -> float | None:
    """The smallest relative change of `metric` the gate reports against this baseline record under
    `settings`: its detectable change or the metric's tolerance, whichever is larger (a change within
    the tolerance is "unchanged" however quiet the case). None where it tells none or nothing is
    known: a latency baseline flagged `unreliable` (the latency gate judges nothing against it), or
    a record with no recorded noise (one pass). The one rule the verdicts' wording
    (perfgate.gate.metrics.within_noise) and `perfgate doctor` (`case_table`) both read."""
    if record is None or (metric == "latency" and record.unreliable):
        return None
    d = detects(record, metric)
    return None if d is None else max(d, tolerance(settings, metric))


def change_note(record: CaseRecord, metric: str, settings: GateSettings) -> str:
    """`detects >= 50.0% here (the 50% tolerance; its passes' noise 3.0%)`, or `detects >= 9.0% here`
    where the passes' noise is the larger; empty where `smallest_change` is None."""
    found = smallest_change(record, metric, settings)
    d = detects(record, metric)
    if found is None or d is None:
        return ""
    if d < found:
        return f"detects >= {found:.1%} here (the {found * 100:g}% tolerance; its passes' noise {d:.1%})"
    return f"detects >= {found:.1%} here"


def detects_line(record: CaseRecord, settings: Callable[[str], GateSettings] = lambda m: GateSettings()) -> str:
    """`latency: detects >= 50.0% here (the 50% tolerance; its passes' noise 3.1%); device time:
    detects >= 1.5% here` (`settings(metric)`: the case's settings per metric), or why nothing is known."""
    parts = []
    if record.unreliable:
        parts.append(f"latency: none, flagged unreliable ({record.unreliable}): the gate judges no latency against it")
    for metric in NOISE_METRICS:
        note = change_note(record, metric, settings(metric))
        if note:
            parts.append(f"{metric.replace('_', ' ')}: {note}")
    return "; ".join(parts) if parts else "no recorded noise (recorded in one pass): detectable change unknown"


@dataclass(frozen=True, kw_only=True)
class CaseDetectable:
    case: str
    detects: dict[str, float]  # metric -> the smallest relative change the gate reports (`smallest_change`)
    line: str
    misses_target: bool  # its latency gate cannot tell the target change (or nothing is known)


def case_table(
    records: Mapping[str, CaseRecord],
    settings: Callable[[CaseRecord, str], GateSettings] = lambda r, m: GateSettings(),
    target: float = TARGET,
) -> list[CaseDetectable]:
    """Per baseline case, the smallest change the gate reports per metric (`smallest_change`, under
    `settings(record, metric)`: the project's policy) and whether its latency gate cannot tell
    `target`: noisier than it, a tolerance above it, flagged unreliable, or no recorded noise."""
    out = []
    for case, rec in sorted(records.items()):
        found = {m: d for m in NOISE_METRICS if (d := smallest_change(rec, m, settings(rec, m))) is not None}
        lat = found.get("latency")
        line = detects_line(rec, partial(settings, rec))
        out.append(CaseDetectable(case=case, detects=found, line=line, misses_target=lat is None or lat > target))
    return out
