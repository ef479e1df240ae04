"""`perfgate report`: one self-contained HTML file (and optionally Markdown) from result JSON files."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Where saved runs for the history live: the plugin's pytest-benchmark storage, then pytest-benchmark's own default.
STORAGE_DIRS = [".perfgate/benchmarks", ".benchmarks"]
HELP = "write a self-contained HTML report (tables, plots, history, telemetry) of result JSON files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN.json",
        help="pytest-benchmark JSON files (--benchmark-json, baselines); none: the newest saved run of this "
        "machine's fingerprint, else of every recorded fingerprint",
    )
    p.add_argument(
        "--site",
        metavar="DIR",
        help="write the static history dashboard of every saved run here instead (index.html, one page per model)",
    )
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--verdicts", metavar="FILE", help="the gate's verdicts (pytest writes .perfgate/verdicts.json)")
    p.add_argument(
        "--baselines",
        default="baselines",
        metavar="DIR",
        help="baseline folder for the history trends and the dashboard's baselines (default baselines)",
    )
    p.add_argument(
        "--storage",
        action="append",
        default=None,
        metavar="DIR",
        help="pytest-benchmark storage folders for the history (default .perfgate/benchmarks, where the plugin "
        "points --benchmark-save/--benchmark-autosave, and .benchmarks)",
    )
    p.add_argument("--no-history", action="store_true", help="leave the history trends out")
    p.add_argument(
        "--pyproject",
        default=None,
        metavar="FILE",
        help="where the history's accepted_changes (intended steps), history_store and the gate's tolerances are "
        "read (a file that must exist; default ./pyproject.toml, none when it is absent)",
    )
    from perfgate.commands.history import add_store_argument

    add_store_argument(p)
    p.add_argument("--device", default=None, help="no RUN.json: this machine's fingerprint for this device")
    p.add_argument("--fingerprint", default=None, metavar="ID", help="no RUN.json: this fingerprint's newest run")
    p.add_argument("--all-fingerprints", action="store_true", help="no RUN.json: every fingerprint's newest run")
    p.add_argument("--title", default="perfgate report", help="the page title")
    p.add_argument(
        "--commit-url",
        default="",
        metavar="TEMPLATE",
        help="--site: a commit's https address with one {commit} field, e.g. "
        "https://github.com/OWNER/REPO/commit/{commit} (any other is refused: the dashboard links https only)",
    )
    p.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the short Markdown summary here ('-': stdout; in GitHub Actions pass $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="artifact link for the Markdown summary (repeatable; default: the HTML report and the run files)",
    )


def _links(args: argparse.Namespace) -> dict[str, str]:
    from perfgate.commands import CommandError

    if not args.link:
        return {"HTML report": args.output, **{Path(r).name: r for r in args.runs}}
    links = {}
    for item in args.link:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise CommandError(f"--link {item!r}: write NAME=URL, e.g. --link 'HTML report=https://…/report.html'")
        links[name] = url
    return links


def _write_markdown(target: str, md: str) -> None:
    from perfgate import files

    if target == "-":
        sys.stdout.write(md)
    elif os.environ.get("GITHUB_STEP_SUMMARY") == target:  # appended to, as GitHub documents
        try:
            with Path(target).open("a", encoding="utf8") as fh:
                fh.write(md)
        except OSError as exc:
            raise files.WriteError(Path(target), exc) from None
    else:
        files.write_text(target, md)


def run(args: argparse.Namespace) -> int:
    from perfgate import files
    from perfgate.commands import CommandError, project_file
    from perfgate.commands.history import storage_dirs
    from perfgate.gate.verdict_file import load_verdicts
    from perfgate.history.runs import load_run
    from perfgate.output import html, markdown
    from perfgate.output.report_data import history_for
    from perfgate.results import ResultFileError

    args.pyproject = project_file(args.pyproject)
    storage = storage_dirs(args, STORAGE_DIRS)
    if args.site:
        from perfgate.commands._site import write_site

        return write_site(args, storage)
    if not args.runs:
        args.runs = _saved_runs(args, storage)
    links = _links(args)
    for target in (args.output, args.markdown):
        if target:
            files.check_target(target)
    try:
        runs = [load_run(p) for p in args.runs]
    except ResultFileError as exc:
        raise CommandError(f"{exc}; pass the file pytest wrote with --benchmark-json") from None
    try:
        verdicts = load_verdicts(args.verdicts) if args.verdicts else None
    except ResultFileError as exc:
        raise CommandError(str(exc)) from None
    # The Markdown first: a pull request gets its summary even if drawing the HTML fails.
    if args.markdown:
        _write_markdown(args.markdown, markdown.job_summary(runs, verdicts, links, policy=_policy(args.pyproject)))
    history, unreadable, accepted = (None, [], ())
    if not args.no_history:
        from perfgate.history.changepoints import AcceptedChangeError, load_accepted

        try:
            accepted = load_accepted(args.pyproject)
        except AcceptedChangeError as exc:
            raise CommandError(str(exc)) from None
        history, unreadable = history_for(
            runs,
            baselines_root=args.baselines,
            storage_dirs=storage,
        )
        for line in unreadable:
            print(f"perfgate report: history skipped {line}", file=sys.stderr)
    out = files.write_text(
        args.output,
        html.benchmark_report(
            runs, verdicts, history, title=args.title, unreadable=unreadable, accepted_changes=accepted
        ),
    )
    print(
        f"perfgate report: wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {sum(len(r.benchmarks) for r in runs)} "
        "case(s))",
        file=sys.stderr,
    )
    return 0


def _saved_runs(args: argparse.Namespace, storage: list[str]) -> list[str]:
    """No RUN.json named: the newest saved run of this machine's fingerprint, else of every
    recorded one, with the one line saying so (perfgate.history.scope)."""
    from perfgate.commands import CommandError
    from perfgate.commands.history import auto_scope
    from perfgate.history.runs import gather
    from perfgate.history.scope import newest_per_fingerprint

    scope = auto_scope(args, storage)
    g = gather(baselines_root=args.baselines, fingerprint_id=scope.fingerprint_id, storage_dirs=storage)
    chosen = newest_per_fingerprint(g.runs, scope.fingerprint_id)
    if not chosen:
        raise CommandError(
            f"no saved run in {args.baselines} or {', '.join(storage)}; pass RUN.json files "
            "(pytest --benchmark-json FILE) or record one with: pytest benchmarks --perfgate-record"
        )
    if scope.note:
        print(f"perfgate report: {scope.note}", file=sys.stderr)
    print(
        f"perfgate report: the newest saved run of {len(chosen)} fingerprint(s): {', '.join(r.path for r in chosen)}",
        file=sys.stderr,
    )
    return [r.path for r in chosen]


def _policy(pyproject: str | Path) -> object:
    """The gate's policy for the tolerances the Markdown prints beside each change; None (no
    tolerance printed) where the pyproject cannot be read: the summary must still be written."""
    from perfgate.gate.policy import PolicyError, load

    try:
        return load(pyproject)
    except PolicyError:
        return None
