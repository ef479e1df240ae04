"""`perfgate report`: one self-contained HTML file (and optionally Markdown) from result JSON files."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HELP = "write a self-contained HTML report (tables, plots, history, telemetry) of result JSON files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="pytest-benchmark JSON files (--benchmark-json, baselines)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--verdicts", metavar="FILE", help="the gate's verdicts (pytest writes .perfgate/verdicts.json)")
    p.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder for the history trends (default baselines)")
    p.add_argument("--storage", action="append", default=None, metavar="DIR",
                   help="pytest-benchmark storage folders for the history (default .benchmarks)")
    p.add_argument("--no-history", action="store_true", help="leave the history trends out")
    p.add_argument("--title", default="perfgate report", help="the page title")
    p.add_argument("--markdown", metavar="FILE", help="also write the short Markdown summary here ('-': stdout; "
                   "in GitHub Actions pass $GITHUB_STEP_SUMMARY)")
    p.add_argument("--link", action="append", default=[], metavar="NAME=URL",
                   help="artifact link for the Markdown summary (repeatable; default: the HTML report and the run files)")


def write_text_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one (same scheme as perfgate.gate.store.atomic_write_json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report is meant to be shared
        with os.fdopen(fd, "w", encoding="utf8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _links(args: argparse.Namespace) -> dict[str, str]:
    from perfgate.cli import CommandError

    if not args.link:
        return {"HTML report": args.output, **{Path(r).name: r for r in args.runs}}
    links = {}
    for item in args.link:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise CommandError(f"--link {item!r}: write NAME=URL, e.g. --link 'HTML report=https://…/report.html'")
        links[name] = url
    return links


def run(args: argparse.Namespace) -> int:
    from perfgate import report
    from perfgate.cli import CommandError
    from perfgate.history import RunError, load_run

    links = _links(args)
    try:
        runs = [load_run(p) for p in args.runs]
    except RunError as exc:
        raise CommandError(f"{exc}; pass the file pytest wrote with --benchmark-json") from None
    try:
        verdicts = report.load_verdicts(args.verdicts) if args.verdicts else None
    except report.ReportError as exc:
        raise CommandError(str(exc)) from None
    history, unreadable = (None, [])
    if not args.no_history:
        history, unreadable = report.history_for(runs, baselines_root=args.baselines,
                                                 storage_dirs=args.storage if args.storage is not None else [".benchmarks"])
        for line in unreadable:
            print(f"perfgate report: history skipped {line}", file=sys.stderr)
    out = Path(args.output)
    write_text_atomic(out, report.render_html(runs, verdicts, history, title=args.title, unreadable=unreadable))
    print(f"perfgate report: wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {sum(len(r.benchmarks) for r in runs)} case(s))",
          file=sys.stderr)
    if args.markdown:
        md = report.markdown_summary(runs, verdicts, links)
        if args.markdown == "-":
            sys.stdout.write(md)
        else:
            path = Path(args.markdown)
            # $GITHUB_STEP_SUMMARY is appended to, as GitHub documents; any other file is replaced.
            if os.environ.get("GITHUB_STEP_SUMMARY") == args.markdown:
                with path.open("a", encoding="utf8") as fh:
                    fh.write(md)
            else:
                write_text_atomic(path, md)
    return 0
