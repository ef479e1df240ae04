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
    from matplotlib.figure import Figure  # lazily: about a second to import

    return Figure(figsize=(width_px / PX_PER_IN, height_px / PX_PER_IN), layout="constrained")


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
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig = _figure(width_px, height_px)
        fig.suptitle(title, x=0.01, ha="left", fontsize=10, fontweight="bold")
        ax = fig.add_subplot()
        paint(ax)
        return _svg(fig, title)


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
