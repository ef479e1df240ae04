"""`perfgate bisect GOOD BAD --case ID`: the first commit that made one case slower, by A/B verdicts."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from perfgate.commands import CommandError

HELP = "find the first commit between GOOD and BAD that regressed one case (git bisect run on A/B verdicts)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("good", help="a revision where the case was fast")
    p.add_argument("bad", help="a later revision where it is slow")
    p.add_argument("--case", required=True, help="the case id, e.g. owl-world-model-tiny-baseline")
    p.add_argument(
        "--mode",
        choices=("interleaved", "processes"),
        default="interleaved",
        help="interleaved: each commit's model code against GOOD's in one process, with this perfgate as the "
        "harness (default); processes: whole revisions, each with its own harness",
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")


def run(args: argparse.Namespace) -> int:
    from perfgate.ab import run as ab_run

    try:
        repo = Path(ab_run.git(Path.cwd(), "rev-parse", "--show-toplevel"))
        if ab_run.git(repo, "status", "--porcelain", "--untracked-files=no"):
            raise CommandError(
                "the working tree has uncommitted changes; commit or stash them first (git bisect checks out commits)"
            )
        good = ab_run.git(repo, "rev-parse", "--verify", f"{args.good}^{{commit}}")
        bad = ab_run.git(repo, "rev-parse", "--verify", f"{args.bad}^{{commit}}")
    except ab_run.ABError as exc:
        raise CommandError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="perfgate-bisect-") as tmp:
        # This perfgate judges every commit: the commits being bisected may predate `perfgate ab`.
        harness = Path(tmp) / "harness"
        copy_harness(Path(__file__).resolve().parents[1], harness / "perfgate")
        log = Path(tmp) / "commits.log"
        judge_commit = [
            sys.executable,
            "-c",
            "import sys; from perfgate.commands.bisect import judge_commit; sys.exit(judge_commit())",
            "--good",
            good,
            "--case",
            args.case,
            "--mode",
            args.mode,
            "--harness",
            str(harness),
            "--log",
            str(log),
            *(["--device", args.device] if args.device else []),
        ]
        env_path = f"PYTHONPATH={harness}"
        try:
            ab_run.git(repo, "bisect", "start", bad, good)
            r = subprocess.run(
                ["env", env_path, "git", "bisect", "run", *judge_commit], cwd=repo, capture_output=True, text=True
            )
        finally:
            subprocess.run(["git", "bisect", "reset"], cwd=repo, capture_output=True)
        first = next((line for line in r.stdout.splitlines() if "is the first bad commit" in line), None)
        evidence = log.read_text(encoding="utf8") if log.is_file() else ""
    print(evidence.rstrip())
    if first is None:
        tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
        raise CommandError("git bisect found no first bad commit: " + " / ".join(tail), code=1)
    print(f"perfgate bisect: {first.strip()} ({args.case})")
    return 0


def copy_harness(package: Path, dest: Path) -> None:
    """This perfgate copied to `dest`: the harness that judges every commit. The model families live
    in the repository's top-level models/, which `git bisect` checks out at each commit and the
    judgement imports from there (its working directory)."""
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("__pycache__"))


def judge_commit(argv: list[str] | None = None) -> int:
    """One commit of the bisection, as `git bisect run` starts it (its exit code is git's answer)."""
    from perfgate.ab.bisect_commit import judge

    p = argparse.ArgumentParser(prog="perfgate bisect (one commit)")
    p.add_argument("--good", required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--mode", choices=("interleaved", "processes"), default="interleaved")
    p.add_argument("--harness", type=Path, default=None)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--device", default=None)
    a = p.parse_args(argv)
    return judge(good=a.good, case=a.case, log=a.log, mode=a.mode, harness=a.harness, device=a.device)
