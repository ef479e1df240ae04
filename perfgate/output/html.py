"""The HTML reports: the benchmark report (`perfgate report`) and the profiler's (`perfgate
profile`), each one self-contained file rendered from a Jinja2 template in templates/.

Autoescaping is on for every template, so a name from a result file is text, never markup; the
charts (perfgate.output.charts, SVG that matplotlib escaped) are the only trusted HTML. The pages
carry their CSS inline and no script, web font or link to anything: they open offline, from a CI
artifact or a mail attachment, years later. This module turns results into the templates' rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from perfgate import gate
from perfgate.extras import need
from perfgate.gate.verdict_file import VerdictSet
from perfgate.history.runs import Run, Series
from perfgate.measure.fingerprint import KEY_FIELDS
from perfgate.output import charts
from perfgate.output.report_data import Entry, group_entries, run_key, timeline_series
from perfgate.output.report_sections import history_block, svg_markup, telemetry_block, verdict_block
from perfgate.output.terminal import accuracy_parts
from perfgate.output.text import fmt_num

VERDICT_CLASS = {
    gate.ERROR: "bad",
    gate.REGRESSION: "bad",
    gate.BUDGET: "bad",
    gate.UNRELIABLE: "warn",
    gate.INCONCLUSIVE: "warn",
    gate.IMPROVEMENT: "good",
    gate.NO_BASELINE: "muted",
    gate.UNCHANGED: "muted",
}
OPT_HEADERS = (
    "variant",
    "mean ms",
    "min ms",
    "max ms",
    "std ms",
    "median ms",
    "p90 ms",
    "peak MiB",
    "FPS / throughput",
    "speedup",
    "accuracy",
    "notes",
)
_ENV: Any = None


def environment() -> Any:
    """The Jinja2 environment of templates/ (created once; autoescaping on, undefined names are errors)."""
    global _ENV
    if _ENV is None:
        jinja2 = need("jinja2", "the HTML report")
        _ENV = jinja2.Environment(
            loader=jinja2.PackageLoader("perfgate.output", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=["jinja2.ext.do"],
        )
        _ENV.filters.update(num=fmt_num, f=_f, pct=_pct, badge=lambda v: VERDICT_CLASS.get(v, "muted"))
    return _ENV


def _f(v: Any, spec: str = ".3f", unit: str = "") -> str:
    """A number with `spec` and `unit`, '-' for None, 'inf' for infinity, anything else as text."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if v == float("inf") else format(v, spec) + unit
    return f"{v}{unit}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1%}"


def slug(text: str) -> str:
    return "m-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ----------------------------------------------------------------------------- the benchmark report


def _throughput_text(e: Entry) -> str:
    fps = e.value("fps")
    if fps is not None:
        return f"{fmt_num(fps)} FPS"
    thr = e.record.throughput_primary
    if thr is not None:
        return f"{fmt_num(thr)} {e.record.unit}/s"
    mean = e.value("mean_ms")
    return f"{fmt_num(1e3 / mean)} steps/s" if mean else "-"


def _notes(e: Entry) -> list[dict[str, str]]:
    """Short notes of a row: (text, hover title, badge class or '')."""
    r, notes = e.record, []
    if r.unreliable:
        notes.append({"text": "unreliable", "title": r.unreliable, "badge": "warn"})
    if r.remeasured:
        notes.append({"text": f"remeasured {int(r.remeasured)}x", "title": "", "badge": ""})
    if r.graph_breaks:
        notes.append({"text": f"{r.graph_breaks} graph break(s)", "title": "", "badge": ""})
    for value, name in ((r.warm_compile_s, "compile"), (r.engine_build_s, "engine build")):
        if isinstance(value, (int, float)):
            notes.append({"text": f"{name} {value:.1f} s", "title": "", "badge": ""})
    notes += _energy_notes(r) + _throttle_notes(r)
    if isinstance(r.quantized_linears, int):
        notes.append(
            {
                "text": f"{r.quantized_linears}/{r.linears if r.linears is not None else '?'} linears quantised",
                "title": "",
                "badge": "",
            }
        )
    return notes


