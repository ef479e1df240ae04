"""How well the instruction gate tells a slowdown from unchanged code, measured on real cases:

    nice -n 10 python -m perfgate.counts.quality \
        --cases physicsnemo-block-tiny-baseline,vjepa2-encoder-tiny-baseline \
        --unchanged 11 --slowdowns linear,sdpa,local --targets 1,2,5 --out counts-quality.jsonl

One valgrind process at a time, all the cases in each, in the same order:

1. a calibration process counts each case's step, the step with `F.linear` and with
   `F.scaled_dot_product_attention` done twice on every call (the op's share of the step's
   instructions) and each distinct leaf module's extra call alone (perfgate.counts.worker._calibrate);
2. from those, each slowdown is sized by instructions to grow the step by each target: every Nth op
   call done twice with N = share / target (perfgate.quality.inject.every_nth), a leaf module called
   again n times after every Nth step (inject.local_plan); the achieved growth is measured, not assumed;
3. `--unchanged` plain processes and one process per (slowdown, target), the unchanged ones spread
   between the others so that they lie minutes apart.

Judged by the gate's own instruction judge (perfgate.gate.instructions.judge_instructions) at each
`--tolerances` (the same counts judged twice: counts are no sample, nothing is re-drawn): every pair
of unchanged processes (11 processes: 55 pairs) is the false-alarm test, and the largest relative
difference between unchanged processes per case the determinism figure; each slowdown process is
judged against every unchanged process. Each process's counts go to `--out` as one JSON line as soon
as it ends (a rerun with the same `--out` skips the processes already there), and the Markdown
table is printed at the end (`--table-only` prints it from the file; `--pooled A B C` one table of
several runs by the growth each slowdown achieved).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import statistics
import sys
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from perfgate.gate.instructions import judge_instructions, spread
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import REGRESSION, UNCHANGED
from perfgate.record import CaseRecord

SLOWDOWNS = ("linear", "sdpa", "local")
CALIBRATE = "calibrate"


# --- sizing ---------------------------------------------------------------------------------------


def plan(calibration: dict[str, dict[str, Any]], slowdowns: Sequence[str], targets_pct: Sequence[float], steps: int):
    """{label ("linear:1"): {case: spec}} from the calibration process's cases (each with `total`,
    `windows`, `calls_per_window`). A case whose step never calls the op gets no spec (its reason in
    `spec["skip"]`)."""
    from perfgate.quality.inject import every_nth, local_plan

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in slowdowns:
        for t in targets_pct:
            label = f"{kind}:{t:g}"
            out[label] = {}
            for case, cal in calibration.items():
                total, windows = cal["total"], cal.get("windows") or {}
                if kind == "local":
                    shares = {n.removeprefix("leaf:"): w / total for n, w in windows.items() if n.startswith("leaf:")}
                    spec = local_plan(shares, t / 100, steps) if shares else {"skip": "no leaf module with parameters"}
                elif not (cal.get("calls_per_window") or {}).get(kind):
                    spec = {"skip": f"the step never calls {kind}"}
                else:
                    share = windows[kind] / total - 1
                    every = every_nth(share, t / 100)
                    spec = {"kind": "op", "op": kind, "every": every, "share": share, "predicted": share / every}
                out[label][case] = spec
    return out


# --- judging --------------------------------------------------------------------------------------


def _record(entry: dict[str, Any]) -> CaseRecord:
    return CaseRecord(instructions_per_step=entry["per_step"], instructions={"key": entry.get("key")})


def judge(base: dict[str, Any], cur: dict[str, Any], tolerance: float) -> str:
    """The instruction gate's verdict on one case's counts of two processes."""
    return judge_instructions(
        "case", _record(cur), _record(base), GateSettings(instructions_tolerance=tolerance)
    ).verdict


def unchanged_pairs(unchanged: Sequence[dict[str, Any]], case: str, tolerances: Sequence[float]) -> dict[str, Any]:
    """Every pair (i < j) of unchanged processes judged (j against i as its baseline): the false
    alarms per tolerance, and the determinism figure (the largest relative difference)."""
    have = [p["cases"][case] for p in unchanged if case in p.get("cases", {})]
    pairs = list(combinations(range(len(have)), 2))
    alarms = {t: sum(judge(have[i], have[j], t) != UNCHANGED for i, j in pairs) for t in tolerances}
    worst = max((spread(have[i]["per_step"], have[j]["per_step"]) for i, j in pairs), default=None)
    return {"processes": len(have), "pairs": len(pairs), "false_alarms": alarms, "max_spread": worst}


def detection(
    unchanged: Sequence[dict[str, Any]], slowed: dict[str, Any], case: str, tolerances: Sequence[float]
) -> dict[str, Any] | None:
    """One slowdown process's case judged against every unchanged process: the achieved growth
    (median and range over the baselines) and how many comparisons each tolerance caught."""
    cur = slowed.get("cases", {}).get(case)
    bases = [p["cases"][case] for p in unchanged if case in p.get("cases", {})]
    if cur is None or not bases:
        return None
    growth = [cur["per_step"] / b["per_step"] - 1 for b in bases]
    return {
        "comparisons": len(bases),
        "growth_median": statistics.median(growth),
        "growth_min": min(growth),
        "growth_max": max(growth),
        "caught": {t: sum(judge(b, cur, t) == REGRESSION for b in bases) for t in tolerances},
    }


def summarise(lines: Sequence[dict[str, Any]], tolerances: Sequence[float]) -> dict[str, Any]:
    unchanged = [ln for ln in lines if ln.get("condition") == "unchanged"]
    slowed = [ln for ln in lines if ln.get("condition") not in ("unchanged", CALIBRATE)]
    cases = list(dict.fromkeys(c for ln in lines if ln.get("condition") != CALIBRATE for c in ln.get("cases", {})))
    rows = []
    for ln in slowed:
        for case in cases:
            spec = (ln.get("specs") or {}).get(case, {})
            d = detection(unchanged, ln, case, tolerances)
            rows.append(
                {"label": ln["process"], "case": case, "spec": spec, "detection": d, "entry": ln["cases"].get(case)}
            )
    walls = [ln["wall_s"] for ln in lines if ln.get("condition") != CALIBRATE and "wall_s" in ln]
    case_walls = {
        c: [ln["cases"][c]["wall_s"] for ln in lines if ln.get("condition") != CALIBRATE and c in ln.get("cases", {})]
        for c in cases
    }
    return {
        "tolerances": list(tolerances),
        "unchanged": {c: unchanged_pairs(unchanged, c, tolerances) for c in cases},
        "rows": rows,
        "process_wall_s": walls,
        "case_wall_s": case_walls,
    }


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


# Achieved growth (fractions, lower edge inclusive) the pooled table bins the slowdowns by.
GROWTH_BINS = ((0.01, None), (0.0075, 0.01), (0.005, 0.0075), (None, 0.005))


def _detection_lower_bound(caught: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson lower bound of a detection rate (scipy's exact binomial CI)."""
    from scipy import stats as sps

    return float(sps.binomtest(caught, n, alternative="greater").proportion_ci(0.95, method="exact").low)


