"""Charts drawn with matplotlib into inline SVG strings: bars, latency distributions, lines, ranges.

matplotlib is imported when the first chart is drawn (about a second), never by `perfgate
history`, `compare` or pytest. Figures are made without pyplot, so no GUI backend is ever chosen,
and saved with matplotlib's SVG backend (no Agg): text stays text (`svg.fonttype: none`),
nothing is fetched, and each chart's ids get a prefix of their own so that several charts can
share one HTML page. Log axes use matplotlib's LogLocator with a span rule (1-2-5 labels up to
1.5 decades, decades beyond) so that labels never crowd into each other.
"""

from __future__ import annotations

import hashlib
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfgate.extras import need
from perfgate.output.text import fmt_num

# Okabe-Ito: distinguishable with the common colour-vision deficiencies (yellow dropped: no contrast on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999")
GOOD, BAD, NEUTRAL = "#0072B2", "#D55E00", "#999999"
PX_PER_IN = 96  # the browser's CSS pixel; SVG sizes are written in points (72 per inch)
_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "perfgate",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "axes.axisbelow": True,
    "legend.frameon": False,
    "legend.fontsize": 8,
    "font.family": ["DejaVu Sans", "sans-serif"],
}
_METADATA = {
    "Date": None,
    "Creator": None,
    "Format": None,
    "Type": None,
}  # no RDF block, no time stamp: the same chart twice is the same text


def _figure(width_px: float, height_px: float) -> Any:
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure  # lazily: about a second to import

    fig = Figure(figsize=(width_px / PX_PER_IN, height_px / PX_PER_IN), layout="constrained")
    # Browsers set text a few px wider than matplotlib measures it: a wider margin keeps the edge
    # labels inside the SVG's box.
    fig.get_layout_engine().set(w_pad=8 / 72, h_pad=4 / 72)
    FigureCanvasSVG(fig)  # layout and text are measured by the SVG renderer the page is drawn from
    return fig


