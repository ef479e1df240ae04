"""`perfgate ab --counts`: a pull request's CPU gate on instruction counts, one pass per side at most.

Counts are portable (docs/instructions.md): the same code under the same count key (valgrind, its
virtual CPU, torch, Python) counts the same on any machine, so the base side need not be counted
here when main's run of the merge base was kept in the history store (benchmark-cpu.yml on main,
history.yml). Two paths:

- **kept**: the counts kept for the base commit (`perfgate.history.store.kept_counts`, handed in by
  the command) are written as `<work>/baselines/counts/<key>.json`, and ONE pytest process of the
  head runs the selection with `--perfgate-baselines` there: the run's own gate judges each counted
  case's instructions against them, a suspect recounted in a second valgrind process. No host
  baseline is there, so only counts are judged.
- **counted here**: none kept for the base (or not under the head's key): the base is counted in
  its worktree (one pytest process, `--perfgate-no-gate`), its results turned into the portable
  file by the same builder (`perfgate.counts.suite.portable_from_run`), then the head as above.

Each pytest process goes through a `Runner` (injected: the tests replace it with a fake that writes
a real-format results file).
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate import files
from perfgate.ab.run import ABError, Side, side_env
from perfgate.counts import launcher as instr
from perfgate.counts.suite import portable_from_run, portable_path
from perfgate.exitcodes import FAILED, OK
from perfgate.gate.verdict_file import load_verdicts
from perfgate.gate.verdicts import Verdict, failing
from perfgate.record import CaseRecord
from perfgate.results import ResultFileError, read_benchmark_json

DEFAULT_SELECTION = ("--perfgate-device", "cpu", "--perfgate-tier", "cpu-pr")
KEPT, COUNTED = "kept", "counted"


@dataclass(frozen=True, kw_only=True)
class Ran:
    """One pytest process of a side: its exit code, where it wrote, how long it took."""

    rc: int
    results: Path
    verdicts: Path
    wall_s: float


Runner = Callable[[Side, Sequence[str], Path], Ran]  # side, pytest arguments, output folder


def run_pytest(side: Side, args: Sequence[str], out: Path) -> Ran:
    """`python -m pytest benchmarks ARGS` in the side's checkout, on its own code; its output goes
    to stderr (the count pass prints a line per counted case)."""
    out.mkdir(parents=True, exist_ok=True)
    results, verdicts = out / "results.json", out / "verdicts.json"
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider", *args]
    cmd += ["--benchmark-json", str(results), "--perfgate-verdicts", str(verdicts)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=side.root, env=side_env(side), stdout=sys.stderr, stderr=sys.stderr)
    return Ran(rc=r.returncode, results=results, verdicts=verdicts, wall_s=time.perf_counter() - t0)


def selection_of(pytest_args: Sequence[str]) -> list[str]:
    """The pytest arguments both sides run: the CPU pull-request tier unless the arguments name a
    device or a tier, then the arguments given (e.g. --perfgate-models physicsnemo-block)."""
    given = list(pytest_args)
    out = []
    for opt, value in zip(DEFAULT_SELECTION[::2], DEFAULT_SELECTION[1::2], strict=True):
        if not any(a == opt or a.startswith(f"{opt}=") for a in given):
            out += [opt, value]
    return out + given


def local_key(kept: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The count key this machine would count under, predicted without starting valgrind: valgrind's
    version, torch and Python read here, the virtual CPU taken from a kept file with the same
    valgrind (its canned CPU is the same on every AVX2 host). None when no kept file can tell."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    valgrind = instr.valgrind_version()
    for content in kept.values():
        det = content.get("what_determines_counts") or {}
        if det.get("valgrind") == valgrind and isinstance(det.get("virtual_cpu"), dict):
            return instr.key(det["virtual_cpu"], torch_version, platform.python_version(), valgrind)
    return None


@dataclass(kw_only=True)
class CountsAB:
    base_sha: str
    path: str  # KEPT or COUNTED
    line: str  # which path, in one line
    key: str | None = None  # the head's count key
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rc: int = OK  # the gate's exit code
    base_pass_s: float | None = None  # the base's count pass (kept: as main's run took it)
    head_pass_s: float | None = None
    base_process_s: float | None = None  # the pytest processes run here
    head_process_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "base": {
                "sha": self.base_sha,
                "path": self.path,
                "line": self.line,
                "pass_wall_s": self.base_pass_s,
                "process_wall_s": self.base_process_s,
            },
            "head": {"pass_wall_s": self.head_pass_s, "process_wall_s": self.head_process_s},
            "key": self.key,
            "notes": self.notes,
            "verdicts": [v.as_dict() for v in self.verdicts],
        }


def _pass_s(contents: Mapping[str, Any]) -> float | None:
    """The count pass's wall time as the counted cases' blocks recorded it (pass_wall_s)."""
    for entry in (contents.get("cases") or {}).values():
        block = CaseRecord.from_extra_info(entry).instructions
        seconds = block.pass_wall_s if block else None
        if isinstance(seconds, (int, float)):
            return float(seconds)
    return None


def _head_key(results: Path) -> tuple[str | None, float | None]:
    """The head's count key and pass wall time, from its results (None: nothing counted)."""
    if not results.is_file():
        return None, None
    contents = portable_from_run(read_benchmark_json(results, samples=False))
    if not contents:
        return None, None
    key = sorted(contents)[0]
    return key, _pass_s(contents[key])


