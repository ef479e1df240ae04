"""Self-contained HTML report and Markdown summary of benchmark runs, pure and pytest-free.

The HTML file carries everything inline (CSS and hand-written SVG, no script, no web font, no
CDN), so it opens offline, from a CI artifact or a mail attachment, years later. Each plot is a
small pure function from numbers to an SVG string with axes, units and, where several series
share a plot, a legend. The Markdown summary is what a pull-request comment or a job summary
shows: regressions first, a few lines, links to the artifacts.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from perfgate import gate
from perfgate.fingerprint import KEY_FIELDS
from perfgate.history import Run, Series, build_series, case_label, gather, metric_value, unit_of

# Okabe-Ito: distinguishable with the common colour-vision deficiencies (yellow dropped: no contrast on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999")
GOOD, BAD, NEUTRAL = "#0072B2", "#D55E00", "#999999"
VERDICT_CLASS = {
    gate.REGRESSION: "bad", gate.BUDGET: "bad", gate.UNRELIABLE: "warn", gate.INCONCLUSIVE: "warn",
    gate.IMPROVEMENT: "good", gate.NO_BASELINE: "muted", gate.UNCHANGED: "muted",
}
FONT_PX = 12
CHAR_PX = 6.6  # average advance of a 12 px sans-serif character, for label layout without a text engine

# ----------------------------------------------------------------------------- inputs


class ReportError(Exception):
    """Input that cannot be reported; the message is one line naming the file and the fix."""


@dataclass(frozen=True)
class VerdictSet:
    verdicts: list[gate.Verdict]
    skipped: dict[str, str]
    fingerprint_id: str | None = None
    source: str | None = None


def verdicts_from_json(data: Any, source: str = "verdicts") -> VerdictSet:
    """The session's verdicts file ({"fingerprint_id", "failed", "verdicts": [...], "skipped": {...}})."""
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
        raise ReportError(f"{source}: not a perfgate verdicts file (no 'verdicts' list); pass the file pytest wrote "
                          "with --perfgate-verdicts (default .perfgate/verdicts.json)")
    fields = set(gate.Verdict.__dataclass_fields__)
    out = []
    for i, v in enumerate(data["verdicts"]):
        if not isinstance(v, dict) or not {"case", "metric", "verdict"} <= v.keys():
            raise ReportError(f"{source}: verdict #{i} lacks case, metric or verdict; regenerate it with pytest --perfgate-verdicts")
        out.append(gate.Verdict(**{k: v[k] for k in fields if k in v}))
    skipped = data.get("skipped") if isinstance(data.get("skipped"), dict) else {}
    return VerdictSet(gate.sort_verdicts(out), skipped, data.get("fingerprint_id"), source)


def load_verdicts(path: str | os.PathLike[str]) -> VerdictSet:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror}); pass the file pytest wrote with --perfgate-verdicts") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: corrupt JSON at line {exc.lineno} column {exc.colno}; rerun pytest to rewrite it") from None
    return verdicts_from_json(data, str(path))


@dataclass(frozen=True)
class Entry:
    """One benchmark of one run."""

    run: Run
    bench: dict[str, Any]
    label: str  # the row name: variant, plus the run when several runs are reported

    @property
    def info(self) -> dict[str, Any]:
        return self.bench.get("extra_info") or {}

    @property
    def fullname(self) -> str:
        return str(self.bench.get("fullname") or self.bench.get("name"))

    def value(self, metric: str) -> float | None:
        return metric_value(self.bench, metric)

    def samples_ms(self) -> list[float]:
        s = self.info.get("samples_ms")
        if isinstance(s, list) and s:
            return [float(x) for x in s if isinstance(x, (int, float))]
        data = (self.bench.get("stats") or {}).get("data")
        return [float(x) * 1e3 for x in data if isinstance(x, (int, float))] if isinstance(data, list) else []


def group_title(info: Mapping[str, Any]) -> str:
    opts = "".join(f" {k}={v}" for k, v in sorted((info.get("options") or {}).items()))
    return f"{info['model']} [{info.get('size', '?')}{opts}] on {info.get('device', '?')}"


def group_entries(runs: Sequence[Run]) -> dict[str, list[Entry]]:
    """Benchmarks per model group (model, size, options, device), in the order they ran; plain
    pytest-benchmark entries without perfgate's extra_info go to one 'other benchmarks' group."""
    several = len(runs) > 1
    groups: dict[str, list[Entry]] = {}
    for run in runs:
        for b in run.benchmarks:
            info = b.get("extra_info") or {}
            title = group_title(info) if info.get("model") else "other benchmarks"
            name = info.get("variant") or str(b.get("name") or b.get("fullname"))
            groups.setdefault(title, []).append(Entry(run, b, f"{name} · {run_label(run)}" if several else name))
    return groups


def run_label(run: Run) -> str:
    commit = (run.commit or "")[:7]
    return f"{run.label}" + (f" @{commit}" if commit else "")


