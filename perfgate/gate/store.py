"""Baseline files: pytest-benchmark JSON with a versioned `perfgate` block, keyed by fingerprint.

Layout: `baselines/<fingerprint_id>/NNNN_<label>.json`, the numbering pytest-benchmark's own
storage uses (its own saves live apart, in .perfgate/benchmarks/). Recording adds a new
number (history is never overwritten) and writes through `perfgate.files` without
clobber: a temporary file in the same folder, fsync, then a link to the final name; a run killed
mid-write leaves the earlier files intact and at worst a hidden `.tmp` file that loading ignores.
Reading goes through `perfgate.results`, the one loader; the baseline's own checks are added here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from perfgate import files, results
from perfgate.measure.fingerprint import differences
from perfgate.record import value_problems

SCHEMA = 1
RECORD_HINT = "record one with: pytest benchmarks --perfgate-record"
_NUMBERED = re.compile(r"^(\d{4})_.*\.json$")


class BaselineError(Exception):
    """A baseline that cannot be used; the message is one line naming the file, problem and fix."""


def baseline_dir(root: str | os.PathLike[str], fp_id: str) -> Path:
    return Path(root) / fp_id


def numbered_files(folder: Path) -> list[Path]:
    """The numbered baseline files of `folder`, oldest first; only regular files (a FIFO named like
    a baseline would hang the reader: `special_files` names them for a notice)."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NUMBERED.match(p.name) and p.is_file()), key=lambda p: p.name)


def special_files(folder: Path) -> list[Path]:
    """Entries named like baselines that are no regular files (FIFOs, folders, broken links): skipped."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NUMBERED.match(p.name) and not p.is_file())


def validate(
    data: Any, path: Path, fingerprint: dict[str, Any] | None = None, *, remedy: str | None = None
) -> dict[str, Any]:
    """Check a loaded baseline; raise BaselineError with the one-line diagnosis and fix (`remedy`
    for a file that is no recorded baseline, e.g. a current run's: how to write it again)."""
    fix = remedy or f"restore it (git checkout -- {path}) or delete it and {RECORD_HINT}"
    if not isinstance(data, dict) or not results.is_result_file(data):
        raise BaselineError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list); {fix}")
    block = data.get("perfgate")
    if not isinstance(block, dict):
        raise BaselineError(f"{path}: no 'perfgate' block, so no fingerprint to trust; {fix}")
    if block.get("schema") != SCHEMA:
        raise BaselineError(f"{path}: schema {block.get('schema')!r}, this perfgate reads schema {SCHEMA}; {fix}")
    for i, raw in enumerate(results.raw_entries(data)):
        bench = results.Benchmark.from_json(raw) if isinstance(raw, dict) and "fullname" in raw else None
        if bench is None or bench.stats is None:
            raise BaselineError(f"{path}: benchmark #{i} lacks 'fullname' or 'stats'; {fix}")
        if not bench.has_record:
            raise BaselineError(f"{path}: benchmark {bench.fullname!r} has no extra_info; {fix}")
        if not isinstance(bench.record.samples_ms, list) or not bench.record.samples_ms:
            raise BaselineError(
                f"{path}: benchmark {bench.fullname!r} has no raw samples (extra_info.samples_ms); {fix}"
            )
        problems = value_problems(bench.record.to_extra_info())
        if problems:
            raise BaselineError(f"{path}: benchmark {bench.fullname!r}: {problems[0]}; {fix}")
    if fingerprint is not None:
        diff = differences(fingerprint, block.get("fingerprint") or {})
        if diff:
            what = ", ".join(f"{k} {b!r} here {a!r}" for k, (a, b) in diff.items())
            raise BaselineError(
                f"{path}: recorded on another machine ({what}); move it to its own fingerprint folder or {RECORD_HINT}"
            )
    return data


