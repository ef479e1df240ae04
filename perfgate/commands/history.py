"""`perfgate history`: one metric per case over time and commit, from every saved run."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "show a metric per case over the saved runs and baselines (sparklines, change from the previous entry)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from perfgate.history.runs import HISTORY_METRICS

    p.add_argument(
        "paths", nargs="*", help="extra result files or folders to include (always, whatever their fingerprint)"
    )
    p.add_argument(
        "--metric",
        default="median_ms",
        help=f"metric to follow: {', '.join(HISTORY_METRICS)}, or a dotted extra_info path such as "
        f"throughput.frames (default median_ms)",
    )
    p.add_argument(
        "--model", action="append", default=[], metavar="GLOB", help="only these models (repeatable, comma-separated)"
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="GLOB",
        help="only these variants (repeatable, comma-separated)",
    )
    p.add_argument(
        "--case", action="append", default=[], metavar="GLOB", help="only cases whose test name or label matches"
    )
    p.add_argument("--since", metavar="DATE", help="only runs at or after this date or ISO time (UTC)")
    p.add_argument("--until", metavar="DATE", help="only runs at or before this date or ISO time (UTC)")
    p.add_argument(
        "--last", type=int, default=20, metavar="N", help="show the last N entries per case (0: all; default 20)"
    )
    p.add_argument("--brief", action="store_true", help="one line per case: sparkline, last value and change")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.add_argument(
        "--change-points",
        action="store_true",
        help="mark where each case's level changed (PELT via ruptures; [tool.perfgate] accepted_changes marks "
        "intended steps); on the CPU follow the gate's quantity with --metric normalised_median",
    )
    p.add_argument(
        "--min-change",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest step reported by --change-points, in %% (default 5)",
    )
    p.add_argument(
        "--pyproject",
        default="pyproject.toml",
        metavar="FILE",
        help="where accepted_changes are read (default pyproject.toml)",
    )
    p.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder (default baselines)")
    p.add_argument(
        "--storage",
        action="append",
        default=None,
        metavar="DIR",
        help="pytest-benchmark storage folders, filtered by fingerprint (default .benchmarks)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--device",
        default=None,
        help="fingerprint of this machine for this device (default cuda if available, else cpu)",
    )
    g.add_argument(
        "--fingerprint", default=None, metavar="ID", help="a fingerprint id (a folder name under the baselines)"
    )
    g.add_argument("--all-fingerprints", action="store_true", help="every fingerprint, each case per fingerprint")


def _globs(values: list[str]) -> tuple[str, ...]:
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def current_fingerprint_id(device: str | None) -> str:
    """This machine's fingerprint id; imports torch, so only when no id was given."""
    from perfgate.measure.device import default_device
    from perfgate.measure.fingerprint import fingerprint, fingerprint_id

    return fingerprint_id(fingerprint(device or default_device()))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from perfgate.commands import CommandError
    from perfgate.history import runs as h
    from perfgate.output.terminal import history_lines

    try:
        since = h.parse_day(args.since) if args.since else None
        until = h.parse_day(args.until, end=True) if args.until else None
    except ValueError as exc:
        raise CommandError(f"--since/--until: {exc}") from None
    if args.last < 0:
        raise CommandError(f"--last {args.last}: give a count of entries, or 0 for all")
    for p in args.paths:
        if not Path(p).exists():
            raise CommandError(f"{p}: no such file or folder")
    fp_id = None if args.all_fingerprints else (args.fingerprint or current_fingerprint_id(args.device))
    filters = h.Filters(
        models=_globs(args.model), variants=_globs(args.variant), cases=_globs(args.case), since=since, until=until
    )
    hist = h.collect(
        metric=args.metric,
        filters=filters,
        baselines_root=args.baselines,
        fingerprint_id=fp_id,
        storage_dirs=args.storage if args.storage is not None else [".benchmarks"],
        paths=args.paths,
    )
    for line in hist.unreadable:
        print(f"perfgate history: skipped {line}", file=sys.stderr)
    if hist.files == 0:
        where = f"{Path(args.baselines) / fp_id}" if fp_id else args.baselines
        raise CommandError(
            f"no readable saved runs in {where} or {', '.join(map(str, args.storage or ['.benchmarks']))}; "
            "record one with: pytest benchmarks --perfgate-record, or pass result files or --all-fingerprints"
        )
    if not hist.series:
        raise CommandError(_nothing_matched(hist, args))
    unplaced = _change_points(hist, args) if args.change_points else []
    if args.json:
        print(json.dumps({"fingerprint_id": fp_id, **hist.as_dict()}, indent=1))
        return 0
    print("\n".join(history_lines(hist, last=args.last, brief=args.brief)))
    if args.change_points:
        from perfgate.output.change_points import change_point_lines

        print("\n".join(change_point_lines(hist, min_change=args.min_change / 100, unplaced=unplaced)))
    if hist.other_fingerprints:
        print(f"\n({hist.other_fingerprints} file(s) of other fingerprints left out; --all-fingerprints shows them)")
    return 0


def _change_points(hist, args: argparse.Namespace) -> list:
    """Fill each series' change points; the accepted changes that match no commit of their case."""
    from perfgate.commands import CommandError
    from perfgate.history.changepoints import AcceptedChangeError, annotate, load_accepted

    if not 0 < args.min_change < 1000:
        raise CommandError(f"--min-change {args.min_change:g}: give a step in %, e.g. 5")
    try:
        accepted = load_accepted(args.pyproject)
    except AcceptedChangeError as exc:
        raise CommandError(str(exc)) from None
    return annotate(hist, accepted, min_change=args.min_change / 100)


def _nothing_matched(hist, args: argparse.Namespace) -> str:
    """Name what to change when the files were read but no entry survived the filters."""
    filters = [
        f"--{k} {','.join(v)}" for k, v in (("model", args.model), ("variant", args.variant), ("case", args.case)) if v
    ]
    filters += [f"--{k} {v}" for k, v in (("since", args.since), ("until", args.until)) if v]
    what = f" matching {' '.join(filters)}" if filters else ""
    return (
        f"no entry has metric {args.metric!r}{what} in {hist.files} file(s); "
        "check the names with `perfgate history --brief` and the metric list with `perfgate history --help`"
    )
