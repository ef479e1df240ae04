"""`perfgate ab`: measure the base and the head revision in one job, in alternating fresh processes.

The base revision is checked out into a git worktree of its own (`.perfgate/ab/worktrees/<sha>`);
the head is the working tree unless `--head` names another revision. Each side runs entirely on
its own code, harness included: `python -m pytest benchmarks` with the side's folder first on
`PYTHONPATH` and as working directory, so a change to the harness is measured too (a slower
harness shows as a slower case, as users would see it). Each side keeps its own inductor cache
(`.perfgate/ab/inductor/<sha>`), so compiled artifacts of one revision never serve the other
(in interleaved mode one process holds both sides' model code and compiles into the head's).

Pairs of processes (one per side, in random order) run the cases not yet decided; after each pair
the gate (`perfgate.ab.verdicts`) decides what it can, and a case leaves the schedule once its verdict
is clear. Budgets bound the pairs and the wall time.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.ab import verdicts as ab
from perfgate.ab.job import CaseResult, Job, NotMeasured, RanAlone, ResultsError, blame, read_results
from perfgate.counts.suite import NO_COUNTS_ENV
from perfgate.gate.policy import Policy
from perfgate.gate.verdict_file import load_verdicts
from perfgate.gate.verdicts import ERROR, INCONCLUSIVE, Verdict
from perfgate.record import CaseRecord
from perfgate.results import ResultFileError, load_records

TEST_FILE = "benchmarks/test_models.py"


class ABError(ValueError):
    """Bad input for an A/B run (a revision git cannot resolve, a dirty tree to bisect ...): one line."""


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if r.returncode:
        raise ABError(f"git {' '.join(args)}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'failed'}")
    return r.stdout.strip()


def default_base(repo: Path) -> str:
    """The merge base of HEAD with the upstream main (origin/main, upstream/main, else main)."""
    for ref in ("origin/main", "upstream/main", "main"):
        if subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=repo, capture_output=True).returncode == 0:
            return git(repo, "merge-base", "HEAD", ref)
    raise ABError("no upstream main to compare with (origin/main, upstream/main or main): name one with --base REF")


@dataclass(frozen=True, kw_only=True)
class Side:
    name: str  # "base" or "head"
    label: str  # the revision as given, with its short sha
    sha: str  # the commit (the working tree: the commit it is on)
    root: Path  # the checkout its processes run in
    cache: Path  # its own inductor cache
    python: str = sys.executable  # the interpreter of its processes: its environment (torch, torchao, the pins)


def checkout(repo: Path, ref: str, name: str) -> Side:
    """A side at `ref` in a worktree of its own (reused when the same commit was checked out before)."""
    sha = git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    root = repo / ".perfgate" / "ab" / "worktrees" / sha[:12]
    if not (root / ".git").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        git(repo, "worktree", "add", "--detach", "--force", str(root), sha)
    return Side(
        name=name,
        label=f"{ref} ({sha[:10]})",
        sha=sha,
        root=root,
        cache=repo / ".perfgate" / "ab" / "inductor" / sha[:12],
    )


def working_tree_cache(repo: Path) -> Path:
    """The working tree side's inductor cache: where a later run of the head finds its compiled artifacts."""
    return repo / ".perfgate" / "ab" / "inductor" / "working-tree"


def working_tree(repo: Path) -> Side:
    dirty = " with uncommitted changes" if git(repo, "status", "--porcelain", "--untracked-files=no") else ""
    sha = git(repo, "rev-parse", "HEAD")
    return Side(
        name="head",
        label=f"working tree at {sha[:10]}{dirty}",
        sha=sha,
        root=repo,
        cache=working_tree_cache(repo),
    )