def pooled(runs: Sequence[Sequence[dict[str, Any]]], tolerances: Sequence[float]) -> dict[str, Any]:
    """Several runs' slowdowns together, binned by the growth each achieved (its median over the
    unchanged processes of its run): per bin, the slowdowns whose every comparison was caught at each
    tolerance and the detection rate's lower bound. A slowdown met twice (an op whose share caps
    several targets at "every call doubled") counts once, caught only if caught each time; unchanged
    pairs are summed per run."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}  # one row per distinct slowdown
    repeats = 0
    pairs, alarms = 0, dict.fromkeys(tolerances, 0)
    for lines in runs:
        s = summarise(lines, tolerances)
        for u in s["unchanged"].values():
            pairs += u["pairs"]
            for t in tolerances:
                alarms[t] += u["false_alarms"][t]
        for r in s["rows"]:
            d, spec = r["detection"], r["spec"]
            if d is None:
                continue
            key = (r["case"], r["label"].partition(":")[0], *(spec.get(k) for k in ("every", "leaf", "times")))
            caught = {t: d["caught"][t] == d["comparisons"] for t in tolerances}
            if key in seen:  # one sample: caught only if every time it ran was caught
                repeats += 1
                seen[key]["all_caught"] = {t: seen[key]["all_caught"][t] and caught[t] for t in tolerances}
                continue
            seen[key] = {"growth": d["growth_median"], "all_caught": caught}
    rows = list(seen.values())
    bins = []
    for lo, hi in GROWTH_BINS:
        inside = [r for r in rows if (lo is None or r["growth"] >= lo) and (hi is None or r["growth"] < hi)]
        caught = {t: sum(r["all_caught"][t] for r in inside) for t in tolerances}
        bound = {t: _detection_lower_bound(caught[t], len(inside)) if inside else None for t in tolerances}
        bins.append({"from": lo, "below": hi, "slowdowns": len(inside), "caught": caught, "lower_bound": bound})
    return {
        "tolerances": list(tolerances),
        "bins": bins,
        "repeats": repeats,
        "unchanged_pairs": pairs,
        "false_alarms": alarms,
    }


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


# --- the run --------------------------------------------------------------------------------------


def order(unchanged: int, labels: Sequence[str]) -> list[str]:
    """The processes in the order they run: the calibration, two unchanged, then each slowdown
    followed by one more unchanged while they last (unchanged processes spread over the run)."""
    names = [CALIBRATE, "unchanged-1", "unchanged-2"][: 1 + min(unchanged, 2)]
    rest = [f"unchanged-{i}" for i in range(3, unchanged + 1)]
    for label in labels:
        names.append(label)
        if rest:
            names.append(rest.pop(0))
    return names + rest


def _entry(p: Any, case: str) -> dict[str, Any]:
    c = p.counts[case]
    e = {"per_step": c.per_step, "total": c.instructions, "steps": c.steps, "key": p.key, "wall_s": c.wall_s}
    for k in ("injected", "windows", "calls_per_window"):
        if getattr(c, k):
            e[k] = getattr(c, k)
    return e


class CorruptLines(ValueError):
    """An --out or --pooled file with a line that is not JSON (a process killed mid-write)."""


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if ln.strip():
            try:
                lines.append(json.loads(ln))
            except json.JSONDecodeError as e:
                raise CorruptLines(
                    f"{path}:{i} is not a JSON line ({e.msg}); remove it, its process runs again"
                ) from None
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfgate.counts.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", help="comma-separated CPU case ids")
    ap.add_argument("--unchanged", type=int, default=11, help="unchanged processes (>= 2; 11 give 55 pairs)")
    ap.add_argument("--slowdowns", default=",".join(SLOWDOWNS), help="comma-separated: linear, sdpa, local")
    ap.add_argument("--targets", default="1,2,5", help="step growth in %% each slowdown is sized to")
    ap.add_argument("--tolerances", default="1,0.5", help="instruction tolerances in %% the counts are judged at")
    ap.add_argument("--out", type=Path, help="JSON lines, one per process (appended; reruns resume)")
    ap.add_argument("--table-only", action="store_true", help="print the table from --out, count nothing")
    ap.add_argument(
        "--pooled",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="print one table of these runs' --out files together, by achieved growth; count nothing",
    )
    ap.add_argument(
        "--only",
        default="*",
        help="comma-separated globs on process names (calibrate, unchanged-3, linear:1): run only these, "
        "e.g. two runners on one --out, each its own share (a slowdown needs the calibration line first)",
    )
    ap.add_argument(
        "--timeout-s", type=float, default=None, help="per valgrind process (default: count_cases', 300 + 240 per case)"
    )
    ap.add_argument("--root", default=".", help="the project root (its registries are loaded)")
    ap.add_argument("--registries", default="models")
    args = ap.parse_args(argv)
    try:
        return _run(ap, args)
    except CorruptLines as e:  # one line, the file untouched
        ap.error(str(e))


def _run(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not args.pooled and (not args.cases or not args.out):
        ap.error("--cases and --out are required (unless --pooled)")
    if args.unchanged < 2:
        ap.error("--unchanged must be at least 2 (a pair to compare)")
    slowdowns = [s for s in args.slowdowns.split(",") if s]
    bad = [s for s in slowdowns if s not in SLOWDOWNS]
    if bad:
        ap.error(f"--slowdowns: unknown {bad[0]!r}; known: {', '.join(SLOWDOWNS)}")
    try:
        targets = [float(t) for t in args.targets.split(",") if t]
        tolerances = [float(t) / 100 for t in args.tolerances.split(",") if t]
    except ValueError:
        ap.error("--targets and --tolerances are comma-separated numbers in %, e.g. 1,2,5")
    if args.pooled:
        missing = [f for f in args.pooled if not f.is_file()]
        if missing:
            ap.error(f"--pooled: {missing[0]} is not a file; name the --out files of earlier runs")
        print(markdown_pooled(pooled([read_lines(f) for f in args.pooled], tolerances)))
        return 0
    lines = read_lines(args.out)
    if args.table_only:
        print(markdown(summarise(lines, tolerances)))
        return 0

    from perfgate.cases.selection import expand_cases
    from perfgate.cases.workload import MODELS, load_registries, sizes
    from perfgate.measure import instructions

    registries = [r for r in args.registries.split(",") if r]
    load_registries(registries, [], args.root)
    wanted = [c for c in args.cases.split(",") if c]
    every_size = sorted({s for spec in MODELS.values() for s in sizes(spec)})  # a counting size (micro) too
    known = {c.id: c for c in expand_cases("cpu", models=None, sizes_=every_size)}
    missing = [c for c in wanted if c not in known]
    if missing:
        ap.error(f"--cases: unknown case {missing[0]!r}")
    cases = [known[c] for c in wanted]
    done = {ln["process"]: ln for ln in lines}
    labels = [f"{k}:{t:g}" for k in slowdowns for t in targets]
    specs: dict[str, dict[str, dict[str, Any]]] = {}
    only = [g for g in args.only.split(",") if g]
    for name in order(args.unchanged, labels):
        done.update({ln["process"]: ln for ln in read_lines(args.out)})  # another runner's lines
        if name in done:
            print(f"{name}: already in {args.out}, skipped", flush=True)
        elif not any(fnmatch.fnmatchcase(name, g) for g in only):
            continue
        else:
            if name == CALIBRATE:
                condition, per_case = CALIBRATE, None
            elif name.startswith("unchanged"):
                condition, per_case = "unchanged", None
            elif name not in specs:
                print(f"{name}: no calibration line in {args.out} to size it; run calibrate first", file=sys.stderr)
                return 1
            else:
                condition = name.partition(":")[0]
                per_case = {c: s for c, s in specs[name].items() if "skip" not in s}
            started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            p = instructions.count_cases(
                cases,
                root=args.root,
                registries=registries,
                inject="",
                per_case=per_case or None,
                calibrate=name == CALIBRATE,
                timeout_s=args.timeout_s,
                out_dir=Path(".perfgate/quality") / name.replace(":", "-"),
            )
            line = {
                "process": name,
                "condition": condition,
                "started": started,
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "wall_s": round(p.wall_s, 1),
                "cases": {c: _entry(p, c) for c in p.counts},
                "errors": p.errors,
            }
            if condition not in ("unchanged", CALIBRATE):
                line["specs"] = specs[name]
            with args.out.open("a") as fh:  # one line per process, as it ends: progress survives
                fh.write(json.dumps(line) + "\n")
            done[name] = line
            print(f"{name}: {p.wall_s:.0f} s, {len(p.counts)} counted, {len(p.errors)} not", flush=True)
        if name == CALIBRATE:
            cal = done[name]
            if cal["errors"]:
                print(f"calibration failed: {cal['errors']}", file=sys.stderr)
                return 1
            specs = plan(cal["cases"], slowdowns, targets, instructions.STEPS)
    print(markdown(summarise(list(done.values()), tolerances)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
