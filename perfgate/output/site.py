"""`perfgate report --site DIR`: the history dashboard as static pages, pure (returns {path: html}).

index.html: the newest run's verdicts per machine first (failures at the top), then every model,
variant and device with its trend over commits (a sparkline), its last value and change, and the
change points found; m/<model>.html: per case a chart of the gated figure over every kept run, each
point linking to its run's page, change points marked (worse, better, accepted); r/<fp>/<run>.html:
one run's figures and verdicts with its commit. No script, no external resource: the pages load
from a folder, from GitHub Pages or from a zip without a network.

The charts are hand-written SVG, not the report's matplotlib: a year of pushes is ~4,000 runs per
case, and matplotlib's SVG of that many linked markers is hundreds of KB per chart and a second of
drawing each. Here a chart keeps at most MAX_MARKS markers (consecutive runs bucketed, the bucket's
median drawn and its newest run linked), so a page's weight is bounded by its number of cases
whatever the length of the history; change points are found on the full series.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from perfgate.history.runs import Run, Series, build_series
from perfgate.output.change_points import bisect_ranges, case_id
from perfgate.output.report_data import NORMALISED, RATIO_UNIT, gated_metric
from perfgate.output.text import fmt_num
from perfgate.results import Benchmark

MAX_MARKS = 240  # linked markers per chart (model pages)
SPARK_POINTS = 120  # points per sparkline (index)
CHART_W, CHART_H, PAD = 720, 170, 34
_FAILING = ("regression", "error", "failed", "budget")


@dataclass
class CaseTrend:
    series: Series
    metric: str
    change_points: list[dict[str, Any]]
    model_page: str
    anchor: str
    bisect: list[dict[str, Any]] = field(default_factory=list)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def run_page(run: Run) -> str:
    stem = Path(run.path).name.removesuffix(".gz").removesuffix(".json")
    return f"r/{slug(run.fingerprint_id or 'unknown')}/{slug(stem)}.html"


def _buckets(n: int, most: int) -> list[range]:
    """Consecutive index ranges covering 0..n-1: one per index up to `most`, else exactly `most`
    of sizes differing by at most one."""
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


def sparkline(series: Series, width: int = 120, height: int = 24) -> Markup:
    """The trend of a case in a line, reliable runs only, bucketed to SPARK_POINTS."""
    values = [p.value for p in series.points if not p.unreliable] or [p.value for p in series.points]
    groups = _buckets(len(values), SPARK_POINTS)
    ys = [_median([values[i] for i in g]) for g in groups]
    _, _, y = _scale(ys, 2, height - 2)
    step = (width - 4) / max(len(ys) - 1, 1)
    pts = " ".join(f"{2 + i * step:.1f},{y(v):.1f}" for i, v in enumerate(ys))
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f'<polyline points="{pts}"/></svg>'
    )


def trend_chart(t: CaseTrend, pages: Mapping[str, str], prefix: str) -> Markup:
    """One case over every run: a line of bucket medians, a linked marker per bucket, change points
    as vertical lines (class worse / better / accepted), the value axis's two ends labelled."""
    s = t.series
    pts = s.points
    groups = _buckets(len(pts), MAX_MARKS)
    ys = [_median([pts[i].value for i in g]) for g in groups]
    lo, hi, y = _scale(ys, 8, CHART_H - 22)
    x0, x1 = PAD + 30, CHART_W - 8
    step = (x1 - x0) / max(len(groups) - 1, 1)
    unit = "× ref" if s.unit == RATIO_UNIT else s.unit
    parts = [
        f'<svg class="chart" width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
        f'aria-label="{html.escape(s.label)}">',
        f'<text class="ax" x="2" y="14">{fmt_num(hi)} {html.escape(unit)}</text>',
        f'<text class="ax" x="2" y="{CHART_H - 24}">{fmt_num(lo)}</text>',
        f'<line class="base" x1="{x0}" y1="{CHART_H - 20}" x2="{x1}" y2="{CHART_H - 20}"/>',
        '<polyline points="' + " ".join(f"{x0 + i * step:.1f},{y(v):.1f}" for i, v in enumerate(ys)) + '"/>',
    ]
    where = {i: k for k, g in enumerate(groups) for i in g}
    for c in t.change_points:
        kind = "accepted" if c["accepted"] else (c["direction"] or "step")
        xc = x0 + where[c["index"]] * step
        what = f"accepted: {c['accepted']}" if c["accepted"] else f"{c['change_pct']:+.1f}% {c['direction']}"
        tip = html.escape(f"change point at {(c['commit'] or '?')[:12]}: {what}")
        parts.append(
            f'<line class="cp {kind}" x1="{xc:.1f}" y1="4" x2="{xc:.1f}" y2="{CHART_H - 20}">'
            f"<title>{tip}</title></line>"
        )
    for k, g in enumerate(groups):
        newest = pts[g[-1]]
        href = pages.get(newest.source)
        many = f"{len(g)} runs, newest " if len(g) > 1 else ""
        tip = f"{many}{(newest.commit or '?')[:12]} {(newest.run_time or '')[:16]}: {fmt_num(ys[k])} {unit}"
        dot = f'<circle cx="{x0 + k * step:.1f}" cy="{y(ys[k]):.1f}" r="2.6"><title>{html.escape(tip)}</title></circle>'
        parts.append(f'<a href="{prefix}{href}">{dot}</a>' if href else dot)
    first, last = (pts[0].run_time or "")[:10], (pts[-1].run_time or "")[:10]
    parts.append(f'<text class="ax" x="{x0}" y="{CHART_H - 6}">{first}</text>')
    parts.append(f'<text class="ax end" x="{x1}" y="{CHART_H - 6}">{last} ({len(pts)} runs)</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def trends(runs: Sequence[Run], accepted: Sequence[Any] = (), *, min_change: float = 0.05) -> list[CaseTrend]:
    """Per (fingerprint, case): the series of its gated figure (the CPU's normalised median where
    the newest run has one, else the median) with its change points and bisect suggestions."""
    from perfgate.history.changepoints import MIN_SIZE, change_points

    metric_of: dict[tuple[str, str], str] = {}
    for r in sorted(runs, key=Run.order_key):
        for b in r.benchmarks:
            metric_of[(r.fingerprint_id or "unknown", b.fullname)] = gated_metric(b)
    by_metric = {
        m: {(s.fingerprint_id, s.fullname): s for s in build_series(runs, m)} for m in (NORMALISED, "median_ms")
    }
    out = []
    for key, metric in sorted(metric_of.items()):
        s = by_metric[metric].get(key)
        if s is None:
            continue
        if metric == NORMALISED:
            s.unit = RATIO_UNIT
        cps = []
        if len(s.points) >= 2 * MIN_SIZE:
            cps = [c.as_dict() for c in change_points(s, "lower", accepted, metric=metric, min_change=min_change)]
        s.change_points = cps
        model = s.model or s.name
        t = CaseTrend(s, metric, cps, f"m/{slug(model)}.html", slug(f"{s.fingerprint_id}-{s.label}"))
        t.bisect = bisect_ranges(_One(s))
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
    rows = [{**v, "id": case_id(str(v["case"]))} for v in _meta(run).get("verdicts") or []]
    return sorted(rows, key=lambda v: (v.get("verdict") not in _FAILING, v.get("verdict") != "improvement", v["case"]))


# A link the dashboard writes: https only, no character that could end the attribute or hide a
# scheme (the data branch's `source` is data: a `javascript:` or `data:` URL there must not become
# a link).
HTTPS_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?(?:\?[^\s\"'<>`]*)?")


def https_url(value: Any) -> str | None:
    """`value` if it is a plain https URL, else None (rendered as no link)."""
    return value if isinstance(value, str) and HTTPS_URL.fullmatch(value) else None


def _commit_href(commit: str | None, commit_url: str) -> str | None:
    return https_url(commit_url.format(commit=commit)) if commit and commit_url else None


def build_site(
    runs: Sequence[Run],
    accepted: Sequence[Any] = (),
    *,
    commit_url: str = "",
    title: str = "perfgate history",
    generated_at: datetime | None = None,
    min_change: float = 0.05,
) -> dict[str, str]:
    """Every page of the site: relative path -> HTML."""
    from perfgate.output.html import environment

    runs = sorted(runs, key=Run.order_key)
    pages = {r.path: run_page(r) for r in runs}
    all_trends = trends(runs, accepted, min_change=min_change)
    env = environment()
    tpl = env.get_template("site.html.j2")
    css = env.loader.get_source(env, "site.css")[0]
    when = (generated_at or datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z")
    common = {"css": css, "title": title, "generated": when, "runs_total": len(runs)}
    newest: dict[str, Run] = {}
    for r in runs:
        newest[r.fingerprint_id or "unknown"] = r
    latest = [
        {
            "fingerprint_id": fp,
            "commit": r.commit,
            "commit_href": _commit_href(r.commit, commit_url),
            "time": (r.run_time.isoformat() if r.run_time else "")[:16],
            "tier": _meta(r).get("tier"),
            "page": pages[r.path],
            "verdicts": _verdict_rows(r),
        }
        for fp, r in sorted(newest.items())
    ]
    models: dict[str, list[CaseTrend]] = {}
    for t in all_trends:
        models.setdefault(t.model_page, []).append(t)
    out = {
        "index.html": tpl.render(
            kind="index",
            prefix="",
            latest=latest,
            rows=[_row(t) for t in all_trends],
            bisect=[b for t in all_trends for b in t.bisect],
            **common,
        )
    }
    for page, ts in models.items():
        out[page] = tpl.render(
            kind="model",
            prefix="../",
            model=ts[0].series.model or ts[0].series.name,
            cases=[{**_row(t), "chart": trend_chart(t, pages, "../")} for t in ts],
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
            verdicts=_verdict_rows(r),
            **common,
        )
    return out


def _row(t: CaseTrend) -> dict[str, Any]:
    s, last = t.series, t.series.points[-1]
    worse = [c for c in t.change_points if c["direction"] == "worse" and not c["accepted"]]
    return {
        "label": s.label,
        "model": s.model or s.name,
        "variant": s.variant or "",
        "fingerprint_id": s.fingerprint_id,
        "runs": len(s.points),
        "last": fmt_num(last.value),
        "unit": "× ref" if s.unit == RATIO_UNIT else s.unit,
        "change": last.change_pct,
        "spark": sparkline(s),
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
        "verdict": (v or {}).get("verdict"),
        "change": (v or {}).get("change_pct"),
    }