def write_baselines(folder: Path, contents: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Each portable content as `<folder>/counts/<key>.json` (what --perfgate-baselines reads)."""
    return [files.write_json(portable_path(folder, key), dict(c)) for key, c in sorted(contents.items())]


def count_base(base: Side, selection: Sequence[str], work: Path, runner: Runner) -> tuple[dict[str, Any], Ran]:
    """Count the base side in its worktree (no gate): its counts as portable contents by key."""
    # No baselines at all: the base's own committed counts would only start a recount of its suspects.
    args = [*selection, "--perfgate-no-gate", "--perfgate-baselines", str(work / "no-baselines")]
    ran = runner(base, [*args, "--perfgate-fail-unjudged", "no"], work / "base")
    try:
        contents = portable_from_run(read_benchmark_json(ran.results, samples=False)) if ran.results.is_file() else {}
    except ResultFileError as exc:
        raise ABError(f"base ({base.label}): {exc}") from None
    if not contents:
        raise ABError(
            f"base ({base.label}): counted nothing (pytest exit {ran.rc}); is valgrind installed "
            "(scripts/install-valgrind) and the selection a counted CPU case's?"
        )
    return contents, ran


def judge_head(head: Side, selection: Sequence[str], baselines: Path, work: Path, runner: Runner) -> Ran:
    """One pytest process of the head judged against `baselines`: instructions only (there is no
    host baseline there; latency is not judged, nor fails the run for being unjudged)."""
    args = [*selection, "--perfgate-baselines", str(baselines), "--perfgate-gate-metrics", "instructions"]
    return runner(head, [*args, "--perfgate-fail-unjudged", "no"], work / "head")


def run_counts(
    head: Side,
    base_sha: str,
    base_side: Callable[[], Side],
    kept: Mapping[str, Mapping[str, Any]],
    selection: Sequence[str],
    work: Path,
    *,
    runner: Runner = run_pytest,
    predict: Callable[[Mapping[str, Mapping[str, Any]]], str | None] = local_key,
    say: Callable[[str], None] = print,
) -> CountsAB:
    """The head's counts judged against the base's: kept ones when the store has them under the
    head's key, else the base counted here (`base_side()` checks it out only then)."""
    short = base_sha[:12]
    result = CountsAB(base_sha=base_sha, path=KEPT, line="")
    baselines = work / "baselines"
    usable = dict(kept)
    if kept:
        predicted = predict(kept)
        if predicted is not None and predicted not in kept:
            result.notes.append(
                f"this machine counts under {predicted}; counts of {short} are kept under {', '.join(sorted(kept))}"
            )
            say(f"perfgate ab --counts: {result.notes[-1]}: counting the base here")
            usable = {}
    head_ran = None
    if usable:
        result.line = f"base: kept counts of {short} under {', '.join(sorted(usable))}"
        say(f"perfgate ab --counts: {result.line}")
        write_baselines(baselines, usable)
        result.base_pass_s = _pass_s(next(iter(usable.values())))
        head_ran = judge_head(head, selection, baselines, work, runner)
        key, _ = _head_key(head_ran.results)
        if key is not None and key not in usable:
            result.notes.append(f"the head counted under {key}, not among the kept keys ({', '.join(sorted(usable))})")
            say(f"perfgate ab --counts: {result.notes[-1]}: counting the base here and the head again")
            head_ran = None
    if head_ran is None:
        result.path = COUNTED
        why = "none kept" if not kept else "none kept under this machine's key"
        result.line = f"base: counted here, {why} for {short}"
        say(f"perfgate ab --counts: {result.line}")
        contents, base_ran = count_base(base_side(), selection, work, runner)
        result.base_process_s, result.base_pass_s = base_ran.wall_s, _pass_s(next(iter(contents.values())))
        write_baselines(baselines, contents)
        head_ran = judge_head(head, selection, baselines, work, runner)
    return _judged(result, head_ran)


def _judged(result: CountsAB, head_ran: Ran) -> CountsAB:
    """The head run's instruction verdicts and the gate's exit code."""
    result.head_process_s = head_ran.wall_s
    try:
        result.key, result.head_pass_s = _head_key(head_ran.results)
        verdicts = load_verdicts(head_ran.verdicts).verdicts if head_ran.verdicts.is_file() else []
    except ResultFileError as exc:
        raise ABError(f"head: {exc}") from None
    result.verdicts = [v for v in verdicts if v.metric == "instructions"]
    if result.key is None:
        raise ABError(
            f"head: counted nothing (pytest exit {head_ran.rc}); is valgrind installed (scripts/install-valgrind)"
            " and the selection a counted CPU case's?"
        )
    if failing(result.verdicts):
        result.rc = FAILED
    elif head_ran.rc != OK:
        result.rc = head_ran.rc  # a failed case (a crash, accuracy) or bad input: pytest's code
    return result