def _svg(fig: Any, title: str) -> str:
    """The figure as an inline <svg> element with a <title>, its ids unique to this chart."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=_METADATA)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    prefix = "c" + hashlib.sha1(text.encode()).hexdigest()[:8] + "-"
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = re.sub(r'(url\(#|href="#)([^")]+)', lambda m: f"{m.group(1)}{prefix}{m.group(2)}", text)
    return text.replace("<svg ", '<svg class="chart" role="img" ', 1).replace(
        ">", f"><title>{html.escape(title)}</title>", 1
    )


def _draw(width_px: float, height_px: float, title: str, paint: Any) -> str:
    matplotlib = need("matplotlib", "drawing a chart")

    with matplotlib.rc_context(_RC):
        fig = _figure(width_px, height_px)
        fig.suptitle(title, x=0.01, ha="left", fontsize=10, fontweight="bold")
        ax = fig.add_subplot()
        paint(ax)
        _thin_ticks(ax)
        return _svg(fig, title)


def _overlapping(labels: Sequence[Any], gap_px: float = 4.0, slack: float = 0.15) -> bool:
    """Whether any two labels come closer than `gap_px`, each taken `slack` wider than matplotlib
    measures it: a browser without DejaVu Sans sets the text in a wider fallback font."""
    boxes = [t.get_window_extent().expanded(1 + slack, 1.0) for t in labels if t.get_visible() and t.get_text()]
    return any(
        a.x1 + gap_px > b.x0 and b.x1 + gap_px > a.x0 and a.y1 + gap_px / 2 > b.y0 and b.y1 + gap_px / 2 > a.y0
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
    )


def _thin_ticks(ax: Any) -> None:
    """Fewer ticks on a linear axis whose labels touch. matplotlib's 'auto' tick count assumes
    labels three characters wide, so '705.25' labels overlapped on a narrow telemetry chart; the
    labels are measured with matplotlib's own font metrics (the page draws them in the same font)."""
    from matplotlib import ticker

    axes = [
        a
        for a in (ax.xaxis, ax.yaxis)
        if a.get_scale() == "linear" and not isinstance(a.get_major_locator(), ticker.FixedLocator)
    ]
    for _ in range(6):
        ax.figure.draw_without_rendering()
        crowded = [a for a in axes if len(a.get_ticklabels()) > 2 and _overlapping(a.get_ticklabels())]
        if not crowded:
            return
        for a in crowded:
            a.set_major_locator(
                ticker.MaxNLocator(nbins=max(2, len(a.get_ticklabels()) // 2), steps=[1, 2, 2.5, 5, 10])
            )


def _note(ax: Any, text: str) -> None:
    """A grey line above the plot saying how to read it."""
    ax.set_title(text, fontsize=7.5, fontweight="normal", color="#555555", loc="left")


def _legend(ax: Any, handles: Sequence[Any] | None = None) -> None:
    """The legend in one row under the plot (constrained layout keeps it clear of the axis label)."""
    handles = list(handles) if handles is not None else ax.get_legend_handles_labels()[0]
    ax.figure.legend(handles=handles, loc="outside lower left", ncols=min(4, len(handles)))


def log_axis(axis: Any, lo: float, hi: float) -> None:
    """A readable log axis over [lo, hi] (lo > 0): 1-2-5 labels within 1.5 decades, decade labels
    with unlabelled 2-9 ticks beyond; plain numbers ('0.2', '500'), never '2e-01'."""
    from matplotlib import ticker

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 1.5 else (1.0,)))
    axis.set_minor_locator(ticker.LogLocator(base=10, subs=np.arange(2, 10)) if decades > 1.5 else ticker.NullLocator())
    axis.set_major_formatter(ticker.StrMethodFormatter("{x:,.10g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _row_height(n: int, per_row_px: float = 24, extra_px: float = 90) -> float:
    return extra_px + per_row_px * max(n, 1)


def hbar_chart(
    rows: Sequence[tuple[str, float]],
    *,
    title: str,
    axis_label: str,
    value_suffix: str = "",
    ref: float | None = None,
    ref_label: str = "",
    colors: Sequence[str] | None = None,
    legend: Sequence[tuple[str, str]] = (),
    width: int = 560,
) -> str:
    """Horizontal bars, one per labelled value (first row on top), the value printed at the bar's
    end; an optional dashed reference line (1x) and legend."""
    names, values = [n for n, _ in rows], [float(v) for _, v in rows]

    def paint(ax: Any) -> None:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        y = np.arange(len(rows))
        bars = ax.barh(y, values, color=list(colors) if colors else PALETTE[0], height=0.7)
        ax.bar_label(bars, labels=[f"{fmt_num(v, 3)}{value_suffix}" for v in values], padding=3, fontsize=8)
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_xlabel(axis_label)
        ax.grid(axis="y", visible=False)
        ax.set_xlim(0, max([*values, ref or 0.0, 1e-12]) * 1.18)
        handles = [Patch(color=c, label=n) for n, c in legend]
        if ref is not None:
            ax.axvline(ref, color="#222222", linestyle=(0, (4, 3)), linewidth=1.2)
            if ref_label:
                handles.append(Line2D([], [], color="#222222", linestyle=(0, (4, 3)), label=ref_label))
        if handles:
            _legend(ax, handles)

    return _draw(width, _row_height(len(rows), extra_px=110 if legend or ref_label else 90), title, paint)


def box_chart(
    rows: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    axis_label: str,
    width: int = 560,
    log_ratio: float = 20.0,
) -> str:
    """Latency distributions: per row every sample as a dot, the quartile box, the median and
    min-max whiskers; a log axis when the rows are more than `log_ratio` apart."""
    rows = [(n, np.asarray(s, float)) for n, s in rows if len(s)]
    every = np.concatenate([s for _, s in rows]) if rows else np.array([1.0])
    lo, hi = float(every.min()), float(every.max())
    log = lo > 0 and hi / lo > log_ratio

    def paint(ax: Any) -> None:
        y = np.arange(len(rows))
        box = ax.boxplot(
            [s for _, s in rows],
            positions=y,
            orientation="horizontal",
            whis=(0, 100),
            widths=0.55,
            showfliers=False,
            patch_artist=True,
            medianprops={"color": "#111111", "linewidth": 2},
        )
        for i, (_, s) in enumerate(rows):
            color = PALETTE[i % len(PALETTE)]
            box["boxes"][i].set(facecolor=color, alpha=0.25, edgecolor=color)
            step = max(1, len(s) // 400)  # a few hundred dots per row show the shape
            pts = s[::step]
            jitter = (((np.arange(len(pts)) * 7919) % 13) - 6) * 0.022  # deterministic, so equal samples stay visible
            ax.scatter(pts, i + jitter, s=5, color=color, alpha=0.55, linewidths=0)
        ax.set_yticks(y, [n for n, _ in rows])
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        if log:
            ax.set_xscale("log")
            log_axis(ax.xaxis, lo, hi)
        ax.set_xlabel(axis_label + (" (log scale)" if log else ""))
        _note(ax, "dots: samples · box: quartiles · bar: median · whiskers: min-max")

    return _draw(width, _row_height(len(rows), 26, 100), title, paint)


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_tick_labels: Mapping[float, str] | None = None,
    highlight: Sequence[tuple[float, float]] = (),
    highlight_label: str = "",
    width: int = 560,
    height: int = 240,
    zero: bool = False,
) -> str:
    """Lines of (name, xs, ys) on shared axes, a legend when there are several; `x_tick_labels`
    replaces numeric x ticks (commits on a history axis; the newest always shown); `highlight`
    rings points (this report's run)."""

    def paint(ax: Any) -> None:
        for i, (name, xs, ys) in enumerate(series):
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                color=PALETTE[i % len(PALETTE)],
                linewidth=1.6,
                marker="o" if len(pts) <= 60 else None,
                markersize=3,
                label=name,
            )
        if highlight:
            ax.scatter(
                [x for x, _ in highlight],
                [y for _, y in highlight],
                s=60,
                facecolors="none",
                edgecolors=BAD,
                linewidths=1.8,
                zorder=3,
                label=highlight_label or None,
            )
        if x_tick_labels:
            ticks = _spaced(sorted(x_tick_labels), max(2, int(width / 70)))
            ax.set_xticks(ticks, [x_tick_labels[t] for t in ticks])
            if len(x_tick_labels) == 1:
                ax.set_xlim(ticks[0] - 0.5, ticks[0] + 0.5)
        if zero:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        if len(series) > 1 or (highlight and highlight_label):
            _legend(ax)

    return _draw(width, height, title, paint)


def _spaced(xs: Sequence[float], most: int) -> list[float]:
    """At most `most` of the sorted positions, evenly spread, the last (the newest run) always kept."""
    if len(xs) <= most:
        return list(xs)
    stride = math.ceil((len(xs) - 1) / (most - 1))
    return sorted({*xs[::-stride]})


def range_chart(
    rows: Sequence[tuple[str, float, float, float]],
    *,
    title: str,
    axis_label: str,
    colors: Sequence[str] | None = None,
    width: int = 560,
) -> str:
    """Per labelled (label, min, mean, max) row a min-max line and its mean as a dot (telemetry
    summaries); `colors` per row (default: one palette colour each)."""

    def paint(ax: Any) -> None:
        y = np.arange(len(rows))
        for i, (_, lo, mean, hi) in enumerate(rows):
            color = colors[i] if colors else PALETTE[i % len(PALETTE)]
            ax.plot([lo, hi], [i, i], color=color, linewidth=3, alpha=0.45, solid_capstyle="butt")
            ax.plot([mean], [i], marker="o", color=color, markersize=5)
        ax.set_yticks(y, [n for n, *_ in rows])
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(axis_label)
        _note(ax, "line: min-max over the timed rounds · dot: mean")

    return _draw(width, _row_height(len(rows), 20, 100), title, paint)


def _clip_marks(ax: Any, xs: Sequence[float], ys: Sequence[float], lo: float, hi: float, **style: Any) -> None:
    """Points inside [lo, hi] as crosses, those outside as triangles on the axis' edge (so one
    wild value cannot flatten the rest of the plot)."""
    for marker, keep, clip in (
        ("x", lambda y: lo <= y <= hi, lambda y: y),
        ("^", lambda y: y > hi, lambda y: hi),
        ("v", lambda y: y < lo, lambda y: lo),
    ):
        pts = [(x, clip(y)) for x, y in zip(xs, ys) if keep(y)]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, clip_on=False, zorder=3, **style)


