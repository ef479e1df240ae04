"""`perfgate history --change-points`: the level shifts found in each case's history, as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.history.changepoints import MIN_SIZE
from perfgate.output.text import text_table, value_format


def change_point_lines(history: Any, *, min_change: float, unplaced: list[Any] = ()) -> list[str]:
    """Per case with a level shift: where (commit, run, file), the level before and after, the change and
    whether it was accepted; then how many cases had none and how many were too short to tell."""
    m = history.metric
    short = [s for s in history.series if len(s.points) < 2 * MIN_SIZE]
    with_steps = [s for s in history.series if s.change_points]
    lines = [
        "",
        f"change points of {m.name} (PELT on log values, BIC penalty from the series' own noise; shifts of at "
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


def case_id(name: str) -> str:
    """The pytest id `perfgate bisect --case` takes: what is inside test_step[...]."""
    return name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else name


def bisect_ranges(history: Any) -> list[dict[str, Any]]:
    """Per unaccepted shift for the worse: the last commit at the old level (good), the first at the
    new one (bad), the case and the device; only where both runs name a commit and the two differ."""
    out = []
    for s in history.series:
        for c in s.change_points or []:
            if c["accepted"] or c["direction"] != "worse" or c["index"] < 1:
                continue
            good, bad = s.points[c["index"] - 1], s.points[c["index"]]
            if not good.commit or not bad.commit or good.commit == bad.commit:
                continue
            device = "cuda" if s.fingerprint_id.startswith("cuda") else "cpu"
            branches = {p.branch for p in (good, bad) if p.branch}
            out.append(
                {
                    "case": case_id(s.name),
                    "label": s.label,
                    "fingerprint_id": s.fingerprint_id,
                    "good": good.commit,
                    "bad": bad.commit,
                    "branch": ",".join(sorted(branches)) or None,
                    "change_pct": c["change_pct"],
                    "command": f"perfgate bisect {good.commit[:12]} {bad.commit[:12]} --case {case_id(s.name)} "
                    f"--device {device}",
                }
            )
    return out


def bisect_lines(history: Any) -> list[str]:
    """The `perfgate bisect` command for each shift for the worse, with its commit range."""
    ranges = bisect_ranges(history)
    if not ranges:
        return []
    lines = ["", "to find the commit that made a shift (git bisect on A/B verdicts, on a machine like the run's):"]
    for r in ranges:
        on = f" on {r['branch']}" if r["branch"] else ""
        lines.append(
            f"  {r['label']} {r['change_pct']:+.1f}%{on}: commits {r['good'][:12]}..{r['bad'][:12]} "
            f"({r['fingerprint_id']})"
        )
        lines.append(f"    {r['command']}")
    return lines
