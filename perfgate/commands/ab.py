"""`perfgate ab`: the pull-request gate without a stored baseline: base and head in one job."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType

from perfgate.commands import CommandError
from perfgate.exitcodes import FAILED as EXIT_REGRESSION

HELP = "compare two revisions in one job (alternating fresh processes, a paired verdict per case)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base",
        default=None,
        help="base revision (default: the merge base of HEAD with origin/main, upstream/main or main)",
    )
    p.add_argument(
        "--head", default=None, help="head revision (default: the working tree, uncommitted changes included)"
    )
    p.add_argument(
        "--mode",
        choices=("auto", "interleaved", "processes"),
        default="auto",
        help="interleaved: both revisions' model code in each process, round by round (model changes only); "
        "processes: whole revisions in alternating fresh processes (any change); auto: interleaved when only "
        "model files changed (default)",
    )
    p.add_argument(
        "--max-pairs", type=int, default=12, help="processes mode: process pairs per case at most (default 12)"
    )
    p.add_argument("--max-processes", type=int, default=6, help="interleaved mode: processes at most (default 6)")
    p.add_argument(
        "--base-python",
        default=None,
        metavar="PYTHON",
        help="processes mode: the base side's interpreter, an environment installed from the base's locks (for a "
        "change to requirements/; default: this Python for both sides)",
    )
    p.add_argument(
        "--budget-s", type=float, default=1800.0, help="wall-time budget of the whole comparison, s (default 1800)"
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the random pair order (default: random)")
    p.add_argument("--json", type=Path, default=None, help="also write the verdicts and the per-pair figures here")
    p.add_argument(
        "--markdown", type=Path, default=None, help="also write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)"
    )
    p.add_argument("--ratchet", action="store_true", help="fail on an improvement too")
    p.add_argument(
        "--counts",
        action="store_true",
        help="the CPU gate on instruction counts: the head counted once and judged against the counts kept for "
        "the base in the history store (--store), else against the base counted here; default selection "
        "--perfgate-device cpu --perfgate-tier cpu-pr (docs/instructions.md)",
    )
    p.add_argument(
        "--store",
        action="append",
        default=None,
        metavar="DIR",
        help="--counts: the history store (a worktree of perfgate-history; default .perfgate/history or "
        "[tool.perfgate] history_store, when it exists)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="--counts: keep each side's results.json and verdicts.json (base/, head/) and the count baselines "
        "judged against (baselines/) here (default: a temporary folder)",
    )
    p.add_argument(
        "--show-unchanged",
        action="store_true",
        help="list the unchanged verdicts with their reasons too (default: counts)",
    )
    p.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help="after --: the selection both sides run, e.g. -- --perfgate-models owl-world-model "
        "--perfgate-variants baseline",
    )


def run(args: argparse.Namespace) -> int:
    from perfgate import files, gate
    from perfgate.ab import run as ab_run
    from perfgate.gate import policy as policy_mod
    from perfgate.gate.paired import MIN_PAIRS
    from perfgate.measure.device import selection_device
    from perfgate.output import markdown
    from perfgate.output.terminal import verdict_table

    if args.counts:
        return run_counts(args)
    if args.max_pairs < MIN_PAIRS:
        raise CommandError(f"--max-pairs {args.max_pairs}: at least {MIN_PAIRS} pairs are needed to judge")
    if args.base is not None and not args.base.strip():
        # a script's empty variable, which would otherwise compare against the merge base unsaid
        raise CommandError("--base is empty: give a revision, or leave --base out for the merge base with main")
    selection = [a for a in args.pytest_args if a != "--"]
    try:
        repo = Path(ab_run.git(Path.cwd(), "rev-parse", "--show-toplevel"))
        policy = policy_mod.load(repo / "pyproject.toml")
        base = ab_run.checkout(repo, args.base if args.base is not None else ab_run.default_base(repo), "base")
        if args.base_python:
            base = replace(base, python=base_python(args.base_python))
        head = ab_run.checkout(repo, args.head, "head") if args.head else ab_run.working_tree(repo)
        head_cases, base_cases = ab_run.collect(head, selection), ab_run.collect(base, selection)
    except (ab_run.ABError, policy_mod.PolicyError) as exc:
        raise CommandError(str(exc)) from None
    common = [c for c in head_cases if c in set(base_cases)]

    def progress(msg: str) -> None:
        print(f"perfgate ab: {msg}", file=sys.stderr, flush=True)

    mode, why = args.mode, "chosen with --mode"
    if args.base_python and mode == "interleaved":
        raise CommandError("--base-python needs --mode processes: an interleaved process holds both revisions")
    if args.base_python:
        mode, why = "processes", "the base has its own Python (--base-python)"
    if mode == "auto":
        try:
            mode, why = ab_run.choose_mode(
                repo, base.label.rsplit("(", 1)[1].rstrip(")"), args.head, family_files(repo)
            )
        except ab_run.ABError as exc:
            raise CommandError(str(exc)) from None
    progress(f"base {base.label}, head {head.label}: {len(common)} case(s) in both; mode {mode} ({why})")
    try:
        env_note = ab_run.environment_note(repo, base.sha, args.head, base, head)
    except ab_run.ABError as exc:
        raise CommandError(str(exc)) from None
    if env_note:
        progress(env_note)
    with _told_to_stop() as told:
        try:
            if mode == "interleaved":
                result = ab_run.run_interleaved(
                    base,
                    head,
                    common,
                    policy,
                    max_processes=args.max_processes,
                    budget_s=args.budget_s,
                    device=selection_device(selection),
                    progress=progress,
                    told_to_stop=told,
                )
            else:
                result = ab_run.run_ab(
                    base,
                    head,
                    common,
                    policy,
                    measure_fn=ab_run.counting_once(selection),
                    max_pairs=args.max_pairs,
                    budget_s=args.budget_s,
                    seed=args.seed,
                    progress=progress,
                    told_to_stop=told,
                )
        except ab_run.ABError as exc:
            raise CommandError(str(exc)) from None
    result.notes += [env_note] if env_note else []
    result.new += [c for c in head_cases if c not in set(base_cases)]
    result.removed = [c for c in base_cases if c not in set(head_cases)]
    verdicts = gate.sort_verdicts(result.verdicts)
    print("\n".join(verdict_table(verdicts, show_unchanged=args.show_unchanged)))
    for label, ids in (
        ("new (head only)", result.new),
        ("removed (base only)", result.removed),
        ("skipped in both", result.skipped),
    ):
        if ids:
            print(f"{label}: {', '.join(ids)}")
    print(f"perfgate ab: {result.processes} processes in {result.wall_s:.0f} s; base {result.base}, head {result.head}")
    if args.json:
        files.write_json(args.json, ab_run.result_json(result, verdicts))
    if args.markdown:
        files.write_text(args.markdown, markdown.ab_summary(result, verdicts))
    return EXIT_REGRESSION if gate.failing(verdicts, fail_on_improvement=args.ratchet) else 0


@contextmanager
def _told_to_stop() -> Iterator[Callable[[], str | None]]:
    """SIGTERM noted instead of ending the process, while inside: a CI step's time limit (or
    `timeout`) sends it, to the processes being measured too, and the comparison then stops and still
    writes what it decided instead of dying with nothing written. Yields why it was told to stop
    (None until it is)."""
    said: list[str] = []

    def note(signum: int, frame: FrameType | None) -> None:
        said.append(f"stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, note)
    try:
        yield lambda: said[0] if said else None
    finally:
        signal.signal(signal.SIGTERM, previous)


def base_python(path: str) -> str:
    """--base-python checked before anything runs: an interpreter that starts and has pytest."""
    import subprocess

    try:
        r = subprocess.run([path, "-c", "import pytest"], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        raise CommandError(f"--base-python {path}: cannot run it ({exc.strerror}); name a Python executable") from None
    if r.returncode:
        raise CommandError(f"--base-python {path}: `import pytest` failed there; install the base's locks into it")
    # A path, made absolute: the base's processes start in its worktree. Not resolved: a venv's python
    # is a link out of the venv, and only through the link does it find the venv's packages.
    return os.path.abspath(path) if os.sep in path else path


def family_files(repo: Path) -> set[str]:
    """The model family files of the head's registries, relative to the repository."""
    import importlib.util

    from perfgate.cases.workload import MODELS
    from perfgate.commands import load_models

    load_models()
    out = set()
    for spec in MODELS.values():
        found = importlib.util.find_spec(spec.module)
        if found is not None and found.origin:
            try:
                out.add(str(Path(found.origin).resolve().relative_to(repo.resolve())))
            except ValueError:  # a family installed elsewhere: not this repository's change
                continue
    return out