def load(
    path: str | os.PathLike[str], fingerprint: dict[str, Any] | None = None, *, remedy: str | None = None
) -> dict[str, Any]:
    """A baseline (or any result file in its form), validated; `remedy` replaces a baseline's fix
    (restore it or record one) in the error of a file with another role (perfgate.gate.store.validate)."""
    path = Path(path)
    try:
        data = results.read_benchmark_json(path)
    except results.ResultFileError as exc:
        if exc.unreadable:
            fix = f"check the path or {remedy or RECORD_HINT}"
        else:
            fix = remedy or f"restore it (git checkout -- {path}) or delete it and {RECORD_HINT}"
        raise BaselineError(f"{exc}; {fix}") from None
    return validate(data, path, fingerprint, remedy=remedy)


def latest(folder: Path, fingerprint: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The newest baseline in `folder`, validated; None if there is none. A broken newest file is an
    error, never silently replaced by an older one."""
    numbered = numbered_files(folder)
    if not numbered:
        return None
    return numbered[-1], load(numbered[-1], fingerprint)


class Baselines:
    """A fingerprint's baselines, resolved per case: each case is judged against the newest file
    that holds it, so recording a subset never un-gates the other cases. Files are read newest
    first and only as far back as a case needs; a broken file on the way is an error, never
    silently passed over for an older one."""

    def __init__(self, folder: Path, fingerprint: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self.fingerprint = fingerprint
        self.files = list(reversed(numbered_files(folder)))  # newest first
        self.skipped = special_files(folder)
        self._read: dict[Path, dict[str, results.Benchmark]] = {}

    def _entries(self, path: Path) -> dict[str, results.Benchmark]:
        if path not in self._read:
            self._read[path] = by_name(load(path, self.fingerprint))
        return self._read[path]

    def check_newest(self) -> None:
        """Read the newest file now, so a broken one stops the run before any case is measured."""
        if self.files:
            self._entries(self.files[0])

    def entry(self, fullname: str) -> tuple[Path, results.Benchmark] | None:
        """(the file, its entry) of the newest baseline holding `fullname`, or None."""
        for path in self.files:
            found = self._entries(path).get(fullname)
            if found is not None:
                return path, found
        return None


def by_name(data: dict[str, Any]) -> dict[str, results.Benchmark]:
    """fullname -> typed entry of a loaded baseline."""
    return {b.fullname: b for b in results.benchmarks(data)}


# The name perfgate.plugin.torchrun writes rank files with; the writer is perfgate.files.
atomic_write_json = files.write_json


def record_or_keep(folder: Path, data: dict[str, Any], label: str, kept_dir: Path) -> tuple[Path | None, str | None]:
    """`record` into `folder`, or, where that fails (a folder gone read-only or full since the run
    started), the run recorded into `kept_dir` instead and one line saying why, where it is and how to
    finish the recording: (the baseline, None) or (None, the line). Nothing measured is lost."""
    written, kept, why = files.write_or_keep(
        lambda: record(folder, data, label), lambda: record(kept_dir, data, label), (OSError, BaselineError)
    )
    return written, None if why is None else unrecorded(folder, label, why, kept)


def unrecorded(folder: Path, label: str, why: str, kept: Path | None) -> str:
    """The one line for a baseline that could not be written in `folder`: the reason (one line), where
    the run is kept (None: nowhere) and the fix."""
    keep = (
        f"the run is kept in {kept}: once the folder is writable, copy it there as the next NNNN_{_safe(label)}.json"
        if kept is not None
        else "make the folder writable"
    )
    return (
        f"perfgate: the baseline could not be recorded in {folder} ({why}); {keep}, or record again with "
        "--perfgate-baselines DIR"
    )


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "baseline"


def record(folder: Path, data: dict[str, Any], label: str) -> Path:
    """Add `data` as the next numbered baseline in `folder`. The number is taken under a lock on the
    folder (filelock, which torch already depends on): two recordings with different labels at once
    used to take the same number (48 of 120 in a stress test); the no-clobber link alone protects
    only an identical name."""
    from filelock import FileLock

    safe = _safe(label)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".record.lock"):
        numbers = [int(p.name[:4]) for p in folder.iterdir() if _NUMBERED.match(p.name)]
        num = max(numbers, default=0) + 1
        if num > 9999:
            raise BaselineError(f"{folder}: baseline numbers are used up (9999); move old files to an archive folder")
        return files.write_json(folder / f"{num:04d}_{safe}.json", data, clobber=False)
