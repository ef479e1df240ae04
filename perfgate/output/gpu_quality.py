"""The GPU quality run's detection table (perfgate.quality.gpu_quality) as Markdown."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING

from perfgate.quality.gpu_quality import FALSE_ALARMS

if TYPE_CHECKING:
    from perfgate.quality.gpu_quality import QualityRun, TallyRow
    from perfgate.record import PassNoise

GATE_LABELS = {
    "wall-stored": "wall time, stored record",
    "wall-ab": "wall time, same-job A/B (unpaired)",
    "wall-ab-paired": "wall time, same-job A/B (paired rounds)",
    "device-time": "device time, stored",
    "device-time-ab": "device time, same-job A/B (paired blocks, mean)",
    "kernels": "kernel counts, stored",
}


def _condition(kind: str, size_pct: float) -> str:
    if kind == "unchanged":
        return "unchanged"
    if kind == FALSE_ALARMS:
        return "false alarms: unchanged and kinds not meant to move the gate"
    return f"{'slower kernel' if kind == 'kernel' else f'{kind}-side'} +{size_pct:g}%"


def _realised_line(conditions: list[tuple[str, float]], cells: Mapping[tuple, TallyRow], what: str) -> str:
    """The size each condition realised (its comparisons' median and range): the device-time A/B
    window's blocks, or the wall-time A/B's paired rounds; '-' where not measured (no device time on
    a CPU)."""
    out = []
    for c in conditions:
        t = next((t for g in GATE_LABELS if (t := cells.get((g, *c))) is not None), None)
        if c[0] == FALSE_ALARMS or t is None:
            out.append("")
        elif what == "device" and t.realised_device_pct is not None:
            lo, hi = t.realised_device_range or (t.realised_device_pct, t.realised_device_pct)
            out.append(f"{t.realised_device_pct:+.2f} ({lo:+.2f}..{hi:+.2f})")
        elif what == "device":
            out.append("-")
        else:
            out.append("-" if t.realised_wall_pct is None else f"{t.realised_wall_pct:+.2f}")
    label = (
        "realised % by device time, same-job A/B (mean of the blocks' log ratios; comparisons' median (range))"
        if what == "device"
        else "realised % by wall time, same-job A/B (mean of the paired rounds' log ratios; comparisons' median)"
    )
    return f"| {label} | " + " | ".join(out) + " |"


def _cell(t: TallyRow | None) -> str:
    """caught/total; '-' where the gate judged nothing or the kind is not meant to move it (its
    regressions are false alarms, in the false-alarm column)."""
    if t is None or not t.total or (not t.expected and t.kind not in ("unchanged", FALSE_ALARMS)):
        return "-"
    return f"{t.caught}/{t.total}"


def _spread(noise: Mapping[str, PassNoise], metric: str) -> str:
    block = noise.get(metric)
    return f"{block.spread_pct:.2f}" if block is not None else "-"


def detection_markdown(run: QualityRun) -> str:
    """Caught/total per gate and condition (false alarms/comparisons where unchanged), the wall time
    per comparison, and each case's set-up (bound, wall and device ms, the slowdowns' sizes)."""
    lines = [
        f"# GPU gate quality on {run.plan.device}: {len(run.rows)} comparisons in {run.wall_s:.0f} s",
        "",
        "Each cell: slowdowns caught / comparisons judged (unchanged: false alarms / comparisons); a column's "
        "size is the slowdown's target, the 'realised' rows what the comparisons measured it at; "
        "'-': the gate has nothing to judge on this device, or the kind is not meant to move it (a busy-wait "
        "adds no GPU work: device time and kernel counts; a slower kernel keeps the launches: kernel counts), "
        "whose regressions are false alarms, counted in the false-alarm column with unchanged code's.",
        "",
    ]
    conditions: list[tuple[str, float]] = []
    for t in run.tally:
        if (t.kind, t.size_pct) not in conditions:
            conditions.append((t.kind, t.size_pct))
    conditions.sort(key=lambda c: (c[0] != "unchanged", c[0] != FALSE_ALARMS))  # stable: the rest as tallied
    cells = {(t.gate, t.kind, t.size_pct): t for t in run.tally}
    lines.append("| gate | " + " | ".join(_condition(*c) for c in conditions) + " |")
    lines.append("|---|" + "---|" * len(conditions))
    for gate, label in GATE_LABELS.items():
        row = [cells.get((gate, *c)) for c in conditions]
        lines.append(f"| {label} | " + " | ".join(_cell(t) for t in row) + " |")
    lines.append(_realised_line(conditions, cells, "device"))
    lines.append(_realised_line(conditions, cells, "wall"))
    per = [
        next((hit.wall_s_per_comparison for g in GATE_LABELS if (hit := cells.get((g, *c))) is not None), 0.0)
        for c in conditions
    ]
    lines.append(
        "| wall s per comparison | "
        + " | ".join("" if c[0] == FALSE_ALARMS else f"{w:.2f}" for c, w in zip(conditions, per, strict=True))
        + " |"
    )
    lines += [
        "",
        "| case | bound | wall ms | device ms | pass spread % (latency / device) | every Nth F.linear twice "
        "(per size) | every Nth F.linear twice as wide (per size) | busy-wait ms (per size) | realised % by device "
        "time A/B (per slowed condition, median) | set-up s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in run.setups:
        if s.error:
            lines.append(f"| {s.case} | could not run: {s.error[:160]} | | | | | | | | |")
            continue
        dev_ms = f"{s.device_ms:.3f}" if s.device_ms is not None else "-"
        every = "/".join(str(v) for v in s.linear_every.values())
        wider = s.kernel_note or "/".join(str(v) for v in s.wider_every.values())
        wait = "/".join(f"{v:.3f}" for v in s.busy_wait_ms.values())
        spread = f"{_spread(s.pass_noise, 'latency')} / {_spread(s.pass_noise, 'device_time')}"
        if s.record_remeasured:
            spread += " (last pass re-measured)"
        if s.record_unreliable:  # the stored timing gates do not judge against it
            spread += f" (record unreliable: {s.record_unreliable[:100]})"
        lines.append(
            f"| {s.case} | {s.bound or '-'} | {s.wall_ms:.3f} | {dev_ms} | {spread} | {every} | {wider} | {wait} "
            f"| {_case_realised(run, s.case)} | {s.build_s:.1f} |"
        )
    lines += _gpu_state_lines(run)
    return "\n".join(lines) + "\n"


def _case_realised(run: QualityRun, case: str) -> str:
    """Per slowed condition of one case, the median size its comparisons realised by device time A/B
    ('-' where none was measured: no device time on a CPU)."""
    by: dict[tuple[str, float], list[float]] = {}
    for r in run.rows:
        if r.case == case and r.kind != "unchanged" and r.realised_device_pct is not None:
            by.setdefault((r.kind, r.size_pct), []).append(r.realised_device_pct)
    return ", ".join(f"{_condition(*c)}: {statistics.median(v):+.2f}" for c, v in by.items()) or "-"


def _span(values: list[float], fmt: str) -> str:
    return f"{min(values):{fmt}}..{max(values):{fmt}}" if values else "-"


def _gpu_state_lines(run: QualityRun) -> list[str]:
    """Per case, what the GPU did while its comparisons were measured (Comparison.gpu_state): none
    off a GPU or without NVML."""
    cases = [s.case for s in run.setups if not s.error]
    rows = {
        c: [r.gpu_state for r in run.rows if r.case == c and r.gpu_state and r.gpu_state.busy_sm_clock_mhz]
        for c in cases
    }
    if not any(rows.values()):
        return []
    out = [
        "",
        "| case | busy SM clock MHz (comparisons' means) | power W | clock events seen (share of readings, max) "
        "| comparisons the gate's telemetry rule calls unreliable |",
        "|---|---|---|---|---|",
    ]
    for c, states in rows.items():
        events: dict[str, float] = {}
        for st in states:
            for k, v in st.clock_events.items():
                events[k] = max(events.get(k, 0.0), v)
        seen = ", ".join(f"{k} {v:.0%}" for k, v in sorted(events.items())) or "none"
        clocks = [st.busy_sm_clock_mhz for st in states if st.busy_sm_clock_mhz is not None]
        power = [st.gpu_power_w for st in states if st.gpu_power_w is not None]
        flagged = sum(1 for st in states if st.unreliable)
        out.append(f"| {c} | {_span(clocks, '.0f')} | {_span(power, '.0f')} | {seen} | {flagged}/{len(states)} |")
    return out