def _energy_notes(r: Any) -> list[dict[str, str]]:
    """Frames per joule (else joules per step) with the counter window's error bound; a skipped
    figure as a dash whose hover says why, never a zero (perfgate.measure.energy)."""
    if r.energy_j_per_step is not None:
        value = f"{r.frames_per_j:.3g} frames/J" if r.frames_per_j is not None else f"{r.energy_j_per_step:.3g} J/step"
        bound = r.energy.error_bound_pct if r.energy else None
        return [{"text": value + (f" (±{bound:.1f}%)" if bound is not None else ""), "title": "", "badge": ""}]
    if r.energy_skipped:
        return [{"text": "energy -", "title": r.energy_skipped, "badge": "muted"}]
    return []


def _throttle_notes(r: Any) -> list[dict[str, str]]:
    """GPU: how many timed rounds were dropped as throttled (perfgate.measure.throttle), why on hover."""
    t = r.throttle
    if t is None or not t.dropped:
        return []
    why = ", ".join(f"{k} {v}x" for k, v in t.reasons.items())
    return [{"text": f"{t.dropped} throttled round(s) dropped", "title": why, "badge": "muted"}]


def optimisation_rows(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """The seeds' optimisation history: one row per variant."""
    rows = []
    for e in entries:
        sp = e.value("speedup")
        rows.append(
            {
                "label": e.label,
                "numbers": [
                    fmt_num(e.value(m)) for m in ("mean_ms", "min_ms", "max_ms", "std_ms", "median_ms", "p90_ms")
                ],
                "peak_mib": fmt_num(e.value("peak_mem_mib")),
                "throughput": _throughput_text(e),
                "speedup": f"{sp:.2f}×" if sp else "-",
                "accuracy": " · ".join(accuracy_parts(e.record, " dB")) or "-",
                "notes": _notes(e),
            }
        )
    return rows


def model_charts(entries: Sequence[Entry]) -> list[Any]:
    """Speedup bars, latency distribution and memory bars of one model group (those with data)."""
    out = []
    speed = [(e.label, e.value("speedup")) for e in entries if e.value("speedup")]
    if len(speed) > 1:  # the eager baseline alone is 1x by definition
        out.append(
            charts.hbar_chart(
                speed,
                title="Speedup over eager baseline (same run)",
                axis_label="speedup (×, higher is better)",
                value_suffix="×",
                ref=1.0,
                ref_label="1× = eager baseline",
                colors=[charts.GOOD if v >= 1 else charts.BAD for _, v in speed],
                legend=(("faster than eager", charts.GOOD), ("slower than eager", charts.BAD)),
            )
        )
    dist = [(e.label, e.samples_ms()) for e in entries if e.samples_ms()]
    if dist:
        out.append(charts.box_chart(dist, title="Latency per step", axis_label="latency (ms, lower is better)"))
    mem = [(e.label, e.value("peak_mem_mib")) for e in entries if e.value("peak_mem_mib") is not None]
    if mem:
        methods = sorted({e.record.mem_method for e in entries if e.record.mem_method})
        suffix = f" ({', '.join(methods)})" if methods else ""
        out.append(
            charts.hbar_chart(
                mem,
                title=f"Peak memory{suffix}",
                axis_label="peak memory (MiB, lower is better)",
                value_suffix=" MiB",
                colors=[charts.PALETTE[i % len(charts.PALETTE)] for i in range(len(mem))],
            )
        )
    return [svg_markup(c) for c in out]


def fingerprint_block(runs: Sequence[Run]) -> dict[str, Any] | None:
    seen: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r.fingerprint is not None:
            seen.setdefault(r.fingerprint_id or "unknown", r.fingerprint)
    if not seen:
        return None
    fields = list(KEY_FIELDS) + sorted({k for fp in seen.values() for k in fp} - set(KEY_FIELDS))
    rows = []
    for k in fields:
        vals = [seen[i].get(k) for i in seen]
        rows.append(
            {
                "field": k,
                "key": k in KEY_FIELDS,
                "values": [
                    ", ".join(map(str, v)) if isinstance(v, list) else ("-" if v is None else str(v)) for v in vals
                ],
            }
        )
    return {"ids": list(seen), "rows": rows}


def benchmark_report(
    runs: Sequence[Run],
    verdicts: VerdictSet | None = None,
    history: Sequence[Series] | None = None,
    *,
    title: str = "perfgate report",
    unreadable: Sequence[str] = (),
    generated_at: datetime | None = None,
    accepted_changes: Sequence[Any] = (),
) -> str:
    """The whole report as one HTML string, what needs attention first. `history`: per (fingerprint,
    case) the series of its gated figure (perfgate.output.report_data.history_for), or None to leave
    trends out."""
    groups = group_entries(runs)
    hist = {(s.fingerprint_id, s.fullname): s for s in history} if history is not None else None
    current = {run_key(r) for r in runs}
    models = []
    for t, entries in groups.items():
        rec = entries[0].record
        models.append(
            {
                "title": t,
                "slug": slug(t),
                "nav": t.rsplit(" on ", 1)[0],  # the size and options too: a model can have several groups
                "params": rec.params,
                "step_kind": rec.step_kind,
                "dtype": rec.dtype,
                "timer": rec.timer or "?",
                "rows": optimisation_rows(entries),
                "charts": model_charts(entries),
                "history": history_block(entries, hist, current),
            }
        )
    sources = [
        {
            "path": r.path,
            "commit": (r.commit or "-")[:12] + (" (dirty)" if r.dirty else ""),
            "branch": r.branch or "-",
            "time": r.run_time.isoformat(timespec="seconds") if r.run_time else "-",
            "cases": len(r.benchmarks),
        }
        for r in runs
    ]
    telemetry = [b for t, entries in groups.items() if (b := telemetry_block(t, entries))]
    from perfgate.output.report_data import change_point_block  # here: imported by the one report that marks steps

    return (
        environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            generated=(generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
            n_runs=len(runs),
            n_cases=sum(len(r.benchmarks) for r in runs),
            commits=", ".join(sorted({(r.commit or "-")[:7] + ("*" if r.dirty else "") for r in runs})),
            fingerprints=", ".join(sorted({r.fingerprint_id or "unknown" for r in runs})),
            verdicts=verdict_block(verdicts, runs),
            headers=OPT_HEADERS,
            models=models,
            change_points=change_point_block(history, accepted_changes),
            telemetry=telemetry,
            fingerprint=fingerprint_block(runs),
            sources=sources,
            unreadable=list(unreadable),
        )
    )


# ----------------------------------------------------------------------------- the profiler's report


def _timeline_charts(point: Mapping[str, Any]) -> list[Any]:
    """The sampler's timeline of one profile point, one chart per unit."""
    out = []
    for unit, series in timeline_series(point.get("telemetry_timeline")).items():
        if any(len(xs) >= 2 for _, xs, _ in series):
            out.append(
                svg_markup(
                    charts.line_chart(
                        series,
                        title=f"telemetry ({unit})",
                        x_label="time since the sampler started (s)",
                        y_label=unit,
                        zero=unit == "%",
                        width=420,
                        height=200,
                    )
                )
            )
    return out


def _peak_basis(flops: Mapping[str, Any] | None) -> str:
    """'linear: 0.0147 GFLOP at 1.2 TFLOP/s (float32, 256x256x256); ...' per kernel family."""
    return "; ".join(
        f"{c}: {b['gflop']:.3g} GFLOP at {b['tflops']:.3g} TFLOP/s ({b['dtype']}{' tf32' if b.get('tf32') else ''}, "
        f"{b['shape']})"
        for c, b in ((flops or {}).get("peak_basis") or {}).items()
    )


def profile_report(report: Mapping[str, Any]) -> str:
    """`perfgate profile`'s report.json as one HTML page."""
    points = [
        {
            "p": p,
            "timeline": _timeline_charts(p),
            "peak_basis": _peak_basis(p.get("flops")),
            "throughput": ", ".join(f"{v:.2f} {u}/s" for u, v in p["benchmark"]["throughput"].items()),
        }
        for p in report["points"]
    ]
    return environment().get_template("profile.html.j2").render(report=report, points=points)
