"""`perfgate count-quality`: how well the instruction gate tells a slowdown from unchanged code,
measured on real cases under callgrind (perfgate.counts.quality; docs/instructions.md "Detection")."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "measure the instruction gate's false alarms and detection on real cases (valgrind processes)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from perfgate.counts.quality import SLOWDOWNS

    p.add_argument("--cases", help="comma-separated CPU case ids (any size: micro, tiny, ...)")
    p.add_argument("--unchanged", type=int, default=11, help="unchanged processes (>= 2; 11 give 55 pairs)")
    p.add_argument("--slowdowns", default=",".join(SLOWDOWNS), help="comma-separated: linear, sdpa, local")
    p.add_argument("--targets", default="1,2,5", help="step growth in %% each slowdown is sized to")
    p.add_argument("--tolerances", default="1,0.5", help="instruction tolerances in %% the counts are judged at")
    p.add_argument("--out", type=Path, help="JSON lines, one per process (appended; reruns resume)")
    p.add_argument("--table-only", action="store_true", help="print the table from --out, count nothing")
    p.add_argument(
        "--pooled",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="print one table of these runs' --out files together, by achieved growth; count nothing",
    )
    p.add_argument(
        "--only",
        default="*",
        help="comma-separated globs on process names (calibrate, unchanged-3, linear:1): run only these, "
        "e.g. two runners on one --out, each its own share (a slowdown needs the calibration line first)",
    )
    p.add_argument(
        "--timeout-s", type=float, default=None, help="per valgrind process (default: count_cases', 300 + 240 per case)"
    )
    p.add_argument("--root", default=".", help="the project root (its registries are loaded)")
    p.add_argument("--registries", default="models")


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError
    from perfgate.counts import quality as cq
    from perfgate.counts.quality import SLOWDOWNS
    from perfgate.output.count_quality import markdown, markdown_pooled

    if not args.pooled and (not args.cases or not args.out):
        raise CommandError("--cases and --out are required (unless --pooled)")
    if args.unchanged < 2:
        raise CommandError("--unchanged must be at least 2 (a pair to compare)")
    slowdowns = [s for s in args.slowdowns.split(",") if s]
    bad = [s for s in slowdowns if s not in SLOWDOWNS]
    if bad:
        raise CommandError(f"--slowdowns: unknown {bad[0]!r}; known: {', '.join(SLOWDOWNS)}")
    try:
        targets = [float(t) for t in args.targets.split(",") if t]
        tolerances = [float(t) / 100 for t in args.tolerances.split(",") if t]
    except ValueError:
        raise CommandError("--targets and --tolerances are comma-separated numbers in %, e.g. 1,2,5") from None
    try:
        if args.pooled:
            missing = [f for f in args.pooled if not f.is_file()]
            if missing:
                raise CommandError(f"--pooled: {missing[0]} is not a file; name the --out files of earlier runs")
            print(markdown_pooled(cq.pooled([cq.read_lines(f) for f in args.pooled], tolerances)))
            return 0
        if args.table_only:
            print(markdown(cq.summarise(cq.read_lines(args.out), tolerances)))
            return 0
        lines = cq.run_experiment(
            [c for c in args.cases.split(",") if c],
            unchanged=args.unchanged,
            labels=[f"{k}:{t:g}" for k in slowdowns for t in targets],
            out=args.out,
            only=[g for g in args.only.split(",") if g],
            timeout_s=args.timeout_s,
            root=args.root,
            registries=[r for r in args.registries.split(",") if r],
            say=lambda line: print(line, flush=True),
        )
    except (cq.CorruptLines, cq.QualityError) as exc:  # one line, the file untouched
        raise CommandError(str(exc)) from None
    print(markdown(cq.summarise(lines, tolerances)))
    return 0
