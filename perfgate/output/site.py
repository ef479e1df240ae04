"""`perfgate report --site DIR`: the history dashboard as static pages, pure (returns {path: html}).

index.html: every case on every machine, what needs attention first (a failing verdict of the
newest run, a newest level beyond the tolerance, an unaccepted shift for the worse), each headed by
the figure that gates it (instructions per step on a CPU that counted them, milliseconds beside;
the median ms on a GPU, GPU busy time and kernel launches beside where recorded) with its change from the baseline;
then the shifts for the worse with their bisect command and the newest run per machine.
m/<model>.html: the optimisation history (each variant's speedup over eager in the newest run), then
one chart per model group (machine, size, options) with its variants together, in percent change
from each variant's baseline, the tolerance band and the baselines' measured noise on the axis,
each point linking to its run's page, change points marked (worse, better, accepted).
r/<fp>/<run>.html: one run's figures and verdicts with its commit. No script, no external resource:
the pages load from a folder, from GitHub Pages or from a zip without a network.

The charts are hand-written SVG, not the report's matplotlib: a year of pushes is ~4,000 runs per
case, and matplotlib's SVG of that many linked markers is hundreds of KB per chart and a second of
drawing each. A chart keeps at most MAX_MARKS linked markers, shared by its variants (consecutive
runs bucketed, the bucket's median drawn and its newest run linked), and LINE_POINTS points per
line, so a page's weight is bounded by its number of cases whatever the length of the history;
change points are found on the full series. The figures themselves are perfgate.history.dashboard's.
"""

from __future__ import annotations

import html
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from perfgate.gate.policy import Policy
from perfgate.history import dashboard
from perfgate.history.dashboard import INSTRUCTIONS, NORMALISED, CaseFigures
from perfgate.history.runs import Run, Series, build_series, parse_time
from perfgate.output import wording
from perfgate.output.change_points import bisect_ranges, case_id
from perfgate.output.charts import PALETTE
from perfgate.output.text import fmt_num
from perfgate.results import Benchmark

MAX_MARKS = 240  # linked markers per chart, shared by its lines (model pages)
LINE_POINTS = 160  # points per line of a chart (bucket medians: a year of pushes reads as a level)
SPARK_POINTS = 120  # points per sparkline (index)
CHART_W, CHART_H = 880, 240
LEFT, RIGHT, TOP, BOTTOM = 52, 40, 12, 26  # the plot's margins: tick labels left, noise bars right, dates below
_FAILING = ("regression", "error", "failed", "budget")
_UNITS = {INSTRUCTIONS: "instructions", NORMALISED: "× ref"}


@dataclass
class CaseTrend:
    series: Series
    metric: str
    change_points: list[dict[str, Any]]
    model_page: str
    anchor: str
    bisect: list[dict[str, Any]] = field(default_factory=list)
    figures: CaseFigures | None = None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def run_page(run: Run) -> str:
    stem = Path(run.path).name.removesuffix(".gz").removesuffix(".json")
    return f"r/{slug(run.fingerprint_id or 'unknown')}/{slug(stem)}.html"


def _buckets(n: int, most: int) -> list[range]:
    """Consecutive index ranges covering 0..n-1: one per index up to `most`, else exactly `most`
    of sizes differing by at most one."""
    most = max(1, most)
    if n <= most:
        return [range(i, i + 1) for i in range(n)]
    edges = [i * n // most for i in range(most + 1)]
    return [range(a, b) for a, b in zip(edges, edges[1:])]


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def _scale(values: Sequence[float], lo_px: float, hi_px: float) -> tuple[float, float, Any]:
    lo, hi = min(values), max(values)
    span = max(hi - lo, abs(hi) * 0.05, 1e-12)
    lo, hi = lo - span * 0.08, hi + span * 0.08
    return lo, hi, lambda v: hi_px - (v - lo) / (hi - lo) * (hi_px - lo_px)


def sparkline(series: Series, baseline: float | None = None, width: int = 120, height: int = 24) -> Markup:
    """The trend of a case in a line, reliable runs only, bucketed to SPARK_POINTS; the baseline as
    a grey line where it is near the values."""
    values = [p.value for p in series.points if not p.unreliable] or [p.value for p in series.points]
    groups = _buckets(len(values), SPARK_POINTS)
    ys = [_median([values[i] for i in g]) for g in groups]
    near = baseline is not None and min(ys) / 1.5 <= baseline <= max(ys) * 1.5
    lo, hi, y = _scale([*ys, baseline] if near else ys, 2, height - 2)
    step = (width - 4) / max(len(ys) - 1, 1)
    pts = " ".join(f"{2 + i * step:.1f},{y(v):.1f}" for i, v in enumerate(ys))
    base = f'<line class="base" x1="2" x2="{width - 2}" y1="{y(baseline):.1f}" y2="{y(baseline):.1f}"/>' if near else ""
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f'{base}<polyline points="{pts}"/></svg>'
    )