def history_y_range(
    values: Sequence[float], unreliable: Sequence[bool], *, min_rel_span: float = 0.2, wild: float = 1.5
) -> tuple[float, float]:
    """The y axis of a history chart: the reliable values, and the unreliable ones within `wild`
    times their middle, with a margin; at least `min_rel_span` of the middle wide, never below 0."""
    basis = [v for v, bad in zip(values, unreliable) if not bad] or list(values)
    mid = (min(basis) + max(basis)) / 2
    basis += [v for v, bad in zip(values, unreliable) if bad and mid / wild <= v <= mid * wild]
    mid = (min(basis) + max(basis)) / 2
    half = max((max(basis) - min(basis)) / 2 * 1.15, abs(mid) * min_rel_span / 2, 1e-12)
    return max(0.0, mid - half), mid + half


def history_chart(
    values: Sequence[float],
    *,
    unreliable: Sequence[bool],
    current: Sequence[bool],
    x_tick_labels: Sequence[str],
    title: str,
    note: str,
    x_label: str,
    y_label: str,
    width: int = 300,
    height: int = 210,
    min_rel_span: float = 0.2,
    wild: float = 1.5,
) -> str:
    """One case's history, oldest first: reliable runs joined by a line, unreliable runs as grey
    crosses off the line, this report's runs ringed. The y axis spans the reliable runs and the
    unreliable ones within `wild` times their middle; a wilder one (a contended run once measured
    800x its usual time) sits on the edge as a triangle instead of flattening the line. The axis
    spans at least `min_rel_span` of the middle value: a 2% wobble on an axis of its own looks like
    a cliff. No legend (the page says how to read it once)."""
    n = len(values)
    ok = [i for i in range(n) if not unreliable[i]]
    lo, hi = history_y_range(values, unreliable, min_rel_span=min_rel_span, wild=wild)

    def paint(ax: Any) -> None:
        ax.plot(ok, [values[i] for i in ok], color=PALETTE[0], linewidth=1.6, marker="o", markersize=3)
        bad = [i for i in range(n) if unreliable[i]]
        _clip_marks(ax, bad, [values[i] for i in bad], lo, hi, s=28, color=NEUTRAL, linewidths=1.5)
        ring = [i for i in range(n) if current[i]]
        ring_y = [min(max(values[i], lo), hi) for i in ring]
        ax.scatter(ring, ring_y, s=70, facecolors="none", edgecolors=BAD, linewidths=1.6, zorder=4, clip_on=False)
        ax.set_ylim(lo, hi)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        _note(ax, note)
        # Commit labels, as many as fit apart (newest kept); _thin_ticks leaves fixed ticks alone.
        for most in range(max(2, int(width / 75)), 1, -1):
            ticks = _spaced([float(i) for i in range(n)], most)
            ax.set_xticks(ticks, [x_tick_labels[int(t)] for t in ticks])
            ax.figure.draw_without_rendering()
            if not _overlapping(ax.xaxis.get_ticklabels()):
                break

    return _draw(width, height, title, paint)


