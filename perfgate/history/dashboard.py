"""The dashboard's figures, pure: which figure heads each case, its baseline with the gate's
tolerance and the baseline's measured noise, every run as a change in percent from that baseline,
what needs attention first, and the optimisation history (each variant's speedup over eager).

The figure that heads a case is the one that gates it: on a CPU that counted instructions
(perfgate.counts) the instructions per step, judged against the portable count baseline
(baselines/counts/<count key>.json) within `instructions_tolerance`; elsewhere the latency figure
(the median ms on a GPU, the step/reference ratio on a CPU without counts), judged against the
newest recorded baseline of its machine (perfgate.gate.store) within `latency_tolerance`. The
tolerances are the gate's own (perfgate.gate.policy, per model, variant and device)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.counts.suite import CountsConfigError, load_portable, portable_path
from perfgate.gate import store as gate_store
from perfgate.gate.policy import Policy
from perfgate.history.runs import Run, Series, metric_value
from perfgate.record import CaseRecord
from perfgate.results import Benchmark

INSTRUCTIONS = "instructions_per_step"
MEDIAN = "median_ms"
NORMALISED = "normalised_median"
GATE_METRIC = {INSTRUCTIONS: "instructions", MEDIAN: "latency", NORMALISED: "latency"}
# Shown beside the heading figure where the newest run recorded them.
BESIDE_CPU = (MEDIAN,)
BESIDE_GPU = ("device_ms_per_step", "kernels_per_step")  # GPU busy time and launches, where recorded
NEWEST_LEVEL_RUNS = 5  # the newest level: the median of this many newest reliable runs
FAILING = ("regression", "error", "budget")
_COUNT_FIELDS = ("instructions_per_step", "instructions")  # what a portable count baseline's case gives here

# What needs attention, most first; the words are the ones the pages and the Markdown print.
ATTENTION = (
    "regression",  # the newest run's gate verdict failed (regression, error or missed budget)
    "beyond tolerance",  # the newest level is worse than the baseline by more than the tolerance
    "shift for the worse",  # an unaccepted change point for the worse
    "better than tolerance",  # better than the baseline by more than the tolerance: re-record it
    "no baseline",
    "within tolerance",
)


def is_cpu(bench: Benchmark) -> bool:
    return str(bench.record.device or "").startswith("cpu")


def headline_metric(bench: Benchmark) -> str:
    """The figure that gates this entry: instructions per step where it was counted, else the
    median ms (GPU) or the step/reference ratio (a CPU run that timed the reference)."""
    if metric_value(bench, INSTRUCTIONS) is not None:
        return INSTRUCTIONS
    if is_cpu(bench) and metric_value(bench, NORMALISED) is not None:
        return NORMALISED
    return MEDIAN


@dataclass(frozen=True)
class Baseline:
    value: float | None  # None: no baseline recorded for this case on this machine
    source: str  # the file the value comes from, or why there is none
    tolerance: float  # the gate's relative tolerance for this figure (0.05: 5%)
    noise: float | None = None  # the baseline's measured noise: half its interquartile range, relative


def _iqr_half(values: Sequence[float]) -> float | None:
    if len(values) < 4:
        return None
    q = statistics.quantiles(values, n=4)
    mid = statistics.median(values)
    return (q[2] - q[0]) / 2 / mid if mid > 0 else None


def _count_noise(rec: CaseRecord) -> float | None:
    """A count's noise: the spread of its repeat in a second process, where one was recorded."""
    spread = rec.instructions.spread_pct if rec.instructions else None
    return spread / 100 if isinstance(spread, (int, float)) and spread > 0 else None


def _noise(bench: Benchmark, metric: str) -> float | None:
    """Half the interquartile range of the baseline's timed rounds, relative to their median, of
    the figure itself (per-round step/reference ratios for the ratio); counts have none (a
    repeat's spread where one was recorded)."""
    rec = bench.record
    if metric == INSTRUCTIONS:
        return _count_noise(rec)
    samples = [float(x) for x in rec.samples_ms or [] if isinstance(x, (int, float))]
    if metric == NORMALISED:
        refs = [float(x) for x in rec.reference_ms or [] if isinstance(x, (int, float))]
        samples = [s / r for s, r in zip(samples, refs) if r > 0] if len(refs) == len(samples) else []
    found = _iqr_half(samples)
    if found is None and metric == MEDIAN and isinstance(rec.noise_iqr_rel, (int, float)):
        return rec.noise_iqr_rel / 2
    return found