def _nice_step(span: float, most: int = 6) -> float:
    raw = span / most
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _pct_tick(v: float) -> str:
    return "0%" if abs(v) < 1e-9 else f"{v:+g}%"


def _time_of(p: Any) -> float:
    t = parse_time(p.run_time) or parse_time(p.commit_time)
    return t.timestamp() if t else 0.0


def model_chart(trends: Sequence[CaseTrend], pages: Mapping[str, str], prefix: str) -> Markup:
    """One model group's variants on one time axis, each as its change in percent from its own
    baseline (from its first kept run where none is recorded): the baseline at 0%, the tolerance
    band around it, each baseline's measured noise as a bar in its colour at the right edge, a line
    of bucket medians and linked markers per variant, change points as dashed lines."""
    lines = []
    per_line = max(8, MAX_MARKS // max(len(trends), 1))
    for k, t in enumerate(trends):
        f = t.figures
        pts = t.series.points
        base = f.baseline.value if f and f.baseline.value else None
        if base is None:  # no baseline: change from the first reliable run
            base = next((p.value for p in pts if not p.unreliable), pts[0].value)
        pcts = [(p.value / base - 1) * 100 for p in pts]
        times = [_time_of(p) for p in pts]
        line = [(times[g[-1]], _median([pcts[i] for i in g])) for g in _buckets(len(pts), LINE_POINTS)]
        marks = [(times[g[-1]], _median([pcts[i] for i in g]), g) for g in _buckets(len(pts), per_line)]
        lines.append((k, t, pcts, times, line, marks))
    tols = sorted({t.figures.baseline.tolerance * 100 for t in trends if t.figures})
    noises = [
        (k, t.figures.baseline.noise * 100) for k, t in enumerate(trends) if t.figures and t.figures.baseline.noise
    ]
    drawn = [v for *_, line, _ in lines for _, v in line]
    # The axis: the data (its 2nd to 98th percentile, so one wild bucket cannot flatten the rest),
    # the baseline, the widest tolerance band and every measured noise.
    s = sorted(drawn) or [0.0]
    lo_d, hi_d = s[int(0.02 * (len(s) - 1))], s[int(math.ceil(0.98 * (len(s) - 1)))]
    widest = max([*tols, *(n for _, n in noises), 0.5])
    lo, hi = min(lo_d, -widest), max(hi_d, widest)
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    x0, x1, y0, y1 = LEFT, CHART_W - RIGHT, TOP, CHART_H - BOTTOM
    # The x axis is the order of the group's runs (pushes a few minutes apart and a night between
    # days take the same width), dated below.
    order = sorted({tm for *_, times, _, _ in lines for tm in times})
    rank = {tm: i for i, tm in enumerate(order)}

    def X(tm: float) -> float:  # noqa: N802
        return x0 + rank[tm] / (len(order) - 1) * (x1 - x0) if len(order) > 1 else (x0 + x1) / 2

    def Y(v: float) -> float:  # noqa: N802
        return y1 - (min(max(v, lo), hi) - lo) / (hi - lo) * (y1 - y0)

    label = ", ".join(t.series.label for t in trends)
    parts = [
        f'<svg class="chart" width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
        f'aria-label="{html.escape(label)}">'
    ]
    for tol in reversed(tols):  # the band of each tolerance, the widest under the others
        parts.append(
            f'<rect class="band" x="{x0}" y="{Y(tol):.1f}" width="{x1 - x0}" height="{Y(-tol) - Y(tol):.1f}">'
            f"<title>{html.escape(wording.tolerance(tol / 100))}</title></rect>"
        )
    step = _nice_step(hi - lo)
    v = math.ceil(lo / step) * step
    while v <= hi:
        parts.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{Y(v):.1f}" y2="{Y(v):.1f}"/>')
        parts.append(f'<text class="ax tick" x="{x0 - 4}" y="{Y(v) + 4:.1f}">{_pct_tick(round(v, 6))}</text>')
        v += step
    parts.append(f'<line class="zero" x1="{x0}" x2="{x1}" y1="{Y(0):.1f}" y2="{Y(0):.1f}"/>')
    parts.append(f'<text class="ax" x="{x0 + 4}" y="{Y(0) - 4:.1f}">baseline</text>')
    if tols:
        parts.append(
            f'<text class="ax" x="{x0 + 4}" y="{Y(tols[-1]) - 3:.1f}">{wording.tolerance(tols[-1] / 100)}</text>'
        )
    if noises:
        parts.append(f'<text class="ax end" x="{CHART_W - 2}" y="{y0 + 8}">noise</text>')
    for j, (k, n) in enumerate(noises):
        xn = x1 + 8 + j * 5 if x1 + 8 + j * 5 < CHART_W - 2 else CHART_W - 2
        colour = PALETTE[k % len(PALETTE)]
        tip = html.escape(f"{trends[k].series.label}: the baseline's noise ±{n:.2g}% (half its interquartile range)")
        parts.append(
            f'<line class="noise" stroke="{colour}" x1="{xn:.1f}" x2="{xn:.1f}" y1="{Y(n):.1f}" y2="{Y(-n):.1f}">'
            f"<title>{tip}</title></line>"
        )
    for k, t, _, times, line, marks in lines:
        parts += _variant_svg(PALETTE[k % len(PALETTE)], t, times, line, marks, X, Y, (y0, y1), pages, prefix)
    parts += _run_axis(order, X, x0, x1, y0, y1)
    parts.append("</svg>")
    return Markup("".join(parts))


def _variant_svg(
    colour: str,
    t: CaseTrend,
    times: list[float],
    line: list[tuple[float, float]],
    marks: list[tuple[float, float, range]],
    X: Callable[[float], float],
    Y: Callable[[float], float],
    y_span: tuple[float, float],
    pages: Mapping[str, str],
    prefix: str,
) -> list[str]:
    """One variant on the chart: its change points, its line of bucket medians, its linked markers."""
    y0, y1 = y_span
    parts: list[str] = []
    for c in t.change_points:
        kind = "accepted" if c["accepted"] else (c["direction"] or "step")
        xc = X(times[c["index"]])
        what = f"accepted: {c['accepted']}" if c["accepted"] else f"{wording.pct(c['change_pct'])} {c['direction']}"
        tip = html.escape(f"{t.series.label}: change point at {(c['commit'] or '?')[:12]}: {what}")
        parts.append(
            f'<line class="cp {kind}" x1="{xc:.1f}" y1="{y0}" x2="{xc:.1f}" y2="{y1}"><title>{tip}</title></line>'
        )
    pts_attr = " ".join(f"{X(tm):.1f},{Y(v):.1f}" for tm, v in line)
    parts.append(f'<polyline stroke="{colour}" points="{pts_attr}"/>')
    unit = _UNITS.get(t.metric, t.series.unit)
    for tm, v, g in marks:
        newest = t.series.points[g[-1]]
        href = pages.get(newest.source)
        many = f"{len(g)} runs, newest " if len(g) > 1 else ""
        value = _median([t.series.points[i].value for i in g])
        tip = (
            f"{t.series.label}: {many}{(newest.commit or '?')[:12]} {(newest.run_time or '')[:16]}: "
            f"{fmt_num(value)} {unit}, {wording.pct(v)} vs baseline"
        )
        dot = (
            f'<circle fill="{colour}" cx="{X(tm):.1f}" cy="{Y(v):.1f}" r="2.4">'
            f"<title>{html.escape(tip)}</title></circle>"
        )
        parts.append(f'<a href="{prefix}{href}">{dot}</a>' if href else dot)
    return parts


def _run_axis(
    order: list[float],
    X: Callable[[float], float],
    x0: float,
    x1: float,
    y0: float,
    y1: float,
) -> list[str]:
    """The run axis: its line, five dates along it, the number of runs."""
    parts: list[str] = []
    parts.append(f'<line class="axis" x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}"/>')
    ticks = sorted({order[round(i * (len(order) - 1) / 4)] for i in range(5)})
    for i, tm in enumerate(ticks):  # dates along the run axis
        when = datetime.fromtimestamp(tm, UTC).strftime("%Y-%m-%d") if tm else ""
        anchor = " start" if i == 0 and len(ticks) > 1 else (" end" if i == len(ticks) - 1 and i else " mid")
        parts.append(f'<text class="ax{anchor}" x="{X(tm):.1f}" y="{CHART_H - 8}">{when}</text>')
    parts.append(f'<text class="ax end" x="{x1}" y="{y0 - 2}">{len(order)} run{"s" if len(order) > 1 else ""}</text>')
    return parts


def trend_chart(t: CaseTrend, pages: Mapping[str, str], prefix: str) -> Markup:
    """One case alone on a chart (model_chart of one)."""
    return model_chart([t], pages, prefix)


def trends(
    runs: Sequence[Run],
    accepted: Sequence[Any] = (),
    *,
    min_change: float = 0.05,
    baselines: dashboard.Baselines | None = None,
) -> list[CaseTrend]:
    """Per (fingerprint, case): the series of the figure that gates it (perfgate.history.dashboard.
    headline_metric of its newest entry) with its baseline, change points and bisect suggestions."""
    from perfgate.history.changepoints import MIN_SIZE, change_points

    newest = dashboard.newest_entries(runs)
    metric_of = {key: dashboard.headline_metric(b) for key, (_, b) in newest.items()}
    by_metric = {
        m: {(s.fingerprint_id, s.fullname): s for s in build_series(runs, m)} for m in sorted(set(metric_of.values()))
    }
    baselines = baselines or dashboard.Baselines(None, Policy())
    out = []
    for key, metric in sorted(metric_of.items()):
        s = by_metric[metric].get(key)
        if s is None:
            continue
        s.unit = _UNITS.get(metric, s.unit)
        run, bench = newest[key]
        base = baselines.for_case(key[0], bench, metric)
        cps = []
        if len(s.points) >= 2 * MIN_SIZE:
            least = min(min_change, base.tolerance) if metric == INSTRUCTIONS else min_change
            cps = [c.as_dict() for c in change_points(s, "lower", accepted, metric=metric, min_change=least)]
        s.change_points = cps
        verdicts = [v for v in (_meta(run).get("verdicts") or []) if v.get("case") in (bench.fullname, bench.name)]
        model = s.model or s.name
        t = CaseTrend(s, metric, cps, f"m/{slug(model)}.html", slug(f"{s.fingerprint_id}-{s.label}"))
        t.bisect = bisect_ranges(_One(s))
        t.figures = dashboard.figures(s, metric, bench, base, change_points=cps, verdicts=verdicts)
        out.append(t)
    return out


@dataclass
class _One:  # bisect_ranges reads a History's series
    series_: Series

    @property
    def series(self) -> list[Series]:
        return [self.series_]


def _meta(run: Run) -> dict[str, Any]:
    return run.data.get("perfgate_history") or {}


def _verdict_rows(run: Run) -> list[dict[str, Any]]:
    """The run's kept verdicts, failing ones first, then improvements, each with its case id."""
    rows = [
        {
            **v,
            "id": case_id(str(v["case"])),
            "figure": wording.verdict_metric_name(str(v.get("metric")), v.get("compared")),
        }
        for v in _meta(run).get("verdicts") or []
    ]
    return sorted(rows, key=lambda v: (v.get("verdict") not in _FAILING, v.get("verdict") != "improvement", v["case"]))


# A link the dashboard writes: https only, no character that could end the attribute or hide a
# scheme (the data branch's `source` is data: a `javascript:` or `data:` URL there must not become
# a link).
HTTPS_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?(?:\?[^\s\"'<>`]*)?")


def https_url(value: Any) -> str | None:
    """`value` if it is a plain https URL, else None (rendered as no link)."""
    return value if isinstance(value, str) and HTTPS_URL.fullmatch(value) else None


def commit_url_error(template: str) -> str | None:
    """Why `template` (report --commit-url) links no commit, or None: it needs exactly one `{commit}`
    field and nothing else to fill, and must be an https address once filled (the only links the
    dashboard writes), so a template that would link nothing is refused before any run is read."""
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"{exc}; write a literal brace as {{{{ or }}}}"
    if [name for name, _, _ in fields] != ["commit"] or any(spec or conv for _, spec, conv in fields):
        found = ", ".join(
            "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            for name, spec, conv in fields
        )
        return f"needs exactly one plain {{commit}} field and no other (found {found or 'none'})"
    if https_url(template.format(commit="0" * 40)) is None:
        return "is not an https:// address once {commit} is filled in (the dashboard links https only)"
    return None


def _commit_href(commit: str | None, commit_url: str) -> str | None:
    return https_url(commit_url.format(commit=commit)) if commit and commit_url else None


def _group_key(t: CaseTrend) -> tuple[str, str, str, str]:
    """The cases one chart draws together: a model's variants on one machine, size and options."""
    s = t.series
    size = s.size or "?"
    bench_opts = ""
    m = re.search(r"\[(.*)\]", s.label)
    if m:
        bench_opts = m.group(1)
    return (s.fingerprint_id, bench_opts or size, t.metric, s.model or s.name)


def build_site(
    runs: Sequence[Run],
    accepted: Sequence[Any] = (),
    *,
    commit_url: str = "",
    title: str = "perfgate history",
    generated_at: datetime | None = None,
    min_change: float = 0.05,
    baselines: dashboard.Baselines | None = None,
) -> dict[str, str]:
    """Every page of the site: relative path -> HTML."""
    from perfgate.output.html import environment

    runs = sorted(runs, key=Run.order_key)
    pages = {r.path: run_page(r) for r in runs}
    all_trends = trends(runs, accepted, min_change=min_change, baselines=baselines)
    env = environment()
    env.filters.update(pct=wording.pct)
    tpl = env.get_template("site.html.j2")
    css = env.loader.get_source(env, "site.css")[0]
    when = (generated_at or datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z")
    common = {"css": css, "title": title, "generated": when, "runs_total": len(runs)}
    common.update(CHANGE=wording.CHANGE, CHANGE_TOLERANCE=wording.CHANGE_TOLERANCE)
    latest = _latest(runs, pages, commit_url)
    ordered = sorted(all_trends, key=lambda t: dashboard.attention_order(t.figures))
    calm = dashboard.ATTENTION.index("no baseline")  # from here on: nothing to act on
    attention = [_row(t) for t in ordered if dashboard.ATTENTION.index(t.figures.attention) < calm]
    machines: dict[str, list[dict[str, Any]]] = {}
    for t in ordered:
        if dashboard.ATTENTION.index(t.figures.attention) >= calm:
            machines.setdefault(t.series.fingerprint_id, []).append(_row(t))
    counts = {a: sum(1 for t in all_trends if t.figures.attention == a) for a in dashboard.ATTENTION}
    out = {
        "index.html": tpl.render(
            kind="index",
            prefix="",
            latest=latest,
            attention=attention,
            machines=sorted(machines.items()),
            counts={a: n for a, n in counts.items() if n},
            bisect=[b for t in ordered for b in t.bisect],
            **common,
        )
    }
    models: dict[str, list[CaseTrend]] = {}
    for t in all_trends:
        models.setdefault(t.model_page, []).append(t)
    for page, ts in models.items():
        model = ts[0].series.model or ts[0].series.name
        charts = _model_charts(model, ts, pages)
        charts.sort(key=lambda c: min(dashboard.ATTENTION.index(x["attention"]) for x in c["cases"]))
        opt_rows = dashboard.optimisation_history(runs, model)
        best = max([r.speedup or 0.0 for r in opt_rows] + [1.0])
        out[page] = tpl.render(
            kind="model",
            prefix="../",
            model=model,
            charts=charts,
            optimisation=[
                {
                    "group": r.group,
                    "variant": r.variant,
                    "median_ms": fmt_num(r.median_ms),
                    "speedup": wording.speedup(r.speedup),
                    "bar_pct": round(100 * (r.speedup or 0.0) / best, 1),
                    "commit": (r.commit or "?")[:12],
                    "time": r.run_time or "",
                }
                for r in opt_rows
            ],
            **common,
        )
    for r in runs:
        meta = _meta(r)
        verdicts = {(v["case"]): v for v in _verdict_rows(r)}
        out[pages[r.path]] = tpl.render(
            kind="run",
            prefix="../../",
            run={
                "file": r.path,
                "fingerprint_id": r.fingerprint_id,
                "commit": r.commit,
                "commit_href": _commit_href(r.commit, commit_url),
                "time": (r.run_time.isoformat() if r.run_time else "")[:19],
                "tier": meta.get("tier"),
                "source": https_url(meta.get("source")),
            },
            entries=[_entry(b, verdicts) for b in r.benchmarks],
            counted=any(b.record.instructions_per_step is not None for b in r.benchmarks),
            launches=any(b.record.kernels_per_step is not None for b in r.benchmarks),
            verdicts=_verdict_rows(r),
            **common,
        )
    return out


def _latest(runs: Sequence[Run], pages: Mapping[str, str], commit_url: str) -> list[dict[str, Any]]:
    """The index's top: each machine's newest run, its verdicts by kind, the changed ones shown."""
    newest: dict[str, Run] = {}
    for r in runs:
        newest[r.fingerprint_id or "unknown"] = r
    latest = []
    for fp, r in sorted(newest.items()):
        rows = _verdict_rows(r)
        kinds: dict[str, int] = {}
        for v in rows:
            kinds[str(v.get("verdict"))] = kinds.get(str(v.get("verdict")), 0) + 1
        latest.append(
            {
                "fingerprint_id": fp,
                "commit": r.commit,
                "commit_href": _commit_href(r.commit, commit_url),
                "time": (r.run_time.isoformat() if r.run_time else "")[:16],
                "tier": _meta(r).get("tier"),
                "page": pages[r.path],
                "kinds": kinds,
                "shown": [v for v in rows if v.get("verdict") != "unchanged"],
                "folded": [v for v in rows if v.get("verdict") == "unchanged"],
            }
        )
    return latest


def _model_charts(model: str, ts: Sequence[CaseTrend], pages: Mapping[str, str]) -> list[dict[str, Any]]:
    """A model page's charts: one per machine, options and figure, its variants on one axis."""
    groups: dict[tuple[str, str, str, str], list[CaseTrend]] = {}
    for t in ts:
        groups.setdefault(_group_key(t), []).append(t)
    charts = []
    for (fp, opts, metric, _), members in sorted(groups.items()):
        members = sorted(members, key=lambda t: (t.series.variant != "baseline", t.series.label))
        charts.append(
            {
                "title": f"{model} [{opts}]",
                "fingerprint_id": fp,
                "figure": wording.figure_name(metric),
                # A group of single runs (a recorded baseline alone) has no history to draw yet.
                "chart": model_chart(members, pages, "../") if any(len(t.series.points) > 1 for t in members) else "",
                "cases": [{**_row(t), "colour": PALETTE[k % len(PALETTE)]} for k, t in enumerate(members)],
            }
        )
    return charts


def _row(t: CaseTrend) -> dict[str, Any]:
    s, f = t.series, t.figures
    worse = [c for c in t.change_points if c["direction"] == "worse" and not c["accepted"]]
    beside = [f"{wording.figure_value(v, m)} {wording.figure_name(m)}" for m, v in f.beside.items()]
    return {
        "label": s.label,
        "model": s.model or s.name,
        "variant": s.variant or "",
        "fingerprint_id": s.fingerprint_id,
        "runs": len(s.points),
        "figure": wording.figure_name(t.metric),
        "newest": wording.figure_value(f.newest_level, t.metric),
        "beside": ", ".join(beside),
        "change": wording.pct(f.newest_change_pct) if f.newest_change_pct is not None else "",
        "change_cell": wording.change_cell(f.newest_change_pct, f.baseline.tolerance),
        "tolerance": wording.tolerance(f.baseline.tolerance),
        "noise": f"±{f.baseline.noise * 100:.2g}%" if f.baseline.noise else "",
        "baseline": wording.figure_value(f.baseline.value, t.metric) if f.baseline.value else "",
        "baseline_source": f.baseline.source,
        "attention": f.attention,
        "attention_class": slug(f.attention),
        "speedup": wording.speedup(f.speedup),
        "spark": sparkline(s, f.baseline.value),
        "steps": len(t.change_points),
        "worse": len(worse),
        "accepted": sum(1 for c in t.change_points if c["accepted"]),
        "href": f"{t.model_page}#{t.anchor}",
        "anchor": t.anchor,
        "change_points": t.change_points,
        "bisect": t.bisect,
    }


def _entry(b: Benchmark, verdicts: Mapping[str, Any]) -> dict[str, Any]:
    v = verdicts.get(b.name) or verdicts.get(b.fullname)
    return {
        "label": b.label,
        "median_ms": b.record.median_ms,
        "normalised": b.record.normalised_median,
        "instructions": wording.figure_value(b.record.instructions_per_step, INSTRUCTIONS)
        if b.record.instructions_per_step is not None
        else "",
        "kernels": wording.figure_value(b.record.kernels_per_step, "kernels_per_step")
        if b.record.kernels_per_step is not None
        else "",
        "speedup": wording.speedup(b.record.speedup),
        "verdict": (v or {}).get("verdict"),
        "change": (v or {}).get("change_pct"),
    }
