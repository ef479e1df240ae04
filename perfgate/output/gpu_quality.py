"""The GPU quality run's detection table (perfgate.quality.gpu_quality) as Markdown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GATE_LABELS = {
    "wall-stored": "wall time, stored record",
    "wall-ab": "wall time, same-job A/B",
    "device-time": "device time, stored",
    "kernels": "kernel counts, stored",
}


def _condition(kind: str, size_pct: float) -> str:
    return "unchanged" if kind == "unchanged" else f"{kind}-side +{size_pct:g}%"


def detection_markdown(data: Mapping[str, Any]) -> str:
    """Caught/total per gate and condition (false alarms/comparisons where unchanged), the wall time
    per comparison, and each case's set-up (bound, wall and device ms, the slowdowns' sizes)."""
    lines = [
        f"# GPU gate quality on {data['device']}: {len(data['rows'])} comparisons in {data['wall_s']:.0f} s",
        "",
        "Each cell: slowdowns caught / comparisons judged (unchanged: false alarms / comparisons); "
        "'-': the gate has nothing to judge on this device.",
        "",
    ]
    conditions = []
    for t in data["tally"]:
        c = (t["kind"], t["size_pct"])
        if c not in conditions:
            conditions.append(c)
    lines.append("| gate | " + " | ".join(_condition(*c) for c in conditions) + " |")
    lines.append("|---|" + "---|" * len(conditions))
    for gate, label in GATE_LABELS.items():
        cells = []
        for kind, k in conditions:
            row = next(t for t in data["tally"] if t["gate"] == gate and t["kind"] == kind and t["size_pct"] == k)
            cells.append(f"{row['caught']}/{row['total']}" if row["total"] else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    per = {(t["kind"], t["size_pct"]): t["wall_s_per_comparison"] for t in data["tally"]}
    lines.append("| wall s per comparison | " + " | ".join(f"{per[c]:.2f}" for c in conditions) + " |")
    lines += [
        "",
        "| case | bound | wall ms | device ms | pass noise (spread %: latency / device) | every Nth F.linear "
        "twice (1/2/5%) | busy-wait ms (1/2/5%) | set-up s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in data["setups"]:
        if s.get("error"):
            lines.append(f"| {s['case']} | could not run: {s['error'][:160]} | | | | | | |")
            continue
        noise = s["pass_noise"]
        lat = noise.get("latency", {}).get("spread_pct")
        dev = noise.get("device_time", {}).get("spread_pct")
        spread = f"{lat:.2f} / " + (f"{dev:.2f}" if dev is not None else "-") if lat is not None else "-"
        dev_ms = f"{s['device_ms']:.3f}" if s["device_ms"] is not None else "-"
        every = "/".join(str(v) for v in s["linear_every"].values())
        wait = "/".join(f"{v:.3f}" for v in s["busy_wait_ms"].values())
        lines.append(
            f"| {s['case']} | {s['bound'] or '-'} | {s['wall_ms']:.3f} | {dev_ms} | {spread} | {every} | {wait} "
            f"| {s['build_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"
