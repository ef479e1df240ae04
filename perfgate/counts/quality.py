"""How well the instruction gate tells a slowdown from unchanged code, measured on real cases:

    python -m perfgate.counts.quality --cases physicsnemo-block-tiny-baseline,vjepa2-encoder-tiny-baseline \
        --unchanged 3 --inject shared:1,shared:2,shared:5,local:1,local:2,local:5 --out counts-quality.jsonl

One valgrind process per condition (all the cases in it, in the same order): `--unchanged` plain
processes, then one per injected slowdown (perfgate.quality.inject: `shared:K` does every
ceil(100/K)-th F.linear twice, `local:K` repeats a leaf module for K% of the step's time). The
first unchanged process is the baseline; every other process is judged against it by the gate's
instruction judge at the default tolerance. Each process's counts go to `--out` as one JSON line as
soon as it ends, and the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfgate.gate.instructions import judge_instructions
from perfgate.gate.settings import GateSettings
from perfgate.measure import instructions
from perfgate.record import CaseRecord


def _record(p: instructions.CountPass, case: str) -> CaseRecord | None:
    c = p.counts.get(case)
    if c is None:
        return None
    return CaseRecord(instructions_per_step=c.per_step, instructions=p.block(case), instructions_functions=c.functions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfgate.counts.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True, help="comma-separated case ids (CPU)")
    ap.add_argument("--unchanged", type=int, default=2, help="unchanged processes (>= 2; the first is the baseline)")
    ap.add_argument("--inject", default="", help="comma-separated injections, e.g. shared:1,local:2")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, one per process")
    ap.add_argument("--root", default=".", help="the project root (its registries are loaded)")
    ap.add_argument("--registries", default="models")
    args = ap.parse_args(argv)
    if args.unchanged < 2:
        ap.error("--unchanged must be at least 2 (a baseline and one unchanged comparison)")
    from perfgate.cases.selection import expand_cases
    from perfgate.cases.workload import load_registries

    registries = [r for r in args.registries.split(",") if r]
    load_registries(registries, [], args.root)
    wanted = [c for c in args.cases.split(",") if c]
    known = {c.id: c for c in expand_cases("cpu", models=None)}
    missing = [c for c in wanted if c not in known]
    if missing:
        ap.error(f"--cases: unknown case {missing[0]!r}")
    cases = [known[c] for c in wanted]
    conditions = [None] * args.unchanged + [i for i in args.inject.split(",") if i]
    rows = []
    base: instructions.CountPass | None = None
    for i, inject in enumerate(conditions):
        p = instructions.count_cases(
            cases, root=args.root, registries=registries, inject=inject or "", out_dir=Path(f".perfgate/quality/{i}")
        )
        line = {
            "condition": inject or "unchanged",
            "wall_s": round(p.wall_s, 1),
            "counts": {k: v.instructions for k, v in p.counts.items()},
            "errors": p.errors,
        }
        with args.out.open("a") as fh:
            fh.write(json.dumps(line) + "\n")
        if base is None:
            base = p
            continue
        for c in wanted:
            b, cur = _record(base, c), _record(p, c)
            if b is None or cur is None:
                continue
            v = judge_instructions(c, cur, b, GateSettings())
            rows.append((inject or "unchanged", c, v.verdict, v.change_pct, p.wall_s))
    print("| condition | case | verdict | instructions change | process wall s |")
    print("|---|---|---|---|---|")
    for cond, c, verdict, pct, wall in rows:
        print(f"| {cond} | {c} | {verdict} | {pct:+.3f}% | {wall:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
