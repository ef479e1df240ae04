"""The benchmark report's data, pure: cases grouped per model, the history series of their
medians, the telemetry the sampler summarised, the fastest variant per model, and adapters from a
live pytest session to the same shapes (so the plugin's Markdown is the report's Markdown)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfgate import gate
from perfgate.history.runs import Run, Series, build_series, gather, metric_value, unit_of
from perfgate.record import CaseRecord, Telemetry
from perfgate.results import Benchmark, RunInfo


def group_title(rec: CaseRecord) -> str:
    """'model [size opt=v] on device': the cases one optimisation table compares."""
    opts = "".join(f" {k}={v}" for k, v in sorted((rec.options or {}).items()))
    return f"{rec.model} [{rec.size or '?'}{opts}] on {rec.device or '?'}"


@dataclass(frozen=True)
class Entry:
    """One benchmark of one run."""

    run: Run
    bench: Benchmark
    label: str  # the row name: variant, plus the run when several runs are reported

    @property
    def record(self) -> CaseRecord:
        return self.bench.record

    @property
    def fullname(self) -> str:
        return self.bench.fullname

    def value(self, metric: str) -> float | None:
        """From the record, else pytest-benchmark's stats (plain files)."""
        return metric_value(self.bench, metric)

    def samples_ms(self) -> list[float]:
        if self.record.samples_ms:
            return [float(x) for x in self.record.samples_ms if isinstance(x, (int, float))]
        return [x * 1e3 for x in self.bench.stats.data_s] if self.bench.stats else []


def run_label(run: Run) -> str:
    commit = (run.commit or "")[:7]
    return f"{run.label}" + (f" @{commit}" if commit else "")


def run_key(run: Run) -> tuple[str | None, str | None]:
    """What identifies a run across copies of its file: when it ran and at which commit."""
    return (run.run_time.isoformat() if run.run_time else None, run.commit)


def group_entries(runs: Sequence[Run]) -> dict[str, list[Entry]]:
    """Benchmarks per model group (model, size, options, device), in the order they ran; plain
    pytest-benchmark entries without perfgate's extra_info go to one 'other benchmarks' group."""
    several = len(runs) > 1
    groups: dict[str, list[Entry]] = {}
    for run in runs:
        for b in run.benchmarks:
            rec = b.record
            title = group_title(rec) if rec.model else "other benchmarks"
            name = rec.variant or b.name
            groups.setdefault(title, []).append(Entry(run, b, f"{name} · {run_label(run)}" if several else name))
    return groups


# The figure the gate compares for latency: on the CPU the median of the per-round step/reference
# ratios (perfgate.cases.runner), elsewhere the median in ms. Its history is what the report draws: raw
# ms on a shared machine move 20-30% between unchanged runs with the machine's speed.
NORMALISED = "normalised_median"
RATIO_UNIT = "× reference"


def gated_metric(bench: Benchmark) -> str:
    """'normalised_median' where the entry has one (a CPU run timed the reference), else 'median_ms'."""
    return NORMALISED if metric_value(bench, NORMALISED) is not None else "median_ms"


def history_for(
    runs: Sequence[Run],
    *,
    baselines_root: str | os.PathLike[str] = "baselines",
    storage_dirs: Sequence[str | os.PathLike[str]] = (".benchmarks",),
) -> tuple[list[Series], list[str]]:
    """Per case of these runs, the history of its gated figure (`gated_metric` of its entry here)
    over the saved runs of its fingerprint plus these runs: (series, one line per unreadable saved
    file). A normalised series leaves out earlier runs without reference samples (older baselines);
    its unit is RATIO_UNIT."""
    saved: list[Run] = []
    unreadable: list[str] = []
    for fp in sorted({r.fingerprint_id for r in runs if r.fingerprint_id}):
        g = gather(baselines_root=baselines_root, fingerprint_id=fp, storage_dirs=storage_dirs)
        saved += g.runs
        unreadable += g.unreadable
    every = [*saved, *runs]
    by_metric = {
        m: {(s.fingerprint_id, s.fullname): s for s in build_series(every, m)} for m in (NORMALISED, "median_ms")
    }
    out: dict[tuple[str, str], Series] = {}
    for run in runs:
        for b in run.benchmarks:
            key = (run.fingerprint_id or "unknown", b.fullname)
            metric = gated_metric(b)
            s = by_metric[metric].get(key)
            if s is not None and key not in out:
                out[key] = replace(s, unit=RATIO_UNIT) if metric == NORMALISED else s
    return list(out.values()), unreadable


def verdict_counts(verdicts: Sequence[gate.Verdict]) -> dict[str, int]:
    """Verdicts per kind, in the gate's order (regressions first)."""
    c = Counter(v.verdict for v in verdicts)
    order = [v for v in gate.VERDICT_ORDER if v in c] + sorted(k for k in c if k not in gate.VERDICT_ORDER)
    return {k: c[k] for k in order}


def labels_by_fullname(runs: Sequence[Run]) -> dict[str, str]:
    return {b.fullname: b.label for r in runs for b in r.benchmarks}


