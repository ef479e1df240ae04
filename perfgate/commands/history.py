"""`perfgate history`: one metric per case over time and commit, from every saved run."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

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
        "intended shifts); on the CPU follow the gate's quantity with --metric normalised_median",
    )
    p.add_argument(
        "--min-change",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest level shift reported by --change-points, in %% (default 5)",
    )
    p.add_argument(
        "--pyproject",
        default=None,
        metavar="FILE",
        help="where accepted_changes and history_store are read (a file that must exist; default ./pyproject.toml, "
        "none when it is absent)",
    )
    p.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder (default baselines)")
    p.add_argument(
        "--storage",
        action="append",
        default=None,
        metavar="DIR",
        help="pytest-benchmark storage folders, filtered by fingerprint (default .benchmarks)",
    )
    add_store_argument(p)
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


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        action="append",
        default=None,
        metavar="DIR",
        help="a history store folder (a checkout of the perfgate-history branch; docs/history-store.md), "
        "filtered by fingerprint (default: [tool.perfgate] history_store when that folder exists)",
    )


def _globs(values: list[str]) -> tuple[str, ...]:
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def current_fingerprint(device: str | None) -> dict:
    """This machine's fingerprint; imports torch, so only when no id was given. A --device this
    machine cannot fingerprint is one line (doctor's check), not torch's traceback."""
    from perfgate.commands import CommandError
    from perfgate.measure.device import default_device, device_error
    from perfgate.measure.fingerprint import fingerprint

    if device is not None and (err := device_error(device)) is not None:
        raise CommandError(f"--device {err}, or pass --fingerprint ID or --all-fingerprints")
    return fingerprint(device or default_device())


def current_fingerprint_id(device: str | None) -> str:
    from perfgate.measure.fingerprint import fingerprint_id

    return fingerprint_id(current_fingerprint(device))


def storage_dirs(args: argparse.Namespace, default: list[str]) -> list[str]:
    """--storage (or the default) plus the history stores: --store, else the configured one if present."""
    from perfgate.commands import CommandError
    from perfgate.history.store import StoreError, configured_store

    dirs = list(args.storage if args.storage is not None else default)
    for d in args.store or []:
        if not Path(d).is_dir():
            raise CommandError(
                f"--store {d}: no such folder; fetch the store with: git fetch origin perfgate-history && "
                f"git worktree add {d} perfgate-history"
            )
        dirs.append(d)
    if args.store is None:
        try:
            configured = configured_store(getattr(args, "pyproject", None) or "pyproject.toml")
        except StoreError as exc:
            raise CommandError(str(exc)) from None
        dirs += [d for d in configured if Path(d).is_dir()]
    return dirs


def auto_scope(args: argparse.Namespace, storage: list[str]):
    """This machine's fingerprint when it has saved runs, else every fingerprint with a note
    (perfgate.history.scope); --fingerprint and --all-fingerprints choose for themselves. The runs
    read to decide are kept on the scope (`gathered`), so that a year of history is read once."""
    from perfgate.history import runs as h
    from perfgate.history.scope import Scope, choose, recorded_fingerprints

    if args.all_fingerprints:
        return Scope(None, None)
    if args.fingerprint:
        return Scope(args.fingerprint, None)
    mine_id = current_fingerprint_id(args.device)
    if h._json_files(Path(args.baselines) / mine_id):
        return Scope(mine_id, None)
    every = h.gather(baselines_root=args.baselines, fingerprint_id=None, storage_dirs=storage)
    recorded = recorded_fingerprints(every.runs)
    scope = choose(mine_id, current_fingerprint(args.device) if mine_id not in recorded else {}, recorded)
    return replace(scope, gathered=every) if scope.fingerprint_id is None else scope


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError, project_file
    from perfgate.history import runs as h
    from perfgate.output.terminal import history_lines

    args.pyproject = project_file(args.pyproject)
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
    storage = storage_dirs(args, [".benchmarks"])
    scope = auto_scope(args, storage)
    fp_id = scope.fingerprint_id
    filters = h.Filters(
        models=_globs(args.model), variants=_globs(args.variant), cases=_globs(args.case), since=since, until=until
    )
    if scope.gathered is not None and not args.paths and args.metric not in h._PERCENTILES:
        g = scope.gathered  # every fingerprint, already read (p90/p99 of plain files need samples)
        hist = h.History(h.metric_info(args.metric), h.build_series(g.runs, args.metric, filters), g.unreadable)
        hist.files = g.files
    else:
        hist = h.collect(
            metric=args.metric,
            filters=filters,
            baselines_root=args.baselines,
            fingerprint_id=fp_id,
            storage_dirs=storage,
            paths=args.paths,
        )
    for line in hist.unreadable:
        print(f"perfgate history: skipped {line}", file=sys.stderr)
    if hist.files == 0:
        where = f"{Path(args.baselines) / fp_id}" if fp_id else args.baselines
        raise CommandError(
            f"no readable saved runs in {where} or {', '.join(map(str, storage))}; "
            "record one with: pytest benchmarks --perfgate-record, or pass result files or --all-fingerprints"
        )
    if not hist.series:
        raise CommandError(_nothing_matched(hist, args))
    unplaced = _change_points(hist, args) if args.change_points else []
    if args.json:
        print(json.dumps({"fingerprint_id": fp_id, "note": scope.note, **hist.as_dict()}, indent=1))
        return 0
    if scope.note:
        print(f"perfgate history: {scope.note}")
    print("\n".join(history_lines(hist, last=args.last, brief=args.brief)))
    if args.change_points:
        from perfgate.output.change_points import bisect_lines, change_point_lines

        print("\n".join(change_point_lines(hist, min_change=args.min_change / 100, unplaced=unplaced)))
        print("\n".join(bisect_lines(hist)))
    if hist.other_fingerprints:
        print(f"\n({hist.other_fingerprints} file(s) of other fingerprints left out; --all-fingerprints shows them)")
    return 0


def _change_points(hist, args: argparse.Namespace) -> list:
    """Fill each series' change points; the accepted changes that match no commit of their case."""
    from perfgate.commands import CommandError
    from perfgate.history.changepoints import AcceptedChangeError, annotate, load_accepted

    if not 0 < args.min_change < 1000:
        raise CommandError(f"--min-change {args.min_change:g}: give a shift in %, e.g. 5")
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
