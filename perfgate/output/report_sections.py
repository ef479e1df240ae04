"""The benchmark report's sections that read the gate: the summary (what needs attention first),
the verdict table (attention rows shown, the rest folded), the history of each case's gated figure
and the telemetry. Pure: results in, the template's rows and inline SVG charts out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfgate import gate
from perfgate.gate.verdict_file import VerdictSet
from perfgate.history.runs import Run, Series, unit_of
from perfgate.output import charts
from perfgate.output.report_data import (
    RATIO_UNIT,
    Entry,
    case_name,
    labels_by_fullname,
    telemetry_rows,
    verdict_counts,
)
from perfgate.output.terminal import skip_summary
from perfgate.output.text import fmt_num
from perfgate.record import Telemetry

# Verdict kinds listed row by row, open: what needs a look. The others are folded under their count
# with what they mean (a full run has ~300 unchanged rows: the old page was 14,000 px of them).
SHOWN = (gate.ERROR, gate.REGRESSION, gate.BUDGET, gate.INCONCLUSIVE, gate.IMPROVEMENT)
FOLD_NOTES = {
    gate.UNRELIABLE: "timings not judged: other processes used the machine while measuring (each row says how much)",
    gate.UNCHANGED: "within tolerance",
    gate.NO_BASELINE: "no recorded baseline holds the case",
}
VERDICT_COLOURS = {
    gate.REGRESSION: charts.BAD,
    gate.IMPROVEMENT: charts.GOOD,
    gate.INCONCLUSIVE: charts.PALETTE[1],
    gate.UNCHANGED: charts.NEUTRAL,
}
# The unit of a verdict's baseline and current figures, per metric.
UNITS = {"latency": "ms", "memory": "MiB", "speedup": "×", "accuracy": "rel. L2"}


def svg_markup(text: str) -> Any:
    from markupsafe import Markup

    return Markup(text)  # matplotlib's SVG: text in it is escaped by matplotlib


def _normalised(v: gate.Verdict) -> bool:
    """Whether a latency verdict compared step/reference ratios: its `compared` field where the gate
    sets one, else its message ('..., normalised', perfgate.gate.metrics; older verdict files)."""
    compared = getattr(v, "compared", None)
    if compared:
        return "ratio" in compared
    return v.metric == "latency" and ", normalised" in v.message


def unit_of_verdict(v: gate.Verdict) -> str:
    """The unit of a verdict's baseline and current figures ('ms', 'MiB'; a budget's from its name)."""
    if v.metric.startswith("budget:"):
        name = v.metric.split(":", 1)[1]
        return unit_of(name) or name
    return UNITS.get(v.metric, "")


def compared_of(v: gate.Verdict) -> str:
    """What the change % is the change of, where that is not the figures shown: on the CPU latency
    is judged on the step/reference ratio, whose change differs from the milliseconds'."""
    return "step/ref. ratio" if _normalised(v) and v.change_pct is not None else ""


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{fmt_num(value)}{unit}" if unit == "×" else f"{fmt_num(value)} {unit}".rstrip()


def verdict_row(v: gate.Verdict, labels: Mapping[str, str]) -> dict[str, Any]:
    unit = unit_of_verdict(v)
    budget = v.metric.startswith("budget:")
    return {
        "case": case_name(v.case, labels),
        "metric": v.metric,
        "baseline": ("budget " if budget and v.baseline is not None else "") + _figure(v.baseline, unit),
        "current": _figure(v.current, unit),
        "change": "-" if v.change_pct is None else f"{v.change_pct:+.1f}%",
        "compared": compared_of(v),
        "p": "-" if v.p_value is None else f"{v.p_value:.2g}",
        "verdict": v.verdict,
        "message": v.message,
    }