def side_env(side: Side, extra: dict[str, str] | None = None, harness: Path | None = None) -> dict[str, str]:
    """The environment of a side's processes: its checkout first on the path (after `harness`, a
    perfgate to run instead of the side's own, as `perfgate bisect` does for old commits)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "GITHUB_STEP_SUMMARY"))}
    paths = [str(harness)] if harness else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(side.root), *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **(extra or {})}


COLLECT_TIMEOUT_S = 600


def collect(side: Side, selection: Sequence[str]) -> list[str]:
    """The case ids the side's suite would run for `selection` (skipped ones included)."""
    try:
        r = subprocess.run(
            [side.python, "-m", "pytest", "benchmarks", "--collect-only", "-q", "-p", "no:cacheprovider", *selection],
            cwd=side.root,
            env=side_env(side),
            capture_output=True,
            text=True,
            timeout=COLLECT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ABError(f"{side.name} ({side.label}): collecting the cases ran past {COLLECT_TIMEOUT_S} s") from None
    ids = [line.split("[", 1)[1].rstrip("]") for line in r.stdout.splitlines() if "::test_step[" in line]
    if r.returncode not in (0, 5) or (r.returncode == 5 and not ids):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ABError(f"{side.name} ({side.label}): collecting the cases failed: {tail[0]}")
    return ids


@dataclass(frozen=True, kw_only=True)
class SideRun:
    """What one fresh process of a side made of its cases: the records of those it measured, why it
    skipped the others it could not run here, and why the rest failed (an error verdict, or a crash
    before any was written). A case in none of them was not reached."""

    records: dict[str, CaseRecord] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def measure(
    side: Side,
    case_ids: Sequence[str],
    selection: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 3600,
) -> SideRun:
    """One fresh process of `side` measuring `case_ids`."""
    with tempfile.TemporaryDirectory(prefix=f"perfgate-ab-{side.name}-") as tmp:
        out, verdicts = Path(tmp) / "results.json", Path(tmp) / "verdicts.json"
        nodes = [f"{TEST_FILE}::test_step[{c}]" for c in case_ids]
        cmd = [
            side.python,
            "-m",
            "pytest",
            *nodes,
            "-q",
            "-p",
            "no:cacheprovider",
            "--perfgate-no-gate",
            "--benchmark-json",
            str(out),
            "--perfgate-verdicts",
            str(verdicts),
            "--perfgate-inductor-cache",
            str(side.cache),
            *selection,
        ]
        env = side_env(side, env)
        try:
            r = subprocess.run(cmd, cwd=side.root, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:  # killed: it wrote nothing; the side's failure, not the whole A/B's
            why = f"{side.name} process ran past {timeout_s:g} s and was stopped"
            return SideRun(failed=dict.fromkeys(case_ids, why))
        try:
            records = load_records(out, samples=True) if out.is_file() else {}
            said = load_verdicts(verdicts) if verdicts.is_file() else None
        except ResultFileError as exc:  # a file cut short: the side's failure, said as such (its folder is gone)
            why = f"{side.name} process wrote an unreadable {Path(exc.path).name}: {exc.problem}"
            return SideRun(failed={c: why for c in case_ids})
    skipped = dict(said.skipped) if said else {}
    errors = {
        v.case.split("[", 1)[-1].rstrip("]"): v.message for v in (said.verdicts if said else ()) if v.verdict == ERROR
    }
    tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
    failed = {
        c: errors.get(c) or f"{side.name} process (exit {r.returncode}) left no result for it: {tail[0]}"
        for c in case_ids
        if c not in records and c not in skipped
    }
    return SideRun(records=records, skipped=skipped, failed=failed)


def counting_once(selection: Sequence[str]) -> Callable[[Side, Sequence[str]], SideRun]:
    """`measure` for run_ab where each side's first process counts instructions (when its
    [tool.perfgate.counts] asks) and later ones do not: counts need no pairs (perfgate.counts)."""
    counted: set[str] = set()

    def measure_side(side: Side, case_ids: Sequence[str]) -> SideRun:
        env = {NO_COUNTS_ENV: "1"} if side.name in counted else None
        counted.add(side.name)
        return measure(side, case_ids, selection, env=env)

    return measure_side


@dataclass(kw_only=True)
class ABResult:
    base: str
    head: str
    verdicts: list[Verdict] = field(default_factory=list)
    pairs: dict[str, list[ab.Pair]] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)  # cases only the head has
    removed: list[str] = field(default_factory=list)  # cases only the base has
    skipped: list[str] = field(default_factory=list)  # measured by neither side (an unavailable variant)
    # case -> why a side's process failed it (interleaved mode: the base's code, BASE_FAILURES times)
    failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the comparison could not measure, said above its verdicts
    interleaved: dict[str, list[CaseResult]] = field(default_factory=dict)  # interleaved mode: per-process results
    mode: str = "processes"
    processes: int = 0
    wall_s: float = 0.0
    stopped: str | None = None  # why the budget stopped it with cases undecided (_past_budget)


Measure = Callable[[Side, Sequence[str]], SideRun]


def run_ab(
    base: Side,
    head: Side,
    cases: Sequence[str],
    policy: Policy,
    *,
    measure_fn: Measure,
    max_pairs: int = 12,
    budget_s: float = 3600.0,
    seed: int | None = None,
    progress: Callable[[str], None] | None = None,
    told_to_stop: Callable[[], str | None] = lambda: None,
) -> ABResult:
    """Pairs of processes, in random order, until every case is decided, a budget runs out or it is
    told to stop (`told_to_stop` says why: a signal, perfgate.commands.ab): a pair cut short by that
    is dropped, not read as its processes' failures, and what the earlier pairs decided is kept."""
    rng = random.Random(seed)
    result = ABResult(base=base.label, head=head.label, pairs={c: [] for c in cases})
    undecided = list(cases)
    base_failed: dict[str, list[str]] = {}  # case -> why the base's process failed it, pair by pair
    t0, last_s = time.perf_counter(), 0.0
    for i in range(max_pairs):
        if not undecided:
            break
        if (why := told_to_stop() or _past_budget(t0, last_s, budget_s, "pair")) is not None:
            _stopped(result, why, progress, f"after {i} pair(s); {len(undecided)} case(s) undecided")
            break
        started = time.perf_counter()
        order = [base, head] if rng.random() < 0.5 else [head, base]
        got = {s.name: measure_fn(s, undecided) for s in order}
        last_s = time.perf_counter() - started
        result.processes += 2
        if (why := told_to_stop()) is not None:  # its processes were killed with it: nothing to read
            _stopped(result, why, progress, f"during pair {i + 1}: that pair dropped; {len(undecided)} undecided")
            break
        for case in list(undecided):
            failed = [f"{name}: {run.failed[case]}" for name, run in got.items() if case in run.failed]
            if failed and case not in got["head"].failed and case in got["head"].records:
                # The base's alone, the head measured it: the change fixed it, or the base's process met
                # trouble of its own (killed, out of memory). Measured again in the next pair; failed in
                # BASE_FAILURES pairs, nothing to compare, and not the change's failure.
                if _base_failed_again(result, base_failed, case, got["base"].failed[case]):
                    undecided.remove(case)
                continue
            if failed:  # an error in the head's process: said, never read as a skip
                result.failed[case] = "; ".join(failed)
                result.verdicts.append(
                    Verdict(case=_fullname(case), metric="run", verdict=ERROR, message=result.failed[case])
                )
                undecided.remove(case)
                continue
            b, h = got["base"].records.get(case), got["head"].records.get(case)
            if b is None and h is None and not result.pairs[case] and all(case in r.skipped for r in got.values()):
                result.skipped.append(case)  # a variant neither side can run here: nothing to compare
                undecided.remove(case)
                continue
            if b is None or h is None:
                continue
            result.pairs[case].append(ab.Pair(base=b, head=h))
            decided = ab.verdicts(_fullname(case), result.pairs[case], policy, final=False)
            if decided is not None:
                result.verdicts += decided
                undecided.remove(case)
                if progress:
                    progress(
                        f"{case}: {decided[0].verdict} after {len(result.pairs[case])} pair(s): {decided[0].message}"
                    )
        if progress:
            progress(
                f"pair {i + 1}/{max_pairs} ({'-'.join(s.name for s in order)}): {len(undecided)} case(s) undecided, "
                f"{time.perf_counter() - t0:.0f} s"
            )
    for case in undecided:
        if not result.pairs[case] and case in base_failed:
            result.verdicts.append(_base_failed(case, base_failed[case], result.mode))
            continue
        final = ab.verdicts(_fullname(case), result.pairs[case], policy, final=True)
        result.verdicts += final or [
            Verdict(case=_fullname(case), metric="latency", verdict=INCONCLUSIVE, message="not measured")
        ]
    result.wall_s = time.perf_counter() - t0
    return result


def _stopped(result: ABResult, why: str, progress: Callable[[str], None] | None, when: str) -> None:
    result.stopped = why
    if progress:
        progress(f"{why} {when}")


def _past_budget(t0: float, last_s: float, budget_s: float, what: str) -> str | None:
    """Why another pair (or process) is not started, or None: the budget is spent, or the next would
    end past it if it takes as long as the last one did (the budget is checked between them, and a
    caller's own time limit, such as a CI step's, kills one that overruns with nothing written)."""
    elapsed = time.perf_counter() - t0
    if elapsed > budget_s:
        return f"budget of {budget_s:g} s spent"
    if elapsed + last_s > budget_s:
        return f"budget of {budget_s:g} s: another {what} (the last took {last_s:.0f} s) would end past it"
    return None


BASE_FAILURES = 2  # pairs (or interleaved processes) in which only the base failed a case before it is left uncompared


def _base_failed_again(result: ABResult, base_failed: dict[str, list[str]], case: str, why: str) -> bool:
    """Note that only the base's code failed `case` once more; True (its verdict given) once that
    happened BASE_FAILURES times."""
    base_failed.setdefault(case, []).append(why)
    if len(base_failed[case]) < BASE_FAILURES:
        return False
    result.failed[case] = f"base: {why}"
    result.verdicts.append(_base_failed(case, base_failed[case], result.mode))
    return True


def _base_failed(case: str, why: Sequence[str], mode: str) -> Verdict:
    times = f"{len(why)} process(es)" if mode == "interleaved" else f"{len(why)} pair(s)"
    return Verdict(
        case=_fullname(case),
        metric="run",
        verdict=INCONCLUSIVE,
        message=f"base failed it in {times} ({why[-1]}); the head ran it: nothing to compare",
    )


def _fullname(case_id: str) -> str:
    return f"{TEST_FILE}::test_step[{case_id}]"


def result_json(result: ABResult, verdicts: Sequence[Verdict]) -> dict:
    """The verdicts and, per case, each pair's per-process figures (what the verdict rests on)."""

    def fig(r: CaseRecord) -> dict:
        return {
            "median_ms": r.median_ms,
            "normalised_median": r.normalised_median,
            "peak_mem_mib": r.peak_mem_mib,
            "device_ms_per_step": r.device_ms_per_step,
            "kernels_per_step": r.kernels_per_step,
            "unreliable": r.unreliable,
        }

    return {
        "base": result.base,
        "head": result.head,
        "processes": result.processes,
        "wall_s": result.wall_s,
        "stopped": result.stopped,
        "new": result.new,
        "removed": result.removed,
        "skipped": result.skipped,
        "notes": result.notes,
        "verdicts": [v.as_dict() for v in verdicts],
        "pairs": {
            case: [{"base": fig(p.base), "head": fig(p.head)} for p in pairs]
            for case, pairs in result.pairs.items()
            if pairs
        },
        # interleaved mode: each worker process's row (its rounds' ratio, each side's device-time blocks)
        "interleaved": {case: [row.to_json() for row in rows] for case, rows in result.interleaved.items() if rows},
    }


def run_interleaved(
    base: Side,
    head: Side,
    cases: Sequence[str],
    policy: Policy,
    *,
    max_processes: int = 6,
    budget_s: float = 3600.0,
    case_budget_s: float = 3.0,
    device: str | None = None,
    env: dict[str, str] | None = None,
    harness: Path | None = None,
    progress: Callable[[str], None] | None = None,
    told_to_stop: Callable[[], str | None] = lambda: None,
) -> ABResult:
    """Interleaved mode: fresh processes of the head's checkout, each measuring both revisions' model
    code round by round (perfgate.ab.interleave), until every case is decided, a budget runs out or
    it is told to stop (as `run_ab`: the process cut short by that is dropped)."""
    result = ABResult(base=base.label, head=head.label, mode="interleaved")
    undecided = list(cases)
    base_failed: dict[str, list[str]] = {}  # case -> why the base's code raised, process by process
    run = Worker(base=base, head=head, device=device, budget_s=case_budget_s, env=env, harness=harness)
    t0, last_s = time.perf_counter(), 0.0
    for i in range(max_processes):
        if not undecided:
            break
        if (why := told_to_stop() or _past_budget(t0, last_s, budget_s, "process")) is not None:
            _stopped(result, why, progress, f"after {i} process(es); {len(undecided)} case(s) undecided")
            break
        started = time.perf_counter()
        got, died = run(undecided)
        if (why := told_to_stop()) is not None:  # the worker was killed with it: nothing to read
            result.processes += 1
            _stopped(result, why, progress, f"during process {i + 1}: that process dropped; {len(undecided)} undecided")
            break
        if died is not None:  # no case done: one line, rather than every case retried until the budget ends
            raise ABError(f"the interleaved measurement failed: {died}")
        result.processes += 1
        last_s = time.perf_counter() - started
        for case in list(undecided):
            row = got[case]  # no result (the worker died in it, or stopped before it): measured in the next
            if isinstance(row, NotMeasured) and row.context_lost:
                row = run.attribute(row)
                result.processes += 2
                if told_to_stop() is not None:  # its processes were killed with it: not read, the case undecided
                    continue
            assert not isinstance(row, RanAlone)  # a job for both sides
            if isinstance(row, NotMeasured) and row.raised and row.side == "base":
                # The base's code alone raised (the worker tags each side's build and step): measured
                # again in the next process, as processes mode does; raised in BASE_FAILURES
                # processes, nothing to compare, not the change's failure.
                if _base_failed_again(result, base_failed, case, (row.error or "raised").removeprefix("base: ")):
                    undecided.remove(case)
                continue
            result.interleaved.setdefault(case, []).append(row)
            if isinstance(row, NotMeasured) and row.skipped is not None:
                result.skipped.append(case)
                undecided.remove(case)
                continue
            if isinstance(row, NotMeasured) and row.new:
                result.new.append(case)
                undecided.remove(case)
                continue
            if isinstance(row, NotMeasured) and row.raised:  # as processes mode: an error at once, not retried
                result.verdicts += ab.interleaved_verdicts(_fullname(case), [row], policy, final=True) or []
                undecided.remove(case)
                continue
            decided = ab.interleaved_verdicts(_fullname(case), result.interleaved[case], policy, final=False)
            if decided is not None:
                result.verdicts += decided
                undecided.remove(case)
                if progress:
                    n = len(result.interleaved[case])
                    progress(f"{case}: {decided[0].verdict} after {n} process(es): {decided[0].message}")
        if progress:
            progress(
                f"process {i + 1}/{max_processes}: {len(undecided)} case(s) undecided, {time.perf_counter() - t0:.0f} s"
            )
    for case in undecided:
        if not result.interleaved.get(case) and case in base_failed:
            result.verdicts.append(_base_failed(case, base_failed[case], result.mode))
            continue
        result.verdicts += (
            ab.interleaved_verdicts(_fullname(case), result.interleaved.get(case, []), policy, final=True) or []
        )
    result.wall_s = time.perf_counter() - t0
    return result


@dataclass(frozen=True, kw_only=True)
class Worker:
    """Fresh worker processes of the head's checkout (perfgate.ab.interleave), as run_interleaved runs them."""

    base: Side
    head: Side
    device: str | None
    budget_s: float  # timed seconds per case
    env: dict[str, str] | None = None
    harness: Path | None = None

    def __call__(
        self, cases: Sequence[str], *, alone: str | None = None, steps: int = 0, budget_s: float | None = None
    ) -> tuple[dict[str, CaseResult], str | None]:
        """One process's result for each case (a case it wrote none for, having died in it or stopped
        before it: not measured, "no result"), and why it failed if it wrote nothing at all (else None)."""
        env = {**(self.env or {}), **({"CUDA_LAUNCH_BLOCKING": "1"} if alone else {})}
        with tempfile.TemporaryDirectory(prefix="perfgate-ab-") as tmp:
            out = Path(tmp) / "interleaved.json"
            job = Job(
                base=self.base.root,
                head=self.head.root,
                out=out,
                cases=list(cases),
                device=self.device,
                budget_s=self.budget_s if budget_s is None else budget_s,
                inductor_cache=self.head.cache,
                alone=alone,
                steps=steps,
            ).write(Path(tmp) / "job.json")
            cmd = [sys.executable, "-m", "perfgate.ab.interleave", str(job)]
            env = side_env(self.head, env, self.harness)
            r = subprocess.run(cmd, cwd=self.head.root, env=env, capture_output=True, text=True, timeout=3600)
            tail = ((r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"])[0]
            if not out.is_file():
                return {}, tail
            try:
                got = {row.case: row for row in read_results(out)}
            except ResultsError as exc:
                return {}, str(exc)
        why = "no result" if r.returncode == 0 else f"no result: the worker exited {r.returncode} ({tail})"
        return {c: got.get(c) or NotMeasured(case=c, error=why) for c in cases}, None

    def attribute(self, lost: NotMeasured) -> NotMeasured:
        """Whose a case is after which the worker's device context was broken (a sticky CUDA fault:
        every later CUDA call in that process raised, whichever side made it): each side built and
        stepped alone in a fresh process, with CUDA_LAUNCH_BLOCKING=1 (a fault raised by the launch
        that made it), as many steps as the pair ran and one more, for as long as the pair ran;
        judged by `blame`. A process that died there is its side's failure."""
        steps = (lost.calls or 0) + 1
        ran: dict[str, RanAlone] = {}
        for side in ("base", "head"):
            got, died = self(cases=[lost.case], alone=side, steps=steps, budget_s=lost.seconds or 0.0)
            row = got.get(lost.case)
            if not isinstance(row, RanAlone):  # its process died, or ran nothing (a row saying why)
                why = died or (row.error or row.skipped if isinstance(row, NotMeasured) else None)
                row = RanAlone(case=lost.case, side=side, steps=0, error=f"its process failed: {why or 'no result'}")
            ran[side] = row
        how = "the device context was lost with both built; each ran alone in a fresh process"
        return blame(lost.case, lost.error or "the device context was lost", ran, steps, how)


LOCKS = "requirements/"  # the hashed locks the environment is installed from (scripts/_venv.sh)


def environment_note(repo: Path, base_sha: str, head_ref: str | None, base: Side, head: Side) -> str | None:
    """What to say when the locks changed between the revisions but both sides run one interpreter:
    the head's environment serves both, so the dependency change itself is not measured (and the
    stored gate, keyed by the torch and torchao versions, finds no baseline for it)."""
    changed = git(repo, "diff", "--name-only", base_sha, *([head_ref] if head_ref else []), "--", LOCKS).splitlines()
    if not changed or base.python != head.python:
        return None
    return (
        f"the locks changed ({', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}) but both sides ran "
        f"one environment ({head.python}): the dependency change itself is not measured; give the base its own "
        "with --base-python (a Python installed from the base's locks; PERFGATE_AB_BASE_PYTHON in scripts/ci-benchmark)"
    )


# Files whose change does not change what a benchmark measures.
_IRRELEVANT = ("README", "docs/", "tests/", "baselines/", ".github/", "scripts/", "LICENSE", ".gitignore")


def choose_mode(repo: Path, base_sha: str, head_ref: str | None, family_files: set[str]) -> tuple[str, str]:
    """("interleaved" | "processes", why): interleaved when every relevant change between the two
    revisions is in a model family file, since only model code can be loaded twice into one process."""
    changed = git(repo, "diff", "--name-only", base_sha, *([head_ref] if head_ref else [])).splitlines()
    relevant = [f for f in changed if f and not f.startswith(_IRRELEVANT) and not f.endswith(".md")]
    outside = [f for f in relevant if f not in family_files]
    if outside:
        return (
            "processes",
            f"changes outside the model files ({', '.join(outside[:3])}{' ...' if len(outside) > 3 else ''})",
        )
    return "interleaved", "only model files changed" if relevant else "no relevant change"