def change_strip_chart(
    rows: Sequence[tuple[str, float]],
    *,
    title: str,
    axis_label: str,
    colors: Mapping[str, str],
    note: str = "",
    width: int = 760,
    clip: tuple[float, float] = (-75.0, 150.0),
) -> str:
    """Every case's change in % as a dot on one row per kind (verdict), kinds in the given order:
    where the whole run moved at a glance. Changes beyond `clip` sit on the edge as triangles."""
    kinds = list(dict.fromkeys(k for k, _ in rows))
    lo = max(clip[0], min([0.0, *(c for _, c in rows)]) - 5)
    hi = min(clip[1], max([0.0, *(c for _, c in rows)]) + 5)

    def paint(ax: Any) -> None:
        for i, kind in enumerate(kinds):
            xs = [c for k, c in rows if k == kind]
            jitter = [(((j * 7919) % 11) - 5) * 0.045 for j in range(len(xs))]  # deterministic
            color = colors.get(kind, NEUTRAL)
            inside = [(x, i + d) for x, d in zip(xs, jitter) if lo <= x <= hi]
            ax.scatter([p[0] for p in inside], [p[1] for p in inside], s=22, color=color, alpha=0.8, linewidths=0)
            for marker, edge, pick in (("<", lo, lambda x: x < lo), (">", hi, lambda x: x > hi)):
                out = [i + d for x, d in zip(xs, jitter) if pick(x)]
                if out:
                    ax.scatter([edge] * len(out), out, marker=marker, s=30, color=color, clip_on=False, zorder=3)
        ax.axvline(0, color="#222222", linewidth=1)
        ax.set_xlim(lo, hi)
        ax.set_ylim(len(kinds) - 0.5, -0.5)
        ax.set_yticks(range(len(kinds)), [f"{k} ({sum(1 for kk, _ in rows if kk == k)})" for k in kinds])
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(axis_label)
        if note:
            _note(ax, note)

    return _draw(width, _row_height(len(kinds), 30, 105 if note else 90), title, paint)
