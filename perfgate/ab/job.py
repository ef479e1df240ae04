"""The interleaved A/B worker's job and results (perfgate.ab.interleave): what `perfgate ab` writes
for each worker process and the worker reads back, and the result per case the worker writes and
the driver reads back. Their own module so that the driver (perfgate.ab.run) writes a job and reads
its results without importing the worker, torch and the timing loop with it."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.record import RecordBlock


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    """One worker process's job: both revisions' roots, where the result goes, the cases."""

    base: Path
    head: Path
    out: Path
    cases: list[str]
    device: str | None = None
    budget_s: float = 3.0  # timed seconds per case
    # The head side's inductor cache (perfgate.ab.run.Side.cache): the worker compiles both sides'
    # model code into it (an FX graph's key is its graph: a base graph that differs gets its own
    # entry), and a later run of the head (the stored run of ci-benchmark's pr mode) finds it warm.
    inductor_cache: Path | None = None
    # A job that builds one side only, "base" or "head", and steps each case `steps` times (or until
    # `budget_s` seconds ran out): whose a case that lost the device context is, told in a fresh
    # process per side (perfgate.ab.run); its results are `RanAlone`.
    alone: str | None = None
    steps: int = 0

    def write(self, path: Path) -> Path:
        paths = {k: str(getattr(self, k)) for k in ("base", "head", "out", "inductor_cache") if getattr(self, k)}
        path.write_text(json.dumps({**dataclasses.asdict(self), **paths}), encoding="utf8")
        return path

    @classmethod
    def read(cls, path: Path) -> Job:
        d = json.loads(path.read_text(encoding="utf8"))
        paths = {k: Path(d[k]) for k in ("base", "head", "out", "inductor_cache") if d.get(k)}
        return cls(**{**d, **paths})


# --- what the worker writes back: one result per case -------------------------------------------------

NO_BASE_FILE = "the base revision has no file for this model family"  # a case only the head has
_NULL_TOO = {"always": True}  # a field written when None too (as null), as the worker always has


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measured(RecordBlock):
    """One case measured in one worker process, both revisions' model code round by round: the
    median head/base ratio of its rounds (what `perfgate.ab.verdicts` judges) and each side's
    median, peak memory and accuracy. Read and written key for key (`RecordBlock`): the worker's
    JSON keeps its keys and their order."""

    case: str
    ratio: float
    rounds: int
    median_base_ms: float
    median_head_ms: float
    peak_base_mib: float | None = dataclasses.field(default=None, metadata=_NULL_TOO)
    peak_head_mib: float | None = dataclasses.field(default=None, metadata=_NULL_TOO)
    contention_cores: float
    accuracy_base: dict[str, float]
    accuracy_head: dict[str, float]
    device: str
    model: str
    variant: str
    # On a GPU: each side's GPU busy ms per step, block by block of one profiler window in which the
    # two sides alternate (perfgate.measure.op_counts.interleaved_device_ms), blocks of this many steps
    device_base_ms: list[float] | None = None
    device_head_ms: list[float] | None = None
    device_block_steps: int | None = None
    device_error: str | None = None  # why the device-time window measured nothing on a GPU


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotMeasured(RecordBlock):
    """A case the worker did not measure: skipped (why) or failed (the error)."""

    case: str
    error: str | None = None
    skipped: str | None = None
    raised: bool = False  # the error is the case's own (building or running it raised): an error verdict
    # Which revision's model code raised, where the worker could tell: "base", "head", or "both" (each
    # side ran alone, the two built together did not). The driver measures a case only the base
    # failed again (perfgate.ab.run), as in processes mode; any other raise is an error.
    side: str | None = None
    # The device context was lost (a sticky CUDA fault: every later CUDA call in the process fails):
    # the worker stopped after this case, whose `error` is what was raised, after `calls` steps of
    # the side that had run most, in `seconds`. Not measured; the driver runs each side alone in a
    # fresh process to tell whose it is (`blame`).
    context_lost: bool = False
    calls: int | None = None
    seconds: float | None = None

    @property
    def new(self) -> bool:
        """The base revision has no file for the case's model family: a case only the head has."""
        return self.error is not None and NO_BASE_FILE in self.error


@dataclasses.dataclass(frozen=True, kw_only=True)
class RanAlone(RecordBlock):
    """One side of a case built afresh and stepped alone (a `Job.alone` worker, or the worker's own
    check after a raise blamed on the base): the steps it ran, and what it raised (None: it ran
    every step asked, or its time ran out first: `steps` says which)."""

    case: str
    side: str
    steps: int
    error: str | None = None


CaseResult = Measured | NotMeasured | RanAlone


def case_result(obj: Mapping[str, Any]) -> CaseResult:
    """One result as the worker wrote it: measured where it has a ratio, run alone where it has steps."""
    if "ratio" in obj:
        return Measured.from_json(obj)
    return RanAlone.from_json(obj) if "steps" in obj else NotMeasured.from_json(obj)


def blame(case: str, pair: str, alone: Mapping[str, RanAlone], steps: int, how: str) -> NotMeasured:
    """Whose a raise of the pair (`pair`: "Type: message") is, from each side's case run alone as
    many `steps` as the pair had run (and one more): the head's if the head raised alone (the
    change's error); else the base's if the base did (measured again, then nothing to compare);
    not attributable if either side's time ran out before its steps did (measured again as the
    base's, then nothing to compare: a base that fails late must not read as both sides' error);
    else neither side's alone, only the two built together (`how`: where they ran): an error
    naming both. The one rule for the worker's check and for the driver's fresh processes."""
    head, base = alone["head"], alone["base"]
    if head.error is not None:
        return NotMeasured(case=case, error=f"head: {head.error} (with both built: {pair})", raised=True, side="head")
    if base.error is not None:
        return NotMeasured(case=case, error=f"base: {base.error}", raised=True, side="base")
    if min(head.steps, base.steps) < steps:
        short = f"alone, the base ran {base.steps} and the head {head.steps} of {steps} steps in the time the pair took"
        return NotMeasured(case=case, error=f"{pair} (not attributable: {short})", raised=True, side="base")
    return NotMeasured(case=case, error=f"both: {pair} ({how})", raised=True, side="both")


class ResultsError(ValueError):
    """A worker's results file that cannot be read back: one line naming the file."""


def write_results(path: Path, results: Sequence[CaseResult]) -> None:
    """The worker's output file: {"results": [one object per case]}; a value JSON cannot hold
    (a tensor's scalar) as its string. Written whole or not at all (perfgate.files), after every
    case: a worker that dies loses only the case it was in (the driver measures it again), and one
    that dies before its first case is done leaves no file (the driver: the measurement failed)."""
    from perfgate import files

    files.write_text(
        path,
        json.dumps(
            {"results": [r.to_json() for r in results]},
            default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v),
        ),
    )


def read_results(path: Path) -> list[CaseResult]:
    """The worker's output file, read back (the driver, perfgate.ab.run); ResultsError if it is no
    such file."""
    try:
        rows = json.loads(path.read_text(encoding="utf8"))["results"]
        return [case_result(row) for row in rows]
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read the A/B worker's results ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        raise ResultsError(f"{path}: not an A/B worker's results file ({why}); run perfgate ab again") from None