def change_chart(verdicts: Sequence[gate.Verdict]) -> Any | None:
    """Every judged latency change on one strip per verdict kind (None when nothing was judged)."""
    rows = [
        (v.verdict, v.change_pct)
        for v in gate.sort_verdicts(verdicts)
        if v.metric == "latency" and v.change_pct is not None
    ]
    if not rows:
        return None
    normalised = any(_normalised(v) for v in verdicts)
    return svg_markup(
        charts.change_strip_chart(
            rows,
            title="Latency change of every judged case",
            axis_label="change vs baseline (%, what the gate compared)",
            colors=VERDICT_COLOURS,
            note="of the step/reference ratio (normalised, CPU); of the median ms elsewhere"
            if normalised
            else "of the median ms",
        )
    )


def budget_rows(verdicts: Sequence[gate.Verdict], labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The real-time budgets ([[tool.perfgate.budget]]) the run was held to, missed first: case,
    budget, target, measured value and whether it was met."""
    rows = [v for v in verdicts if v.metric.startswith("budget:")]
    rows.sort(key=lambda v: v.verdict != gate.BUDGET)
    return [
        {
            "case": case_name(v.case, labels),
            "budget": v.metric.split(":", 1)[1],
            "target": _figure(v.baseline, unit_of_verdict(v)),
            "current": _figure(v.current, unit_of_verdict(v)),
            "met": v.verdict != gate.BUDGET,
            "message": v.message,
        }
        for v in rows
    ]


def verdict_block(vs: VerdictSet | None, runs: Sequence[Run]) -> dict[str, Any] | None:
    """The summary's facts and the verdict table's rows: those that need a look, then each other
    kind folded under its count."""
    if vs is None:
        return None
    labels = labels_by_fullname(runs)
    ordered = gate.sort_verdicts(vs.verdicts)
    failing = gate.failing(ordered, fail_on_improvement=vs.fail_on_improvement)
    folded: dict[str, list[dict[str, Any]]] = {}
    for v in ordered:
        if v.verdict not in SHOWN:
            folded.setdefault(v.verdict, []).append(verdict_row(v, labels))
    return {
        "failing": [verdict_row(v, labels) for v in failing],
        "budgets": budget_rows(ordered, labels),
        "gate_enabled": vs.gate_enabled,
        "counts": verdict_counts(vs.verdicts),
        "n_cases": len({v.case for v in vs.verdicts}),
        "shown": [verdict_row(v, labels) for v in ordered if v.verdict in SHOWN],
        "folded": [(kind, FOLD_NOTES.get(kind, ""), rows) for kind, rows in folded.items()],
        "change_chart": change_chart(ordered),
        "skipped": list(skip_summary(vs.skipped).items()),
        "n_skipped": len(vs.skipped),
        "notices": list(vs.notices),
    }


# ----------------------------------------------------------------------------- history


def _commit_label(commit: str | None, dirty: bool) -> str:
    return (commit or "?")[:7] + ("*" if dirty else "")


def trend_chart(series: Series, current: set[tuple[str | None, str | None]], last: int = 30) -> Any:
    """One case's gated figure over its saved runs by commit, unreliable runs marked, this report's
    runs ringed; the change is against the last reliable run before."""
    pts = series.points[-last:]
    end = pts[-1]
    if end.unreliable:
        change = " · unreliable: not compared"
    elif end.change_pct is not None:
        change = f" · {end.change_pct:+.1f}% vs previous"
    else:
        change = ""
    first, final = (pts[0].run_time or "")[:10], (end.run_time or "")[:10]
    span = f"{first} … {final}" if first != final else first
    ratio = series.unit == RATIO_UNIT
    return svg_markup(
        charts.history_chart(
            [p.value for p in pts],
            unreliable=[p.unreliable for p in pts],
            current=[(p.run_time, p.commit) in current for p in pts],
            x_tick_labels=[_commit_label(p.commit, p.dirty) for p in pts],
            title=series.variant or series.label,
            note=f"{fmt_num(end.value)} {series.unit}{change}",
            x_label=f"runs by commit, {span}" if span else "runs by commit",
            y_label="step / reference" if ratio else f"median ({series.unit})",
        )
    )


def history_block(
    entries: Sequence[Entry],
    history: Mapping[tuple[str, str], Series] | None,
    current: set[tuple[str | None, str | None]],
) -> dict[str, Any] | None:
    """Trend charts of the cases with two or more runs, the names of those without, and whether the
    figure is the normalised ratio (for the heading)."""
    if history is None:
        return None
    trends, single, seen, ratio = [], [], set(), False
    for e in entries:
        key = (e.run.fingerprint_id or "unknown", e.fullname)
        if key in seen:
            continue
        seen.add(key)
        s = history.get(key)
        if s is not None and len(s.points) >= 2:
            trends.append(trend_chart(s, current))
            ratio = ratio or s.unit == RATIO_UNIT
        else:
            single.append(e.record.variant or e.label)
    return {"trends": trends, "single": single, "ratio": ratio}


# ----------------------------------------------------------------------------- telemetry


def _peak_other_cores(entries: Sequence[Entry]) -> float | None:
    vals = [r.max for e in entries for r in telemetry_rows(e.record.telemetry) if r.metric == "other_cpu_cores"]
    return max(vals) if vals else None


def telemetry_block(title: str, entries: Sequence[Entry]) -> dict[str, Any] | None:
    """The sampler's summaries (perfgate.measure.telemetry: `{interval_s, n_samples, source, metrics}`) of one
    model group: a table (mean and range per metric, and why a case was unreliable) and, per unit,
    a chart of every case's min-mean-max; folded unless a case of the group was unreliable."""
    cases = [(e, telemetry_rows(e.record.telemetry)) for e in entries]
    cases = [(e, rows) for e, rows in cases if rows]
    if not cases:
        return None
    metrics = list(dict.fromkeys(r.metric for _, rows in cases for r in rows))
    table = []
    for e, rows in cases:
        by = {r.metric: r for r in rows}
        tel = e.record.telemetry or Telemetry()
        cells = [
            f"{fmt_num(by[m].mean, 3)} ({fmt_num(by[m].min, 3)}–{fmt_num(by[m].max, 3)})" if m in by else "-"
            for m in metrics
        ]
        notes = [str(x) for x in (e.record.unreliable, tel.gpu_unavailable) if x]
        table.append(
            {
                "label": e.label,
                "source": "-" if tel.source is None else str(tel.source),
                "samples": "-" if tel.n_samples is None else str(tel.n_samples),
                "interval": "-" if tel.interval_s is None else f"{float(tel.interval_s) * 1e3:g} ms",
                "cells": cells,
                "note": "; ".join(notes),
                "unreliable": bool(e.record.unreliable),
            }
        )
    by_unit: dict[str, list[tuple[tuple[str, float, float, float], str]]] = {}
    for i, (e, rows) in enumerate(cases):  # one colour per case
        for r in rows:
            by_unit.setdefault(r.unit or "value", []).append(
                ((f"{e.label} · {r.metric}", r.min, r.mean, r.max), charts.PALETTE[i % len(charts.PALETTE)])
            )
    units = {r.metric: r.unit for _, rows in cases for r in rows}
    plots = [
        svg_markup(
            charts.range_chart(
                [r for r, _ in rows],
                colors=[c for _, c in rows],
                axis_label=unit,
                title=f"{title.split(' [')[0]}: telemetry in {unit}",
            )
        )
        for unit, rows in by_unit.items()
    ]
    other = _peak_other_cores([e for e, _ in cases])
    n_unreliable = sum(1 for r in table if r["unreliable"])
    gist = [f"{len(table)} case(s)"]
    if other is not None:
        gist.append(f"other processes up to {fmt_num(other, 3)} cores")
    if n_unreliable:
        gist.append(f"{n_unreliable} unreliable")
    return {
        "title": title,
        "gist": " · ".join(gist),
        "open": n_unreliable > 0,
        "metrics": [f"{m} ({units[m]})" if units[m] else m for m in metrics],
        "rows": table,
        "charts": plots,
    }