class Baselines:
    """The recorded baselines under one root, read once each: per machine the gate's numbered files
    (newest holding the case), per count key the portable count baseline."""

    def __init__(self, root: str | Path | None, policy: Policy) -> None:
        self.root = Path(root) if root is not None else None  # None: no baselines, only the tolerances
        self.policy = policy
        self._machines: dict[str, gate_store.Baselines | None] = {}
        self._counts: dict[str, dict[str, Any] | None] = {}

    def _machine(self, fp: str) -> gate_store.Baselines | None:
        if fp not in self._machines:
            folder = gate_store.baseline_dir(self.root, fp) if self.root else None
            self._machines[fp] = gate_store.Baselines(folder) if folder and folder.is_dir() else None
        return self._machines[fp]

    def _count_file(self, key: str) -> dict[str, Any] | None:
        if key not in self._counts:
            try:
                self._counts[key] = load_portable(portable_path(self.root, key)) if self.root else None
            except CountsConfigError:  # a broken count file: shown as no baseline, never a failed site
                self._counts[key] = None
        return self._counts[key]

    def _counts_baseline(self, fp: str, newest: Benchmark, tol: float) -> Baseline:
        """As the gate takes it (perfgate.counts.suite.with_portable): the machine's own baseline
        where it counted under the same key, else the portable count baseline of that key."""
        key = str(newest.record.instructions.key or "") if newest.record.instructions else ""
        machine = self._machine(fp)
        try:
            found = machine.entry(newest.fullname) if machine else None
        except gate_store.BaselineError:
            found = None
        if found is not None:
            path, bench = found
            rec = bench.record
            if rec.instructions_per_step and rec.instructions and rec.instructions.key == key:
                return Baseline(rec.instructions_per_step, f"{fp}/{path.name}", tol, _noise(bench, INSTRUCTIONS))
        data = self._count_file(key) if key else None
        entry = (data or {}).get("cases", {}).get(newest.case_id)
        if isinstance(entry, Mapping):
            rec = CaseRecord.from_extra_info({k: v for k, v in entry.items() if k in _COUNT_FIELDS})
            if rec.instructions_per_step and rec.instructions_per_step > 0:
                return Baseline(float(rec.instructions_per_step), f"counts/{key}.json", tol, _count_noise(rec))
        return Baseline(None, f"no count baseline under the key {key or '?'}", tol)

    def for_case(self, fp: str, newest: Benchmark, metric: str) -> Baseline:
        rec = newest.record
        gate_metric = GATE_METRIC.get(metric, "latency")
        settings = self.policy.settings(rec.model or "", rec.variant or "", gate_metric, str(rec.device or ""))
        tol = settings.instructions_tolerance if metric == INSTRUCTIONS else settings.latency_tolerance
        if metric == INSTRUCTIONS:
            return self._counts_baseline(fp, newest, tol)
        machine = self._machine(fp)
        try:
            found = machine.entry(newest.fullname) if machine else None
        except gate_store.BaselineError as exc:
            return Baseline(None, str(exc), tol)
        if found is None:
            return Baseline(None, f"no baseline recorded for {fp}", tol)
        path, bench = found
        value = metric_value(bench, metric)
        if value is None or value <= 0:
            return Baseline(None, f"{path.name} has no {metric}", tol)
        return Baseline(value, f"{fp}/{path.name}", tol, _noise(bench, metric))


@dataclass
class CaseFigures:
    """One case on one machine as the dashboard shows it."""

    series: Series  # the heading figure over every kept run
    metric: str  # INSTRUCTIONS, MEDIAN or NORMALISED
    baseline: Baseline
    change_pct: list[float | None]  # per point, vs the baseline (None: no baseline)
    newest_level: float | None  # the median of the newest reliable runs
    newest_change_pct: float | None  # newest_level vs the baseline
    beside: dict[str, float] = field(default_factory=dict)  # the newest run's other figures (median_ms, ...)
    speedup: float | None = None  # the newest run's speedup over eager (record.speedup)
    attention: str = "within tolerance"
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # the newest run's kept verdicts of this case


