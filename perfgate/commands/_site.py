"""`perfgate report --site DIR`: read every saved run and write the dashboard's pages (perfgate.output.site)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def write_site(args: argparse.Namespace, storage: list[str]) -> int:
    from perfgate import files
    from perfgate.commands import CommandError
    from perfgate.gate.policy import PolicyError, load
    from perfgate.history.changepoints import AcceptedChangeError, load_accepted
    from perfgate.history.dashboard import Baselines
    from perfgate.history.runs import gather
    from perfgate.output.site import build_site, commit_url_error

    if args.commit_url and (err := commit_url_error(args.commit_url)) is not None:
        raise CommandError(
            f"--commit-url {args.commit_url!r}: {err}; e.g. --commit-url https://github.com/OWNER/REPO/commit/{{commit}}"
        )
    try:
        accepted = load_accepted(args.pyproject)
        policy = load(args.pyproject)  # the gate's tolerances, drawn around each baseline
    except (AcceptedChangeError, PolicyError) as exc:
        raise CommandError(str(exc)) from None
    g = gather(baselines_root=args.baselines, fingerprint_id=None, storage_dirs=storage, paths=args.runs)
    for line in g.unreadable:
        print(f"perfgate report: skipped {line}", file=sys.stderr)
    if not g.runs:
        raise CommandError(
            f"no saved run in {args.baselines} or {', '.join(storage)}; pass --store DIR (a checkout of "
            "perfgate-history) or RUN.json files"
        )
    pages = build_site(
        g.runs, accepted, commit_url=args.commit_url, title=args.title, baselines=Baselines(args.baselines, policy)
    )
    out = Path(args.site)
    total = 0
    for rel, text in sorted(pages.items()):
        total += files.write_text(out / rel, text).stat().st_size
    index = (out / "index.html").stat().st_size
    print(
        f"perfgate report: wrote {out}/index.html ({index / 1024:.0f} KiB) and {len(pages) - 1} more page(s), "
        f"{total / 2**20:.1f} MiB, from {len(g.runs)} run(s)",
        file=sys.stderr,
    )
    return 0
