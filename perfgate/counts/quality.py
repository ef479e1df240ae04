"""How well the instruction gate tells a slowdown from unchanged code, measured on real cases:

    nice -n 10 perfgate count-quality \
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
as it ends (a rerun with the same `--out` skips the processes already there), and the command
prints the Markdown table at the end (perfgate.output.count_quality; `--table-only` from the file,
`--pooled A B C` one table of several runs by the growth each slowdown achieved).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import statistics
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.gate.instructions import judge_instructions, spread
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import REGRESSION, UNCHANGED
from perfgate.record import CaseRecord, InstructionCount

if TYPE_CHECKING:
    from types import ModuleType

    from perfgate.cases.runner import Case

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
    return CaseRecord(instructions_per_step=entry["per_step"], instructions=InstructionCount(key=entry.get("key")))


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


class QualityError(ValueError):
    """The experiment cannot go on (an unknown case, a slowdown with no calibration to size it): one line."""


def run_experiment(
    case_ids: Sequence[str],
    *,
    unchanged: int,
    labels: Sequence[str],
    out: Path,
    only: Sequence[str] = ("*",),
    timeout_s: float | None = None,
    root: str = ".",
    registries: Sequence[str] = ("models",),
    say: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run the processes `order(unchanged, labels)` names that `out` does not hold yet (and `only`
    selects), one valgrind process at a time, each appended to `out` as one JSON line as it ends;
    returns every line of `out`. `labels`: "linear:1", "local:2", ... (slowdown kind : target %)."""
    from perfgate.cases.selection import expand_cases
    from perfgate.cases.workload import MODELS, load_registries, sizes
    from perfgate.counts import launcher as instructions

    load_registries(list(registries), [], root)
    every_size = sorted({s for spec in MODELS.values() for s in sizes(spec)})  # a counting size (micro) too
    known = {c.id: c for c in expand_cases("cpu", models=None, sizes_=every_size)}
    missing = [c for c in case_ids if c not in known]
    if missing:
        raise QualityError(f"--cases: unknown case {missing[0]!r}")
    cases = [known[c] for c in case_ids]
    done = {ln["process"]: ln for ln in read_lines(out)}
    specs: dict[str, dict[str, dict[str, Any]]] = {}
    for name in order(unchanged, labels):
        done.update({ln["process"]: ln for ln in read_lines(out)})  # another runner's lines
        if name in done:
            say(f"{name}: already in {out}, skipped")
        elif any(fnmatch.fnmatchcase(name, g) for g in only):
            if name not in (CALIBRATE,) and not name.startswith("unchanged") and name not in specs:
                raise QualityError(f"{name}: no calibration line in {out} to size it; run calibrate first")
            done[name] = _one_process(name, cases, specs.get(name), out, instructions, timeout_s, root, registries)
            p = done[name]
            say(f"{name}: {p['wall_s']:.0f} s, {len(p['cases'])} counted, {len(p['errors'])} not")
        if name == CALIBRATE and name in done:
            if done[name]["errors"]:
                raise QualityError(f"calibration failed: {done[name]['errors']}")
            specs = plan_labels(done[name]["cases"], labels, instructions.STEPS)
    return list(done.values())


def plan_labels(
    calibration: dict[str, dict[str, Any]], labels: Sequence[str], steps: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """`plan` for labels "kind:target" (each kind with its own targets)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label in labels:
        kind, _, target = label.partition(":")
        out.update(plan(calibration, [kind], [float(target)], steps))
    return out


def _one_process(
    name: str,
    cases: Sequence[Case],
    spec: dict[str, dict[str, Any]] | None,
    out: Path,
    instructions: ModuleType,
    timeout_s: float | None,
    root: str,
    registries: Sequence[str],
) -> dict[str, Any]:
    """One valgrind process of the experiment, its line appended to `out` as it ends (progress survives)."""
    condition = name if name == CALIBRATE else "unchanged" if name.startswith("unchanged") else name.partition(":")[0]
    per_case = {c: s for c, s in spec.items() if "skip" not in s} if spec else None
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    p = instructions.count_cases(
        cases,
        root=root,
        registries=list(registries),
        inject="",
        per_case=per_case or None,
        calibrate=name == CALIBRATE,
        timeout_s=timeout_s,
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
    if spec is not None:
        line["specs"] = spec
    with out.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    return line