def figures(
    series: Series,
    metric: str,
    newest: Benchmark,
    baseline: Baseline,
    *,
    change_points: Sequence[Mapping[str, Any]] = (),
    verdicts: Sequence[Mapping[str, Any]] = (),
) -> CaseFigures:
    """The case's figures: its change from the baseline per run and at its newest level, the
    newest run's figures beside, and where it stands in ATTENTION."""
    base = baseline.value
    changes = [(p.value / base - 1) * 100 if base else None for p in series.points]
    reliable = [p.value for p in series.points if not p.unreliable] or [p.value for p in series.points]
    level = statistics.median(reliable[-NEWEST_LEVEL_RUNS:]) if reliable else None
    newest_change = (level / base - 1) * 100 if base and level is not None else None
    beside = {}
    for m in BESIDE_CPU if is_cpu(newest) else BESIDE_GPU:
        v = metric_value(newest, m)
        if isinstance(v, (int, float)) and m != metric:
            beside[m] = float(v)
    if metric != MEDIAN and not is_cpu(newest) and (v := metric_value(newest, MEDIAN)) is not None:
        beside.setdefault(MEDIAN, v)
    kept = [v for v in verdicts if v.get("metric") in (GATE_METRIC.get(metric), None) or v.get("verdict") in FAILING]
    tol_pct = baseline.tolerance * 100
    worse_step = any(c.get("direction") == "worse" and not c.get("accepted") for c in change_points)
    if any(v.get("verdict") in FAILING for v in kept):
        attention = "regression"
    elif newest_change is not None and newest_change > tol_pct:
        attention = "beyond tolerance"
    elif worse_step:
        attention = "shift for the worse"
    elif newest_change is not None and newest_change < -tol_pct:
        attention = "better than tolerance"
    elif base is None:
        attention = "no baseline"
    else:
        attention = "within tolerance"
    return CaseFigures(
        series=series,
        metric=metric,
        baseline=baseline,
        change_pct=changes,
        newest_level=level,
        newest_change_pct=newest_change,
        beside=beside,
        speedup=newest.record.speedup,
        attention=attention,
        verdicts=list(kept),
    )


def attention_order(f: CaseFigures) -> tuple:
    """Most attention first: by ATTENTION, then the largest change for the worse."""
    return (ATTENTION.index(f.attention), -(f.newest_change_pct or 0.0), f.series.label)


def newest_entries(runs: Sequence[Run]) -> dict[tuple[str, str], tuple[Run, Benchmark]]:
    """(fingerprint, fullname) -> the newest run holding the case, and its entry."""
    out: dict[tuple[str, str], tuple[Run, Benchmark]] = {}
    for r in sorted(runs, key=Run.order_key):
        for b in r.benchmarks:
            out[(r.fingerprint_id or "unknown", b.fullname)] = (r, b)
    return out


@dataclass(frozen=True)
class OptimisationRow:
    """One variant of a model group in the newest run that holds it."""

    group: str  # 'model [size opt=v] on fingerprint'
    variant: str
    median_ms: float | None
    speedup: float | None  # over eager, measured in the same run (perfgate.record.speedup)
    commit: str | None
    run_time: str | None


def optimisation_history(runs: Sequence[Run], model: str) -> list[OptimisationRow]:
    """Per group of `model` (machine, size, options): each variant of the newest run holding the
    group, fastest first (speedup over eager, then median ms)."""
    groups: dict[str, tuple[Run, list[Benchmark]]] = {}
    for r in sorted(runs, key=Run.order_key):
        picked: dict[str, list[Benchmark]] = {}
        for b in r.benchmarks:
            rec = b.record
            if (rec.model or b.name) != model:
                continue
            opts = "".join(f" {k}={v}" for k, v in sorted((rec.options or {}).items()))
            picked.setdefault(f"{model} [{rec.size or '?'}{opts}] on {r.fingerprint_id or 'unknown'}", []).append(b)
        for g, benches in picked.items():
            old = groups.get(g)
            # The newest run holding the group, unless it ran fewer variants than an earlier one
            # (a pull-request tier run after the nightly full matrix): the table keeps every variant.
            if old is None or len(benches) >= len(old[1]):
                groups[g] = (r, benches)
    out = []
    for g, (r, benches) in sorted(groups.items()):
        rows = [
            OptimisationRow(
                g,
                b.record.variant or b.name,
                metric_value(b, MEDIAN),
                b.record.speedup,
                r.commit,
                r.run_time.isoformat()[:16] if r.run_time else None,
            )
            for b in benches
        ]
        out += sorted(rows, key=lambda x: (-(x.speedup or 0.0), x.median_ms or 0.0))
    return out
