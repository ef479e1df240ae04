"""`perfgate aggregate DIR -o aggregated.json`: one result from per-rank results made elsewhere."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "aggregate the per-rank results (rank<R>.json) of a torchrun run into one result file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from perfgate.distributed import DEFAULT_STRAGGLER_PCT

    p.add_argument(
        "folder",
        type=Path,
        metavar="DIR",
        help="folder holding rank0.json, rank1.json, ... (--perfgate-dist-dir of the run)",
    )
    p.add_argument(
        "-o", "--output", type=Path, default=None, help="aggregated result to write (default DIR/aggregated.json)"
    )
    p.add_argument(
        "--straggler-pct",
        type=float,
        default=DEFAULT_STRAGGLER_PCT,
        metavar="PCT",
        help="a rank whose median is more than PCT %% above the median of rank medians is a straggler (default "
        f"{DEFAULT_STRAGGLER_PCT:g})",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        metavar="N",
        help="ranks the run had, so missing ones are named (default: from the files)",
    )
    p.add_argument("--fail-on-straggler", action="store_true", help="exit 1 when any case has a straggler")


def run(args: argparse.Namespace) -> int:
    from perfgate import distributed as pd
    from perfgate.cli import EXIT_REGRESSION, CommandError
    from perfgate.output.files import write_json

    if not args.folder.is_dir():
        raise CommandError(f"{args.folder}: no such folder; pass the --perfgate-dist-dir of the torchrun run")
    if args.straggler_pct < 0:
        raise CommandError(f"--straggler-pct {args.straggler_pct:g}: give a percentage of at least 0")
    if args.world_size is not None and args.world_size < 1:
        raise CommandError(f"--world-size {args.world_size}: give the number of ranks, at least 1")
    try:
        runs = pd.load_rank_runs(args.folder)
        agg = pd.aggregate(runs, threshold_pct=args.straggler_pct, world_size=args.world_size)
    except pd.AggregateError as exc:
        raise CommandError(f"{args.folder}: {exc}" if str(args.folder) not in str(exc) else str(exc)) from None
    out = write_json(args.output or args.folder / pd.AGGREGATED_FILE, agg)
    print("\n".join(pd.summary_lines(agg, out)))
    stragglers = agg["perfgate"]["distributed"]["stragglers"]
    return EXIT_REGRESSION if args.fail_on_straggler and stragglers else 0