def case_name(case: str, labels: Mapping[str, str]) -> str:
    """A verdict's case as the reader knows it ('owl-world-model [tiny] compile')."""
    return labels.get(case) or case.split("::")[-1]


def fastest_per_model(runs: Sequence[Run]) -> list[tuple[str, str, float, float | None]]:
    """(group, variant, median ms, speedup) of the fastest variant of each model group."""
    out = []
    for title, entries in group_entries(runs).items():
        timed = [(e.value("median_ms"), e) for e in entries if e.value("median_ms") is not None]
        if timed:
            med, best = min(timed, key=lambda t: t[0])
            out.append((title, best.label, med, best.value("speedup")))
    return out


# ----------------------------------------------------------------------------- telemetry


@dataclass(frozen=True)
class TelemetryRow:
    metric: str
    unit: str
    min: float
    mean: float
    max: float


def telemetry_rows(telemetry: Telemetry | None) -> list[TelemetryRow]:
    """The sampler's summary (perfgate.measure.telemetry.TelemetrySampler.summary(): each metric's
    min / mean / max) as rows; metrics without three numbers are left out."""
    rows = []
    for name, agg in ((telemetry.metrics if telemetry else None) or {}).items():
        vals = [agg.min, agg.mean, agg.max]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            rows.append(TelemetryRow(str(name), _unit(str(name)), *map(float, vals)))
    return rows


def timeline_series(
    timeline: Sequence[Mapping[str, Any]] | None,
) -> dict[str, list[tuple[str, list[float], list[float]]]]:
    """The sampler's timeline (TelemetrySampler.timeline(): one dict per sample, `t_s` seconds
    since it started) as (name, times, values) per metric, grouped by unit so that one plot
    holds one unit: utilisations share a % axis, memories a MiB axis. Non-numbers are ignored."""
    samples = [s for s in (timeline or []) if isinstance(s, Mapping) and isinstance(s.get("t_s"), (int, float))]
    keys: list[str] = []
    for s in samples:
        keys += [k for k, v in s.items() if k != "t_s" and _number(v) and k not in keys and k != "clock_event_mask"]
    groups: dict[str, list[tuple[str, list[float], list[float]]]] = {}
    for k in keys:
        pairs = [(float(s["t_s"]), float(s[k])) for s in samples if _number(s.get(k))]
        groups.setdefault(_unit(k) or "value", []).append((k, [p[0] for p in pairs], [p[1] for p in pairs]))
    return groups


def _unit(metric: str) -> str:
    """The unit in a sampler metric's name: '%' for cpu_util_pct, 'cores' for other_cpu_cores."""
    return unit_of(metric) or ("cores" if metric.endswith("_cores") else "")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- a live run


def records_run(
    records: Mapping[str, CaseRecord],
    fingerprint: Mapping[str, Any],
    fingerprint_id: str,
    commit_info: Mapping[str, Any] | None = None,
) -> Run:
    """A live run's records (by pytest node id) as a loaded run, so every output reads one shape."""
    entries = [
        Benchmark(name.split("::")[-1], name, rec, stats=None, has_record=True, raw={}) for name, rec in records.items()
    ]
    top = {
        "commit_info": dict(commit_info or {}),
        "perfgate": {"fingerprint_id": fingerprint_id, "fingerprint": dict(fingerprint)},
    }
    return Run("this run", top, benchmarks=entries, info=RunInfo.from_json(top))


# ----------------------------------------------------------------------------- change points


def change_point_block(
    history: Sequence[Series] | None, accepted: Sequence[Any] = (), *, metric: str = "median_ms"
) -> dict[str, Any] | None:
    """The report's change points (perfgate.history.changepoints, as `perfgate history --change-points`
    finds them) over the history series it draws: one row per step, accepted ones with their
    reason; None without history. `metric` names what the series follow, for accepted_changes'
    `metric` glob; every history figure the report draws is a latency, lower is better."""
    from perfgate.history.changepoints import MIN_CHANGE, MIN_SIZE, change_points, unplaced
    from perfgate.output.text import fmt_num

    if history is None:
        return None
    judged = [s for s in history if len(s.points) >= 2 * MIN_SIZE]
    rows = []
    for s in sorted(judged, key=lambda s: s.label):
        for c in change_points(s, "lower", accepted, metric=metric):
            rows.append(
                {
                    "case": s.label,
                    "entry": f"{c.index + 1} of {len(s.points)}",
                    "commit": (c.commit or "-")[:7],
                    "run_time": (c.run_time or "-")[:16].replace("T", " "),
                    "level": f"{fmt_num(c.before)} → {fmt_num(c.after)} {s.unit}".rstrip(),
                    "change": f"{c.change_pct:+.1f}%",
                    "direction": c.direction,
                    "accepted": c.accepted or "",
                }
            )
    return {
        "rows": rows,
        "judged": len(judged),
        "short": len(history) - len(judged),
        "min_change_pct": MIN_CHANGE * 100,
        "min_size": MIN_SIZE,
        "unplaced": [f"{a.case} at {a.commit} ({a.reason})" for a in unplaced(accepted, judged, metric)],
    }
