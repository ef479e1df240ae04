"""`perfgate store add`: validate a main run's artifact and add it to the history store folder."""

from __future__ import annotations

import argparse
import sys

HELP = "validate a main run's results and add them to the history store (a checkout of perfgate-history)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = sub.add_parser("add", help="validate one run and write it as the next file of its fingerprint's folder")
    a.add_argument("store", metavar="DIR", help="the store folder (a worktree of the perfgate-history branch)")
    a.add_argument("--results", required=True, metavar="FILE", help="the run's results.json (pytest-benchmark JSON)")
    a.add_argument("--verdicts", metavar="FILE", help="the run's verdicts.json (kept beside the figures)")
    a.add_argument("--commit", required=True, metavar="SHA", help="the commit the workflow ran for (40 hex digits)")
    a.add_argument(
        "--tier",
        required=True,
        help="the tier the run measured: pr (every push), all (nightly) or cpu-pr (the CPU counts)",
    )
    a.add_argument(
        "--repo", metavar="DIR", help="a clone with main's history: the commit must be an ancestor of --main-ref"
    )
    a.add_argument("--main-ref", default="origin/main", metavar="REF", help="main in --repo (default origin/main)")
    a.add_argument(
        "--device-type",
        choices=("cpu", "cuda"),
        help="refuse a run of another device type; cpu: the run must carry instruction counts under one key",
    )
    a.add_argument("--source", metavar="URL", help="where the run came from (the workflow run's address)")
    t = sub.add_parser("thin", help="remove runs older than --days from the tree, but the nightly full matrix")
    t.add_argument("store", metavar="DIR", help="the store folder")
    t.add_argument("--days", type=int, default=90, help="keep every run of the last DAYS days (default 90)")
    t.add_argument(
        "--keep-tier",
        default="all",
        metavar="TIER",
        help="the tier kept whatever its age, as the stored files name it (default all: the nightly full matrix); "
        "a tier no stored run has is refused",
    )


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError
    from perfgate.history.store import StoreError, add_run, validate

    if args.action == "thin":
        return _thin(args)

    try:
        data = validate(
            args.results,
            args.verdicts,
            commit=args.commit,
            tier=args.tier,
            repo=args.repo,
            main_ref=args.main_ref,
            device_type=args.device_type,
        )
        added = add_run(args.store, data, source=args.source)
    except StoreError as exc:
        raise CommandError(str(exc)) from None
    if added.path is None:
        print(f"perfgate store: {args.commit[:12]} ({args.tier}) of {added.fingerprint_id} is already stored")
    else:
        print(f"perfgate store: wrote {added.path} ({added.cases} cases, {added.stored_bytes} bytes)", file=sys.stdout)
    return 0


def _thin(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from perfgate.commands import CommandError
    from perfgate.history.store import StoreError, thin

    if not Path(args.store).is_dir():
        raise CommandError(f"{args.store}: no such folder; give the store's worktree")
    if args.days < 1:
        raise CommandError(f"--days {args.days}: give a number of days, e.g. 90")
    try:
        removed = thin(args.store, now=datetime.now(UTC), keep_days=args.days, keep_tier=args.keep_tier)
    except StoreError as exc:
        raise CommandError(str(exc)) from None
    print(f"perfgate store: removed {len(removed)} run(s) older than {args.days} days (tier {args.keep_tier} kept)")
    return 0
