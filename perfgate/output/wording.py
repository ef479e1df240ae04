"""The words and number formats the dashboard (`perfgate report --site`) and the pull-request
Markdown share, so that a figure reads the same in both: its name with its unit, a change in
percent from the baseline, the gate's tolerance."""

from __future__ import annotations

from typing import Any

from perfgate.output.text import fmt_num

SPEEDUP = "speedup over eager"
# A figure's name as both outputs print it: what it is, with its unit.
FIGURES = {
    "instructions_per_step": "instructions per step",
    "median_ms": "median ms",
    "normalised_median": "step / reference",
    "kernels_per_step": "kernel launches per step",
    "device_ms_per_step": "GPU busy ms per step",
    "speedup": SPEEDUP,
    "peak_mem_mib": "peak memory MiB",
}
# The gate's metric (a verdict's `metric`) as the figure it compares.
GATE_METRICS = {
    "instructions": "instructions per step",
    "latency": "median ms",
    "kernels": "kernel launches per step",
    "device_time": "GPU busy ms per step",
    "memory": "peak memory MiB",
    "speedup": SPEEDUP,
    "energy": "energy J per step",
    "accuracy": "relative L2 error",
}
CHANGE = "change vs baseline"  # the column both outputs head a change with
CHANGE_TOLERANCE = "change vs baseline (tolerance)"  # ... and with the gate's tolerance beside it


def figure_name(metric: str) -> str:
    return FIGURES.get(metric) or GATE_METRICS.get(metric) or metric


# A latency row judged on the ratio: its baseline and current are the medians in ms, its change the
# step/reference ratio's (the reference cancels the machine's speed), so the row says both.
RATIO_LATENCY = f"median ms (change: {FIGURES['normalised_median']})"


def verdict_metric_name(metric: str, compared: str | None = None) -> str:
    """A verdict's metric as the figure the gate compared: on a CPU without counts latency is
    judged on the step/reference ratio, while the row's values are the medians in ms."""
    if metric == "latency" and compared and "ratio" in compared:
        return RATIO_LATENCY
    return GATE_METRICS.get(metric, metric)


def figure_value(value: float | None, metric: str) -> str:
    """A figure's value: instructions in millions ('4.952 M'), launches whole, others 4 digits."""
    if value is None:
        return "-"
    if metric in ("instructions_per_step", "instructions"):
        return f"{value / 1e6:,.4g} M" if value >= 1e6 else f"{value:,.0f}"
    if metric in ("kernels_per_step", "kernels"):
        return f"{value:,.0f}" if float(value).is_integer() else fmt_num(value)
    if metric in ("speedup",):
        return f"{value:.2f}×"
    return fmt_num(value)


def pct(change: float | None) -> str:
    """A change in percent: two decimals under 1% (the instruction gate's tolerance is 1%), one above."""
    if change is None:
        return "-"
    return f"{change:+.2f}%" if abs(change) < 1 else f"{change:+.1f}%"


def tolerance(tol: float | None) -> str:
    """The gate's relative tolerance as both outputs print it: 'tolerance ±5%'."""
    return "-" if tol is None else f"tolerance ±{tol * 100:g}%"


def change_cell(change: float | None, tol: float | None = None) -> str:
    """A change from the baseline with the gate's tolerance beside it: '+2.0% (±0.5%)'."""
    return pct(change) + (f" (±{tol * 100:g}%)" if tol is not None else "")


def speedup(value: Any) -> str:
    return f"{value:.2f}×" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"
