"""The instruction gate's quality experiment as Markdown tables (perfgate.counts.quality's summaries):
unchanged pairs and sized slowdowns of one run, and several runs pooled by achieved growth."""

from __future__ import annotations

import statistics
from typing import Any


def _pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x * 100:+.{digits}f}%"


def markdown(summary: dict[str, Any]) -> str:
    tols = summary["tolerances"]
    head = " | ".join(f"caught at {t * 100:g}%" for t in tols)
    out = ["**Unchanged code** (every pair of the unchanged processes, the later judged against the earlier):", ""]
    out.append(
        "| case | processes | pairs | max difference | "
        + " | ".join(f"false alarms at {t * 100:g}%" for t in tols)
        + " |"
    )
    out.append("|---|---|---|---|" + "---|" * len(tols))
    for case, u in summary["unchanged"].items():
        fa = " | ".join(f"{u['false_alarms'][t]} of {u['pairs']}" for t in tols)
        spread_pct = "-" if u["max_spread"] is None else f"{u['max_spread'] * 100:.4f}%"
        out.append(f"| {case} | {u['processes']} | {u['pairs']} | {spread_pct} | {fa} |")
    out += [
        "",
        "**Slowdowns sized by instructions** (one process each, judged against every unchanged process; "
        "sized to: the op's share / N, or the leaf's calls; expected in the window: the same from the calls "
        "actually doubled there, at the op's mean cost per call):",
        "",
    ]
    out.append(
        f"| slowdown | case | how | target | sized to | expected in the window | achieved (median, range) | {head} |"
    )
    out.append("|---|---|---|---|---|---|---|" + "---|" * len(tols))
    for r in summary["rows"]:
        spec, d = r["spec"], r["detection"]
        kind, _, target = r["label"].partition(":")
        if "skip" in spec or d is None:
            why = spec.get("skip", "not counted")
            out.append(f"| {kind} | {r['case']} | {why} | {target}% | - | - | - |" + " - |" * len(tols))
            continue
        inj = (r["entry"] or {}).get("injected")
        expected = None
        if spec.get("kind") == "local":
            how = f"`{spec['leaf']}` again x{spec['times']} after 1 step in {spec['every']}"
            if inj:
                how += f" ({inj['doubled']} of {inj['calls']} steps in the window)"
                expected = spec["predicted"] * spec["every"] * inj["doubled"] / inj["calls"]
        else:
            how = f"1 call in {spec['every']} twice"
            if inj:
                how += f" ({inj['doubled']} of {inj['calls']} in the window)"
                expected = spec["share"] * inj["doubled"] / inj["calls"]
        achieved = f"{_pct(d['growth_median'])} ({_pct(d['growth_min'])} .. {_pct(d['growth_max'])})"
        caught = " | ".join(f"{d['caught'][t]} of {d['comparisons']}" for t in tols)
        sized, exp = _pct(spec.get("predicted"), 2), _pct(expected, 2)
        out.append(f"| {kind} | {r['case']} | {how} | {target}% | {sized} | {exp} | {achieved} | {caught} |")
    walls = summary["process_wall_s"]
    if walls:
        out += [
            "",
            f"Wall time per valgrind process (all cases): median {statistics.median(walls):.0f} s, "
            f"{min(walls):.0f}-{max(walls):.0f} s over {len(walls)} processes.",
        ]
    for case, w in summary["case_wall_s"].items():
        if w:
            out.append(
                f"Per case in the process, {case}: median {statistics.median(w):.0f} s, {min(w):.0f}-{max(w):.0f} s."
            )
    return "\n".join(out)


def markdown_pooled(p: dict[str, Any]) -> str:
    tols = p["tolerances"]
    head = " | ".join(f"caught at {t * 100:g}% (95% lower bound of the rate)" for t in tols)
    out = [f"| achieved growth | slowdowns | {head} |", "|---|---|" + "---|" * len(tols)]
    for b in p["bins"]:
        lo, hi = b["from"], b["below"]
        span = (
            f"{lo * 100:g}% and more"
            if hi is None
            else f"below {hi * 100:g}%"
            if lo is None
            else f"{lo * 100:g}-{hi * 100:g}%"
        )
        cells = " | ".join(
            "-" if b["lower_bound"][t] is None else f"{b['caught'][t]} ({b['lower_bound'][t] * 100:.1f}%)" for t in tols
        )
        out.append(f"| {span} | {b['slowdowns']} | {cells} |")
    fa = " | ".join(f"{p['false_alarms'][t]} false alarms" for t in tols)
    out.append(f"| unchanged pairs | {p['unchanged_pairs']} | {fa} |")
    out += ["", f"({p['repeats']} repeated slowdowns counted once.)"]
    return "\n".join(out)