def history_for(runs: Sequence[Run], *, baselines_root: str | os.PathLike[str] = "baselines",
                storage_dirs: Sequence[str | os.PathLike[str]] = (".benchmarks",), metric: str = "median_ms") -> tuple[list[Series], list[str]]:
    """Series of `metric` per case over the saved runs of these runs' fingerprints plus the runs
    themselves; (series, one line per unreadable saved file)."""
    saved: list[Run] = []
    unreadable: list[str] = []
    for fp in sorted({r.fingerprint_id for r in runs if r.fingerprint_id}):
        g = gather(baselines_root=baselines_root, fingerprint_id=fp, storage_dirs=storage_dirs)
        saved += g.runs
        unreadable += g.unreadable
    return build_series([*saved, *runs], metric), unreadable


# ----------------------------------------------------------------------------- numbers and axes


def fmt_num(v: float | None, digits: int = 4) -> str:
    """A number for a table or a label: about `digits` significant digits, no exponent in the usual range."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    if a < 1e-3:
        return f"{v:.2e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    return f"{v:.{decimals}f}"


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels with the fewest decimals that still tell every tick apart exactly (2, 4, 6 and 0.25, 0.5)."""
    for d in range(7):
        if all(abs(round(t, d) - t) <= 1e-9 * max(1.0, abs(t)) for t in ticks):
            return [f"{t:,.{d}f}" for t in ticks]
    return [f"{t:.3g}" for t in ticks]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw - 1e-12)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks per decade covering [lo, hi] (lo > 0)."""
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**k for m in (1, 2, 5)]
    below = [t for t in out if t <= lo]
    above = [t for t in out if t >= hi]
    lo_t, hi_t = (below[-1] if below else out[0]), (above[0] if above else out[-1])
    return [t for t in out if lo_t <= t <= hi_t]


@dataclass(frozen=True)
class Scale:
    """Maps data values onto pixels [a, b]; logarithmic when the data spans more than a decade or two."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            lo, hi, v = math.log10(self.lo), math.log10(self.hi), math.log10(max(v, self.lo))
        else:
            lo, hi = self.lo, self.hi
        return self.a + (v - lo) / ((hi - lo) or 1.0) * (self.b - self.a)


def make_scale(values: Iterable[float], a: float, b: float, *, zero: bool = False, log_ratio: float = 0.0) -> tuple[Scale, list[float]]:
    """A scale and its ticks for `values`; `zero` anchors linear axes at 0 (bars); `log_ratio`
    switches to a log axis when max/min exceeds it (latencies of variants 50x apart)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    if log_ratio and lo > 0 and hi / lo > log_ratio:
        ticks = log_ticks(lo, hi)
        return Scale(ticks[0], ticks[-1], a, b, log=True), ticks
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        hi = hi if hi > lo else lo + 1.0  # all zero: an axis 0..1, not one around zero
    ticks = nice_ticks(lo, hi)
    return Scale(ticks[0], ticks[-1], a, b), ticks


# ----------------------------------------------------------------------------- SVG


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _clip(text: str, max_px: float) -> str:
    n = max(3, int(max_px / CHAR_PX))
    return text if len(text) <= n else text[: n - 1] + "…"


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
            f'role="img" xmlns="http://www.w3.org/2000/svg" font-size="{FONT_PX}"><title>{_e(title)}</title>'
            f'<text x="0" y="14" font-weight="600" font-size="13">{_e(title)}</text>' + "".join(body) + "</svg>")


def _x_axis(scale: Scale, ticks: Sequence[float], y0: float, y1: float, label: str) -> list[str]:
    """Vertical grid lines, tick labels under the plot and the axis title with its unit."""
    out = [f'<line x1="{scale.a:.1f}" y1="{y1:.1f}" x2="{scale.b:.1f}" y2="{y1:.1f}" stroke="#444"/>']
    for t, text in zip(ticks, tick_labels(ticks)):
        x = scale(t)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{x:.1f}" y="{y1 + 14:.1f}" text-anchor="middle" fill="#333">{text}</text>')
    out.append(f'<text x="{(scale.a + scale.b) / 2:.1f}" y="{y1 + 30:.1f}" text-anchor="middle" fill="#333">{_e(label)}</text>')
    return out


def _y_axis(scale: Scale, ticks: Sequence[float], x0: float, x1: float, label: str) -> list[str]:
    out = [f'<line x1="{x0:.1f}" y1="{scale.a:.1f}" x2="{x0:.1f}" y2="{scale.b:.1f}" stroke="#444"/>']
    for t, text in zip(ticks, tick_labels(ticks)):
        y = scale(t)
        out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{x0 - 5:.1f}" y="{y + 4:.1f}" text-anchor="end" fill="#333">{text}</text>')
    mid = (scale.a + scale.b) / 2
    out.append(f'<text transform="translate(12 {mid:.1f}) rotate(-90)" text-anchor="middle" fill="#333">{_e(label)}</text>')
    return out


def _swatch(kind: str, color: str, x: float, y: float) -> str:
    if kind == "dash":
        return f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 12:.1f}" y2="{y - 4:.1f}" stroke="{color}" stroke-dasharray="4 3" stroke-width="1.5"/>'
    if kind == "ring":
        return f'<circle cx="{x + 6:.1f}" cy="{y - 4:.1f}" r="5" fill="none" stroke="{color}" stroke-width="2"/>'
    return f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" fill="{color}"/>'


def _legend(items: Sequence[tuple[str, str] | tuple[str, str, str]], x: float, y: float, width: float) -> tuple[list[str], float]:
    """Swatches ((name, colour[, 'box'|'dash'|'ring'])) with names, wrapped to `width`; returns
    the SVG and the height used."""
    out, cx, cy = [], x, y
    for name, color, *kind in items:
        w = 18 + len(name) * CHAR_PX + 14
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 16
        out.append(_swatch(kind[0] if kind else "box", color, cx, cy) + f'<text x="{cx + 16:.1f}" y="{cy:.1f}" fill="#333">{_e(name)}</text>')
        cx += w
    return out, cy - y + 16


def hbar_chart(rows: Sequence[tuple[str, float]], *, title: str, axis_label: str, value_suffix: str = "",
               ref: float | None = None, ref_label: str = "", colors: Sequence[str] | None = None,
               legend: Sequence[tuple[str, str]] = (), width: int = 560) -> str:
    """Horizontal bars, one per labelled value, value printed at the bar's end, optional reference line."""
    label_px = min(230, max(60, max((len(r[0]) for r in rows), default=4) * CHAR_PX + 10))
    left, right, top, bar_h, gap = label_px, width - 60, 34, 16, 6
    items = list(legend) + ([(ref_label, "#222", "dash")] if ref is not None and ref_label else [])
    legend_svg, legend_h = _legend(items, 0, top, width) if items else ([], 0)
    top += legend_h + 2
    y1 = top + len(rows) * (bar_h + gap)
    scale, ticks = make_scale([v for _, v in rows] + ([ref] if ref is not None else []), left, right, zero=True)
    body = legend_svg + _x_axis(scale, ticks, top - 4, y1, axis_label)
    for i, (name, v) in enumerate(rows):
        y = top + i * (bar_h + gap)
        x0, x1 = scale(0.0), scale(v)
        color = colors[i] if colors else PALETTE[0]
        body.append(f'<text x="{left - 6}" y="{y + bar_h - 4}" text-anchor="end" fill="#222">{_e(_clip(name, left - 8))}<title>{_e(name)}</title></text>')
        body.append(f'<rect x="{min(x0, x1):.1f}" y="{y}" width="{max(abs(x1 - x0), 1):.1f}" height="{bar_h}" fill="{color}">'
                    f'<title>{_e(name)}: {fmt_num(v)}{_e(value_suffix)}</title></rect>')
        body.append(f'<text x="{max(x0, x1) + 4:.1f}" y="{y + bar_h - 4}" fill="#222">{fmt_num(v, 3)}{_e(value_suffix)}</text>')
    if ref is not None:
        x = scale(ref)
        body.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y1}" stroke="#222" stroke-dasharray="4 3" stroke-width="1.5"/>')
    return _svg(width, y1 + 40, title, body)


