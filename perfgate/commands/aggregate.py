"""`perfgate aggregate DIR`: one result from the parts of a run made elsewhere: torchrun's per-rank
results (rank<R>.json: the same cases on every rank, aggregated case by case) or the shards of a
`--perfgate-shard I/N` matrix (shard-I-of-N.json with its verdicts: disjoint cases, merged)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "merge the parts of a run: torchrun's per-rank results (rank<R>.json) or the shards of a --perfgate-shard "
    "matrix (shard-I-of-N.json) into one result file (and, for shards, one verdicts file)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from perfgate.dist.ranks import DEFAULT_STRAGGLER_PCT

    p.add_argument(
        "folder",
        type=Path,
        metavar="DIR",
        help="folder holding rank0.json, rank1.json, ... (--perfgate-dist-dir of a torchrun run) or the shards' "
        "shard-I-of-N.json and verdicts.shard-I-of-N.json (--perfgate-shard-dir, e.g. the matrix's artifacts)",
    )
    p.add_argument(
        "-o", "--output", type=Path, default=None, help="aggregated result to write (default DIR/aggregated.json)"
    )
    p.add_argument(
        "--verdicts-output",
        type=Path,
        default=None,
        metavar="FILE",
        help="shards: the merged verdicts to write (default verdicts.json beside the output)",
    )
    p.add_argument(
        "--straggler-pct",
        type=float,
        default=None,
        metavar="PCT",
        help="ranks: a rank whose median is more than PCT %% above the median of rank medians is a straggler "
        f"(default {DEFAULT_STRAGGLER_PCT:g})",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        metavar="N",
        help="ranks: ranks the run had, so missing ones are named (default: from the files)",
    )
    p.add_argument("--fail-on-straggler", action="store_true", help="ranks: exit 1 when any case has a straggler")


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError
    from perfgate.dist import ranks as pd
    from perfgate.dist import shard

    if not args.folder.is_dir():
        raise CommandError(
            f"{args.folder}: no such folder; pass the --perfgate-dist-dir of the torchrun run or the folder of the "
            "shards' files"
        )
    if args.straggler_pct is not None and args.straggler_pct < 0:
        raise CommandError(f"--straggler-pct {args.straggler_pct:g}: give a percentage of at least 0")
    if args.world_size is not None and args.world_size < 1:
        raise CommandError(f"--world-size {args.world_size}: give the number of ranks, at least 1")
    ranks = pd.rank_files(args.folder)
    shards = any(shard.RESULT_FILE.match(p.name) for p in args.folder.iterdir())
    if ranks and shards:
        raise CommandError(
            f"{args.folder}: holds both rank<R>.json (torchrun) and shard-I-of-N.json files; give each run its folder"
        )
    if shards:
        given = [
            o for o, v in (("--straggler-pct", args.straggler_pct), ("--world-size", args.world_size)) if v is not None
        ]
        given += ["--fail-on-straggler"] if args.fail_on_straggler else []
        if given:
            raise CommandError(f"{given[0]} applies to torchrun's rank files; {args.folder} holds shards")
        return _shards(args)
    if args.verdicts_output is not None:
        raise CommandError(f"--verdicts-output applies to shards; {args.folder} holds no shard-I-of-N.json")
    return _ranks(args)


def _ranks(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError
    from perfgate.dist import ranks as pd
    from perfgate.exitcodes import FAILED as EXIT_REGRESSION
    from perfgate.files import write_json
    from perfgate.output import ranks as ranks_text
    from perfgate.results import Distributed, RunInfo

    pct = pd.DEFAULT_STRAGGLER_PCT if args.straggler_pct is None else args.straggler_pct
    try:
        runs = pd.load_rank_runs(args.folder)
        agg = pd.aggregate(runs, threshold_pct=pct, world_size=args.world_size)
    except pd.AggregateError as exc:
        raise CommandError(f"{args.folder}: {exc}" if str(args.folder) not in str(exc) else str(exc)) from None
    out = write_json(args.output or args.folder / pd.AGGREGATED_FILE, agg)
    print("\n".join(ranks_text.summary_lines(agg, out)))
    stragglers = (RunInfo.from_json(agg).distributed or Distributed(world_size=0, ranks=[])).stragglers
    return EXIT_REGRESSION if args.fail_on_straggler and stragglers else 0


def _shards(args: argparse.Namespace) -> int:
    """The shards' results and verdicts merged; exit 1 when a merged verdict fails, as the one
    unsharded run would have."""
    from dataclasses import replace

    from perfgate.commands import CommandError
    from perfgate.dist import ranks as pd
    from perfgate.dist import shard
    from perfgate.dist.workers import MergeError
    from perfgate.exitcodes import FAILED as EXIT_REGRESSION
    from perfgate.files import write_json
    from perfgate.gate.verdict_file import verdicts_json
    from perfgate.output import terminal
    from perfgate.results import ResultFileError, benchmarks

    try:
        merged, vs, notes = shard.merge_folder(args.folder)
    except (shard.ShardError, MergeError, ResultFileError) as exc:
        raise CommandError(str(exc)) from None
    vs = replace(vs, notices=vs.notices + tuple(f"perfgate: {n}" for n in notes))
    out = write_json(args.output or args.folder / pd.AGGREGATED_FILE, merged)
    verdicts = write_json(
        args.verdicts_output or out.parent / "verdicts.json", verdicts_json(vs, merged["perfgate"].get("fingerprint"))
    )
    info = merged["perfgate"]["shard"]
    per_shard = ", ".join(f"{k}: {n}" for k, n in info["cases_per_shard"].items())
    lines = [
        f"perfgate: merged {info['count']} shard(s) ({per_shard} of {info['selected']} case(s); split by "
        f"{info['basis']}): {len(benchmarks(merged))} measured, {len(vs.skipped)} skipped",
        f"perfgate: results in {out}, verdicts in {verdicts}; report: perfgate report {out} --verdicts {verdicts}",
    ]
    if vs.verdicts:
        lines += ["", "gate verdicts (regressions first):", *terminal.verdict_table(vs.verdicts)]
    lines += [*vs.notices]
    print("\n".join(lines))
    return EXIT_REGRESSION if vs.failing else 0
