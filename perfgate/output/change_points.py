"""`perfgate history --change-points`: the steps found in each case's history, as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.history.changepoints import MIN_SIZE
from perfgate.output.text import text_table, value_format


def change_point_lines(history: Any, *, min_change: float, unplaced: list[Any] = ()) -> list[str]:
    """Per case with a step: where (commit, run, file), the level before and after, the change and
    whether it was accepted; then how many cases had none and how many were too short to tell."""
    m = history.metric
    short = [s for s in history.series if len(s.points) < 2 * MIN_SIZE]
    with_steps = [s for s in history.series if s.change_points]
    lines = [
        "",
        f"change points of {m.name} (PELT on log values, BIC penalty from the series' own noise; steps of at "
        f"least {min_change:.0%}, each level at least {MIN_SIZE} runs):",
    ]
    rows = []
    for s in with_steps:
        spec = value_format(s.values())
        for c in s.change_points:
            rows.append(
                [
                    s.label,
                    f"#{c['index'] + 1}",
                    (c["commit"] or "-")[:8],
                    (c["run_time"] or "-")[:16].replace("T", " "),
                    f"{format(c['before'], spec)} -> {format(c['after'], spec)}",
                    f"{c['change_pct']:+.1f}%" + (f" {c['direction']}" if c["direction"] else ""),
                    f"accepted: {c['accepted']}" if c["accepted"] else Path(c["source"]).name,
                ]
            )
    if rows:
        headers = ("case", "entry", "commit", "run time (UTC)", f"level{' ' + m.unit if m.unit else ''}", "change")
        lines += ["  " + r.rstrip() for r in text_table((*headers, "accepted / first file"), rows)]
    judged = len(history.series) - len(short)
    lines.append(
        f"  {len(with_steps)} of {judged} case(s) with at least {2 * MIN_SIZE} entries changed level"
        + (f"; {len(short)} case(s) with fewer entries not analysed" if short else "")
    )
    for a in unplaced:
        lines.append(
            f"  accepted change {a.case!r} at {a.commit} ({a.reason}): no entry of that case is at that commit; "
            "check the hash in [tool.perfgate] accepted_changes"
        )
    return lines