def box_chart(rows: Sequence[tuple[str, Sequence[float]]], *, title: str, axis_label: str, width: int = 560) -> str:
    """Latency distributions: per row every sample as a dot, the quartile box, the median and
    min-max whiskers; a log axis when the rows are more than 20x apart."""
    rows = [(n, s) for n, s in rows if len(s)]
    label_px = min(230, max(60, max((len(r[0]) for r in rows), default=4) * CHAR_PX + 10))
    left, right, top, row_h = label_px, width - 20, 48, 26
    y1 = top + len(rows) * row_h
    scale, ticks = make_scale([v for _, s in rows for v in s], left, right, log_ratio=20)
    if scale.log:
        axis_label += " (log scale)"
    body = [f'<text x="{left}" y="32" fill="#555" font-size="11">dots: samples · box: quartiles · bar: median · whiskers: min-max</text>']
    body += _x_axis(scale, ticks, top - 4, y1, axis_label)
    for i, (name, samples) in enumerate(rows):
        x = np.asarray(samples, float)
        q1, med, q3, p90 = np.percentile(x, [25, 50, 75, 90])
        yc = top + i * row_h + row_h / 2
        color = PALETTE[i % len(PALETTE)]
        body.append(f'<text x="{left - 6}" y="{yc + 4:.1f}" text-anchor="end" fill="#222">{_e(_clip(name, left - 8))}<title>{_e(name)}</title></text>')
        body.append(f'<line x1="{scale(x.min()):.1f}" y1="{yc:.1f}" x2="{scale(x.max()):.1f}" y2="{yc:.1f}" stroke="{color}"/>')
        body.append(f'<rect x="{scale(q1):.1f}" y="{yc - 8:.1f}" width="{max(scale(q3) - scale(q1), 1):.1f}" height="16" '
                    f'fill="{color}" fill-opacity="0.18" stroke="{color}"><title>{_e(name)}: n={len(x)}, median {fmt_num(med)} ms, '
                    f'IQR {fmt_num(q1)}-{fmt_num(q3)} ms, p90 {fmt_num(p90)} ms, max {fmt_num(x.max())} ms</title></rect>')
        step = max(1, len(x) // 400)  # a few hundred dots per row are enough to show the shape
        for j, v in enumerate(x[::step]):
            jitter = ((j * 7919) % 13 - 6) * 0.9  # deterministic spread so equal samples stay visible
            body.append(f'<circle cx="{scale(v):.1f}" cy="{yc + jitter:.1f}" r="1.8" fill="{color}" fill-opacity="0.55"/>')
        body.append(f'<line x1="{scale(med):.1f}" y1="{yc - 10:.1f}" x2="{scale(med):.1f}" y2="{yc + 10:.1f}" stroke="#111" stroke-width="2.5"/>')
    return _svg(width, y1 + 40, title, body)


def _spaced(labels: Mapping[float, str], scale: Scale) -> list[tuple[float, str]]:
    """The labels that fit side by side, the last one always kept (the newest run)."""
    kept: list[tuple[float, str]] = []
    items = sorted(labels.items())
    for x, text in items:
        need = (len(text) + 2) * CHAR_PX
        if kept and scale(x) - scale(kept[-1][0]) < need:
            if (x, text) != items[-1]:
                continue
            kept.pop()
        kept.append((x, text))
    return kept


def line_chart(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], *, title: str, x_label: str, y_label: str,
               x_tick_labels: Mapping[float, str] | None = None, highlight: Sequence[tuple[float, float]] = (),
               highlight_label: str = "", width: int = 560, height: int = 240, zero: bool = False) -> str:
    """Lines of (name, xs, ys) on shared axes, a legend when there are several; `x_tick_labels`
    replaces numeric x ticks (commits on a history axis); `highlight` rings points (this run)."""
    legend_items: list[tuple[str, str, str]] = []
    if len(series) > 1:
        legend_items = [(n, PALETTE[i % len(PALETTE)], "box") for i, (n, _, _) in enumerate(series)]
    if highlight_label and highlight:
        legend_items.append((highlight_label, BAD, "ring"))
    left, right, top = 64, width - 16, 26
    legend_svg, legend_h = ([], 0.0)
    if legend_items:
        legend_svg, legend_h = _legend(legend_items, left, top + 6, right - left)
    top += legend_h + 4
    bottom = height - 44
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys if y is not None and math.isfinite(y)]
    ys_scale, y_ticks = make_scale(ys_all, bottom, top, zero=zero)
    if x_tick_labels:
        lo, hi = min(x_tick_labels), max(x_tick_labels)
        pad = 0.5 if hi == lo else 0.0
        x_scale, x_ticks = Scale(lo - pad, hi + pad, left, right), []
    else:
        x_scale, x_ticks = make_scale(xs_all, left, right)
    body = legend_svg + _y_axis(ys_scale, y_ticks, left, right, y_label)
    if x_tick_labels:
        body.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>')
        for x, text in _spaced(x_tick_labels, x_scale):
            px = x_scale(x)
            body.append(f'<line x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 4}" stroke="#444"/>'
                        f'<text x="{px:.1f}" y="{bottom + 15}" text-anchor="middle" fill="#333" font-size="11">{_e(text)}</text>')
        body.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 32}" text-anchor="middle" fill="#333">{_e(x_label)}</text>')
    else:
        body += _x_axis(x_scale, x_ticks, top, bottom, x_label)
    for i, (name, xs, ys) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = [(x_scale(x), ys_scale(y)) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
        if len(pts) > 1:
            d = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            body.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="1.8"><title>{_e(name)}</title></polyline>')
        if len(pts) <= 60:
            body += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.6" fill="{color}"/>' for px, py in pts]
    for x, y in highlight:
        body.append(f'<circle cx="{x_scale(x):.1f}" cy="{ys_scale(y):.1f}" r="5" fill="none" stroke="{BAD}" stroke-width="2"/>')
    return _svg(width, height, title, body)


# ----------------------------------------------------------------------------- sections

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1b1b1b; margin: 0; background: #fff; }
main { max-width: 1320px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 2px solid #e5e5e5; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #555; margin: 0 0 8px; } .muted-text { color: #666; }
nav a { margin-right: 12px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e6e6e6; text-align: right; white-space: nowrap; }
th { background: #f4f5f7; font-weight: 600; } td.l, th.l { text-align: left; } td.wrap { white-space: normal; max-width: 520px; }
tr:nth-child(even) td { background: #fafafa; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 9px; font-size: 12px; font-weight: 600; }
.bad { background: #fde2d7; color: #8a2a00; } .good { background: #dcecf7; color: #00456d; }
.warn { background: #fff0c9; color: #6b4e00; } .muted { background: #eeeeee; color: #444; }
.banner { padding: 8px 12px; border-radius: 6px; margin: 8px 0; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 18px 28px; align-items: flex-start; margin: 8px 0; }
.trends { display: flex; flex-wrap: wrap; gap: 10px 18px; }
svg.chart { background: #fff; overflow: visible; }
code { background: #f4f5f7; padding: 0 4px; border-radius: 3px; }
"""


def _badge(verdict: str) -> str:
    return f'<span class="badge {VERDICT_CLASS.get(verdict, "muted")}">{_e(verdict)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1, raw: bool = False, text_cols: Sequence[int] = ()) -> str:
    """An HTML table; the first `left` columns and `text_cols` are left-aligned text (the latter
    wrapped); cells are escaped unless `raw` (then the caller escaped them)."""
    def cls(i: int) -> str:
        return "l wrap" if i in text_cols else "l" if i < left else ""

    th = "".join(f'<th class="{cls(i)}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r in rows:
        cells = "".join(f'<td class="{cls(i)}">{c if raw else _e(c)}</td>' for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def verdict_counts(verdicts: Sequence[gate.Verdict]) -> dict[str, int]:
    c = Counter(v.verdict for v in verdicts)
    order = [v for v in gate.VERDICT_ORDER if v in c] + sorted(k for k in c if k not in gate.VERDICT_ORDER)
    return {k: c[k] for k in order}


def _labels_by_fullname(runs: Sequence[Run]) -> dict[str, str]:
    return {str(b.get("fullname") or b.get("name")): case_label(b) for r in runs for b in r.benchmarks}


def _case_name(case: str, labels: Mapping[str, str]) -> str:
    return labels.get(case) or case.split("::")[-1]


def verdict_section(vs: VerdictSet | None, runs: Sequence[Run]) -> str:
    if vs is None:
        return ('<section id="verdicts"><h2>Gate verdicts</h2><p class="muted-text">No verdicts file given: pass '
                "<code>--verdicts .perfgate/verdicts.json</code> (written by every pytest run of the suite).</p></section>")
    labels = _labels_by_fullname(runs)
    failing = [v for v in vs.verdicts if v.verdict in gate.FAILING]
    counts = " ".join(f"{_badge(k)}&nbsp;{n}" for k, n in verdict_counts(vs.verdicts).items())
    banner = (f'<div class="banner bad">{len(failing)} failing verdict(s): the gate fails</div>' if failing
              else '<div class="banner good">No regression</div>')
    rows = [[_e(_case_name(v.case, labels)), _e(v.metric), fmt_num(v.baseline), fmt_num(v.current),
             "-" if v.change_pct is None else f"{v.change_pct:+.1f}%", "-" if v.p_value is None else f"{v.p_value:.2g}",
             _badge(v.verdict), _e(v.message)] for v in vs.verdicts]
    out = [f'<section id="verdicts"><h2>Gate verdicts</h2>{banner}<p>{counts}</p>',
           _table(("case", "metric", "baseline", "current", "change", "p-value", "verdict", "message"), rows, left=2, raw=True, text_cols=(6, 7))]
    if vs.skipped:
        reasons = Counter(vs.skipped.values())
        out.append("<details><summary>" + f"{len(vs.skipped)} skipped case(s)</summary>" +
                   _table(("reason", "cases"), [[r, str(n)] for r, n in reasons.most_common()]) + "</details>")
    return "".join(out) + "</section>"


def _accuracy_text(info: Mapping[str, Any]) -> str:
    acc = info.get("accuracy") or {}
    parts = []
    if isinstance(acc.get("rel_l2"), (int, float)):
        parts.append(f"relL2 {acc['rel_l2']:.1e}")
    if isinstance(acc.get("cosine"), (int, float)):
        parts.append(f"cos {acc['cosine']:.5f}")
    if isinstance(acc.get("psnr_db"), (int, float)):
        parts.append("PSNR inf" if acc["psnr_db"] == float("inf") else f"PSNR {acc['psnr_db']:.1f} dB")
    return " · ".join(parts) or "-"


def _throughput_text(e: Entry) -> str:
    info = e.info
    fps = e.value("fps")
    if fps is not None:
        return f"{fmt_num(fps)} FPS"
    unit = info.get("unit")
    thr = (info.get("throughput") or {}).get(unit) if unit else None
    if isinstance(thr, (int, float)):
        return f"{fmt_num(thr)} {unit}/s"
    mean = e.value("mean_ms")
    return f"{fmt_num(1e3 / mean)} steps/s" if mean else "-"


def _notes(info: Mapping[str, Any]) -> str:
    notes = []
    if info.get("unreliable"):
        notes.append(f'<span class="badge warn" title="{_e(info["unreliable"])}">unreliable</span>')
    if info.get("remeasured"):
        notes.append(f"remeasured {int(info['remeasured'])}x")
    if info.get("graph_breaks"):
        notes.append(f"{info['graph_breaks']} graph break(s)")
    for key, name in (("warm_compile_s", "compile"), ("engine_build_s", "engine build")):
        if isinstance(info.get(key), (int, float)):
            notes.append(f"{name} {info[key]:.1f} s")
    if isinstance(info.get("quantized_linears"), int):
        notes.append(f"{info['quantized_linears']}/{info.get('linears', '?')} linears quantised")
    return ", ".join(notes)


OPT_HEADERS = ("variant", "mean ms", "min ms", "max ms", "std ms", "median ms", "p90 ms", "peak MiB", "FPS / throughput",
               "speedup", "accuracy", "notes")


def optimisation_table(entries: Sequence[Entry]) -> str:
    """The seeds' optimisation history as a table: one row per variant."""
    rows = []
    for e in entries:
        sp = e.value("speedup")
        rows.append([_e(e.label), *(fmt_num(e.value(m)) for m in ("mean_ms", "min_ms", "max_ms", "std_ms", "median_ms", "p90_ms")),
                     fmt_num(e.value("peak_mem_mib")), _e(_throughput_text(e)), f"{sp:.2f}×" if sp else "-",
                     _e(_accuracy_text(e.info)), _notes(e.info)])
    return _table(OPT_HEADERS, rows, raw=True, text_cols=(10, 11))


def model_charts(title: str, entries: Sequence[Entry]) -> list[str]:
    """Speedup bars, latency distribution and memory bars of one model group (those with data)."""
    charts = []
    speed = [(e.label, e.value("speedup")) for e in entries if e.value("speedup")]
    if len(speed) > 1:  # the eager baseline alone is 1x by definition
        charts.append(hbar_chart(speed, title="Speedup over eager baseline (same run)", axis_label="speedup (×, higher is better)",
                                 value_suffix="×", ref=1.0, ref_label="1× = eager baseline",
                                 colors=[GOOD if v >= 1 else BAD for _, v in speed],
                                 legend=(("faster than eager", GOOD), ("slower than eager", BAD))))
    dist = [(e.label, e.samples_ms()) for e in entries if e.samples_ms()]
    if dist:
        charts.append(box_chart(dist, title="Latency per step", axis_label="latency (ms, lower is better)"))
    mem = [(e.label, e.value("peak_mem_mib")) for e in entries if e.value("peak_mem_mib") is not None]
    if mem:
        methods = sorted({str(e.info.get("mem_method")) for e in entries if e.info.get("mem_method")})
        suffix = f" ({', '.join(methods)})" if methods else ""
        charts.append(hbar_chart(mem, title=f"Peak memory{suffix}", axis_label="peak memory (MiB, lower is better)", value_suffix=" MiB",
                                 colors=[PALETTE[i % len(PALETTE)] for i in range(len(mem))]))
    return charts


def run_key(run: Run) -> tuple[str | None, str | None]:
    """What identifies a run across copies of its file: when it ran and at which commit."""
    return (run.run_time.isoformat() if run.run_time else None, run.commit)


def trend_chart(series: Series, current: set[tuple[str | None, str | None]], last: int = 30) -> str:
    """One case's metric over its saved runs; this report's runs ringed."""
    pts = series.points[-last:]
    xs = list(range(len(pts)))
    ticks = {float(i): (p.commit or "?")[:7] for i, p in enumerate(pts)}
    highlight = [(float(i), p.value) for i, p in enumerate(pts) if (p.run_time, p.commit) in current]
    last_change = pts[-1].change_pct
    change = f" ({last_change:+.1f}% vs previous)" if last_change is not None else ""
    first = (pts[0].run_time or "")[:10]
    final = (pts[-1].run_time or "")[:10]
    span = f"{first} … {final[5:]}" if first and final and first[:4] == final[:4] and first != final else \
        f"{first} … {final}" if first != final else first
    return line_chart([(series.label, [float(x) for x in xs], [p.value for p in pts])],
                      title=f"{series.variant or series.label}: {fmt_num(pts[-1].value)} {series.unit}{change}",
                      x_label=f"saved runs by commit, {span}" if span else "saved runs by commit", y_label=f"median ({series.unit})",
                      x_tick_labels=ticks, highlight=highlight, highlight_label="this report's run", width=420, height=220)


def history_section(entries: Sequence[Entry], history: Mapping[tuple[str, str], Series] | None, current: set[tuple[str | None, str | None]]) -> str:
    if history is None:
        return ""
    charts, single = [], []
    seen = set()
    for e in entries:
        key = (e.run.fingerprint_id or "unknown", e.fullname)
        if key in seen:
            continue
        seen.add(key)
        s = history.get(key)
        if s is not None and len(s.points) >= 2:
            charts.append(trend_chart(s, current))
        else:
            single.append(e.info.get("variant") or e.label)
    out = ["<h3>History of the median per case</h3>"]
    if charts:
        out.append(f'<div class="trends">{"".join(charts)}</div>')
    if single:
        out.append(f'<p class="muted-text">No earlier run saved for: {_e(", ".join(single))} (record baselines with '
                   "<code>pytest benchmarks --perfgate-record</code> to build a history).</p>")
    return "".join(out)


def telemetry_series(telemetry: Mapping[str, Any]) -> dict[str, list[tuple[str, list[float], list[float]]]]:
    """Numeric series of the sampler's samples grouped by unit (from the key's suffix), each group
    one plot: utilisations share a % axis, memories a MiB axis. Non-numeric keys are ignored."""
    samples = [s for s in (telemetry.get("samples") or []) if isinstance(s, Mapping)]
    if not samples:
        return {}
    has_t = all(isinstance(s.get("t_s"), (int, float)) for s in samples)
    xs = [float(s["t_s"]) if has_t else float(i) for i, s in enumerate(samples)]
    keys = []
    for s in samples:
        keys += [k for k, v in s.items() if k != "t_s" and isinstance(v, (int, float)) and not isinstance(v, bool) and k not in keys]
    groups: dict[str, list[tuple[str, list[float], list[float]]]] = {}
    for k in keys:
        unit = unit_of(k) or "value"
        pairs = [(x, float(s[k])) for x, s in zip(xs, samples) if isinstance(s.get(k), (int, float)) and not isinstance(s.get(k), bool)]
        groups.setdefault(unit, []).append((k, [p[0] for p in pairs], [p[1] for p in pairs]))
    return groups


def telemetry_section(groups: Mapping[str, list[Entry]]) -> str:
    blocks = []
    for title, entries in groups.items():
        for e in entries:
            tel = e.info.get("telemetry")
            if not isinstance(tel, Mapping):
                continue
            by_unit = telemetry_series(tel)
            has_t = all(isinstance(s.get("t_s"), (int, float)) for s in tel.get("samples") or [] if isinstance(s, Mapping))
            charts = [line_chart(series, title=f"{e.label}: {', '.join(n for n, _, _ in series)}" if len(series) == 1 else f"{e.label} ({unit})",
                                 x_label="time since the first timed round (s)" if has_t else "sample",
                                 y_label=unit, zero=unit == "%", width=560, height=240)
                      for unit, series in by_unit.items()]
            summary = tel.get("summary")
            summary_html = ""
            if isinstance(summary, Mapping) and summary:
                cells = [[_e(k), _e(fmt_num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)] for k, v in summary.items()]
                summary_html = _table(("summary", "value"), cells, raw=True)
            if charts or summary_html:
                blocks.append(f"<h3>{_e(title)} · {_e(e.label)}</h3>" + f'<div class="charts">{"".join(charts)}{summary_html}</div>')
    if not blocks:
        return ('<section id="telemetry"><h2>Telemetry</h2><p class="muted-text">No telemetry in these runs '
                "(extra_info.telemetry is written when the sampler ran).</p></section>")
    return '<section id="telemetry"><h2>Telemetry</h2>' + "".join(blocks) + "</section>"


def fingerprint_section(runs: Sequence[Run]) -> str:
    out = ['<section id="fingerprint"><h2>Fingerprint</h2><p class="sub">Runs are comparable only when the <b>key fields</b> match.</p>']
    seen = {}
    for r in runs:
        fp = r.fingerprint
        if fp is not None:
            seen.setdefault(r.fingerprint_id or "unknown", fp)
    if not seen:
        return out[0] + '<p class="muted-text">No perfgate fingerprint in these runs (plain pytest-benchmark files).</p></section>'
    ids = list(seen)
    fields = list(KEY_FIELDS) + sorted({k for fp in seen.values() for k in fp} - set(KEY_FIELDS))
    rows = []
    for k in fields:
        vals = [seen[i].get(k) for i in ids]
        shown = [", ".join(map(str, v)) if isinstance(v, list) else ("-" if v is None else str(v)) for v in vals]
        rows.append([f"<b>{_e(k)}</b>" if k in KEY_FIELDS else _e(k), *(_e(s) for s in shown)])
    out.append(_table(("field", *ids), rows, left=1 + len(ids), raw=True))
    return "".join(out) + "</section>"


def sources_section(runs: Sequence[Run], unreadable: Sequence[str]) -> str:
    rows = [[_e(r.path), _e((r.commit or "-")[:12] + (" (dirty)" if r.dirty else "")), _e(r.branch or "-"),
             _e((r.run_time.isoformat(timespec="seconds") if r.run_time else "-")), str(len(r.benchmarks))] for r in runs]
    out = ['<section id="sources"><h2>Runs in this report</h2>', _table(("file", "commit", "branch", "run time (UTC)", "cases"), rows, left=4, raw=True)]
    if unreadable:
        out.append("<h3>History files skipped</h3><ul>" + "".join(f"<li><code>{_e(u)}</code></li>" for u in unreadable) + "</ul>")
    return "".join(out) + "</section>"


def _slug(text: str) -> str:
    return "m-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def render_html(runs: Sequence[Run], verdicts: VerdictSet | None = None, history: Sequence[Series] | None = None, *,
                title: str = "perfgate report", unreadable: Sequence[str] = (), generated_at: datetime | None = None) -> str:
    """The whole report as one HTML string. `history`: series of median_ms per (fingerprint, case)
    from the saved runs (perfgate.history.build_series), or None to leave trends out."""
    generated = (generated_at or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    groups = group_entries(runs)
    hist = {(s.fingerprint_id, s.fullname): s for s in history} if history is not None else None
    current = {run_key(r) for r in runs}
    commits = sorted({(r.commit or "-")[:7] + ("*" if r.dirty else "") for r in runs})
    fps = sorted({r.fingerprint_id or "unknown" for r in runs})
    n_cases = sum(len(r.benchmarks) for r in runs)
    head = (f"<h1>{_e(title)}</h1><p class=\"sub\">{len(runs)} run(s), {n_cases} case(s) · commit {_e(', '.join(commits))} · "
            f"fingerprint {_e(', '.join(fps))} · generated {generated}</p>")
    nav = ["<nav><a href=\"#verdicts\">verdicts</a>"] + [f'<a href="#{_slug(t)}">{_e(t.split(" [")[0])}</a>' for t in groups]
    nav += ['<a href="#telemetry">telemetry</a><a href="#fingerprint">fingerprint</a><a href="#sources">runs</a></nav>']
    body = [head, "".join(nav), verdict_section(verdicts, runs)]
    for t, entries in groups.items():
        body.append(f'<section id="{_slug(t)}" class="model"><h2>{_e(t)}</h2>')
        info = entries[0].info
        if info.get("params"):
            body.append(f'<p class="sub">{int(info["params"]):,} parameters · step: {_e(info.get("step", "?"))} · '
                        f'dtype {_e(info.get("dtype", "?"))} · timer {_e(info.get("timer", "?"))}</p>')
        body.append(optimisation_table(entries))
        body.append(f'<div class="charts">{"".join(model_charts(t, entries))}</div>')
        body.append(history_section(entries, hist, current))
        body.append("</section>")
    body += [telemetry_section(groups), fingerprint_section(runs), sources_section(runs, unreadable)]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")


# ----------------------------------------------------------------------------- Markdown


def _md(text: Any) -> str:
    """Table-safe Markdown text: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _as_runs(runs: Sequence[Run | Mapping[str, Any]]) -> list[Run]:
    return [r if isinstance(r, Run) else Run(str((r.get("perfgate") or {}).get("recorded_at", "run")), dict(r)) for r in runs]


def _as_verdicts(verdicts: VerdictSet | Mapping[str, Any] | Sequence[gate.Verdict | Mapping[str, Any]] | None) -> VerdictSet | None:
    if verdicts is None or isinstance(verdicts, VerdictSet):
        return verdicts
    if isinstance(verdicts, Mapping):
        return verdicts_from_json(verdicts)
    return verdicts_from_json({"verdicts": [v.as_dict() if isinstance(v, gate.Verdict) else dict(v) for v in verdicts]})


def _md_change(v: gate.Verdict) -> str:
    return "-" if v.change_pct is None else f"{v.change_pct:+.1f}%"


def markdown_summary(runs: Sequence[Run | Mapping[str, Any]], verdicts: VerdictSet | Mapping[str, Any] | Sequence[Any] | None,
                     links: Mapping[str, str] | None = None, *, max_rows: int = 15) -> str:
    """Short Markdown for a pull-request comment or job summary: the failing verdicts first, counts
    of the others (in a folded table), the fastest variant per model, then links to the artifacts.

    `runs`: loaded result files (Run or their JSON); `verdicts`: a VerdictSet, the verdicts file's
    JSON or a list of Verdicts; `links`: artifact name -> URL or path, in the order to show."""
    runs, vs = _as_runs(runs), _as_verdicts(verdicts)
    labels = _labels_by_fullname(runs)
    all_v = vs.verdicts if vs else []
    failing = [v for v in all_v if v.verdict in gate.FAILING]
    if vs is None:
        head = "### perfgate: no verdicts (measured only)"
    elif failing:
        head = f"### perfgate: :x: {len(failing)} regression(s)"
    else:
        head = "### perfgate: :white_check_mark: no regression"
    out = [head, ""]
    if failing:
        out += ["| case | metric | baseline | current | change | why |", "|---|---|--:|--:|--:|---|"]
        out += [f"| {_md(_case_name(v.case, labels))} | {_md(v.metric)} | {fmt_num(v.baseline)} | {fmt_num(v.current)} | "
                f"{_md_change(v)} | {_md(v.message or v.verdict)} |" for v in failing[:max_rows]]
        if len(failing) > max_rows:
            out.append(f"\n… and {len(failing) - max_rows} more in the report.")
        out.append("")
    commits = sorted({(r.commit or "-")[:7] + (" (dirty)" if r.dirty else "") for r in runs})
    fps = sorted({r.fingerprint_id or "unknown" for r in runs})
    n_cases = sum(len(r.benchmarks) for r in runs)
    facts = [f"{n_cases} case(s) at commit {', '.join(f'`{c}`' for c in commits) or '-'} on {', '.join(f'`{f}`' for f in fps)}"]
    facts += [f"{n} {k}" for k, n in verdict_counts(all_v).items() if k not in gate.FAILING]
    if vs and vs.skipped:
        facts.append(f"{len(vs.skipped)} skipped")
    out += [" · ".join(facts), ""]
    others = [v for v in all_v if v.verdict not in gate.FAILING and v.verdict != gate.UNCHANGED]
    if others:
        out += [f"<details><summary>Other verdicts ({len(others)})</summary>", "",
                "| case | metric | current | change | verdict |", "|---|---|--:|--:|---|"]
        out += [f"| {_md(_case_name(v.case, labels))} | {_md(v.metric)} | {fmt_num(v.current)} | {_md_change(v)} | {_md(v.verdict)} |"
                for v in others[:max_rows]]
        if len(others) > max_rows:
            out.append(f"\n… and {len(others) - max_rows} more in the report.")
        out += ["", "</details>", ""]
    fastest = fastest_per_model(runs)
    if fastest:
        out += ["| model | fastest variant | median ms | speedup |", "|---|---|--:|--:|"]
        out += [f"| {_md(m)} | {_md(var)} | {fmt_num(med)} | {'-' if sp is None else f'{sp:.2f}×'} |" for m, var, med, sp in fastest]
        out.append("")
    if links:
        out.append("Artifacts: " + " · ".join(f"[{_md(name)}]({url})" for name, url in links.items()))
    return "\n".join(out).rstrip() + "\n"


def fastest_per_model(runs: Sequence[Run]) -> list[tuple[str, str, float, float | None]]:
    """(group, variant, median ms, speedup) of the fastest variant of each model group."""
    out = []
    for title, entries in group_entries(runs).items():
        timed = [(e.value("median_ms"), e) for e in entries if e.value("median_ms") is not None]
        if not timed:
            continue
        med, best = min(timed, key=lambda t: t[0])
        out.append((title, best.label, med, best.value("speedup")))
    return out