def run_counts(args: argparse.Namespace) -> int:
    """`perfgate ab --counts` (perfgate.ab.counts): which base path, the verdicts, the exit code."""
    import tempfile

    from perfgate import files, gate
    from perfgate.ab import counts as ab_counts
    from perfgate.ab import run as ab_run
    from perfgate.history.store import StoreError, configured_store, kept_counts
    from perfgate.output import markdown
    from perfgate.output.terminal import verdict_table

    if args.head:
        raise CommandError("--counts measures the working tree as the head; leave out --head")
    selection = ab_counts.selection_of([a for a in args.pytest_args if a != "--"])
    try:
        repo = Path(ab_run.git(Path.cwd(), "rev-parse", "--show-toplevel"))
        base_sha = ab_run.git(repo, "rev-parse", "--verify", f"{args.base or ab_run.default_base(repo)}^{{commit}}")
        stores = args.store or configured_store(repo / "pyproject.toml") or [str(repo / ".perfgate" / "history")]
        missing = [s for s in args.store or [] if not Path(s).is_dir()]
        if missing:
            raise CommandError(f"--store {missing[0]}: no such folder; give a worktree of perfgate-history")
        kept = kept_counts([s for s in stores if Path(s).is_dir()], base_sha)
        head = ab_run.working_tree(repo)
        with tempfile.TemporaryDirectory(prefix="perfgate-ab-counts-") as tmp:
            result = ab_counts.run_counts(
                head,
                base_sha,
                lambda: ab_run.checkout(repo, base_sha, "base"),
                kept,
                selection,
                args.out.resolve() if args.out else Path(tmp),
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )
    except (ab_run.ABError, StoreError) as exc:
        raise CommandError(str(exc)) from None
    verdicts = gate.sort_verdicts(result.verdicts)
    print(result.line)
    print("\n".join(verdict_table(verdicts, show_unchanged=args.show_unchanged)))
    took = [
        f"{side} {what} {seconds:.0f} s"
        for side, what, seconds in (
            ("base", "count pass" + (" (main's run)" if result.path == ab_counts.KEPT else ""), result.base_pass_s),
            ("base", "process", result.base_process_s),
            ("head", "count pass", result.head_pass_s),
            ("head", "process", result.head_process_s),
        )
        if seconds is not None
    ]
    print(f"perfgate ab --counts: key {result.key}; {', '.join(took)}; head {head.label}")
    if args.json:
        files.write_json(args.json, result.as_json())
    if args.markdown:
        files.write_text(args.markdown, markdown.counts_summary(result, verdicts))
    if args.ratchet and gate.failing(verdicts, fail_on_improvement=True):
        return EXIT_REGRESSION
    return result.rc
