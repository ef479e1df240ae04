"""Baseline files: pytest-benchmark JSON with a versioned `perfgate` block, keyed by fingerprint.

Layout: `baselines/<fingerprint_id>/NNNN_<label>.json`, the numbering pytest-benchmark's own
storage uses, so `--benchmark-compare` finds the newest one unchanged. Recording adds a new
number (history is never overwritten) and writes through `perfgate.output.files` without
clobber: a temporary file in the same folder, fsync, then a link to the final name; a run killed
mid-write leaves the earlier files intact and at worst a hidden `.tmp` file that loading ignores.
Reading goes through `perfgate.results`, the one loader; the baseline's own checks are added here.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from perfgate import results
from perfgate.fingerprint import differences
from perfgate.output import files

SCHEMA = 1
RECORD_HINT = "record one with: pytest benchmarks --perfgate-record"
_NUMBERED = re.compile(r"^(\d{4})_.*\.json$")


class BaselineError(Exception):
    """A baseline that cannot be used; the message is one line naming the file, problem and fix."""


def baseline_dir(root: str | os.PathLike[str], fp_id: str) -> Path:
    return Path(root) / fp_id


def numbered_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NUMBERED.match(p.name)), key=lambda p: p.name)


def validate(data: Any, path: Path, fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check a loaded baseline; raise BaselineError with the one-line diagnosis and fix."""
    fix = f"restore it (git checkout -- {path}) or delete it and {RECORD_HINT}"
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list); {fix}")
    block = data.get("perfgate")
    if not isinstance(block, dict):
        raise BaselineError(f"{path}: no 'perfgate' block, so no fingerprint to trust; {fix}")
    if block.get("schema") != SCHEMA:
        raise BaselineError(f"{path}: schema {block.get('schema')!r}, this perfgate reads schema {SCHEMA}; {fix}")
    for i, bench in enumerate(data["benchmarks"]):
        if not isinstance(bench, dict) or "fullname" not in bench or not isinstance(bench.get("stats"), dict):
            raise BaselineError(f"{path}: benchmark #{i} lacks 'fullname' or 'stats'; {fix}")
        samples = bench.get("extra_info", {}).get("samples_ms")
        if not isinstance(samples, list) or not samples:
            raise BaselineError(f"{path}: benchmark {bench['fullname']!r} has no raw samples (extra_info.samples_ms); {fix}")
        ref = bench["extra_info"].get("reference_ms")
        if ref is not None and (not isinstance(ref, list) or len(ref) != len(samples)
                                or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in ref)):
            raise BaselineError(f"{path}: benchmark {bench['fullname']!r} has reference_ms that are not positive times "
                                f"pairing with its samples_ms; {fix}")
    if fingerprint is not None:
        diff = differences(fingerprint, block.get("fingerprint") or {})
        if diff:
            what = ", ".join(f"{k} {b!r} here {a!r}" for k, (a, b) in diff.items())
            raise BaselineError(
                f"{path}: recorded on another machine ({what}); move it to its own fingerprint folder or {RECORD_HINT}"
            )
    return data


def load(path: str | os.PathLike[str], fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    path = Path(path)
    try:
        data = results.read_benchmark_json(path)
    except results.ResultFileError as exc:
        fix = f"check the path or {RECORD_HINT}" if exc.unreadable else f"restore it (git checkout -- {path}) or delete it and {RECORD_HINT}"
        raise BaselineError(f"{exc}; {fix}") from None
    return validate(data, path, fingerprint)


def latest(folder: Path, fingerprint: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The newest baseline in `folder`, validated; None if there is none. A broken newest file is an
    error, never silently replaced by an older one."""
    numbered = numbered_files(folder)
    if not numbered:
        return None
    return numbered[-1], load(numbered[-1], fingerprint)


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["fullname"]: b for b in data["benchmarks"]}


# The name perfgate.dist_plugin writes rank files with; the writer is perfgate.output.files.
atomic_write_json = files.write_json


def record(folder: Path, data: dict[str, Any], label: str) -> Path:
    """Add `data` as the next numbered baseline in `folder`."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "baseline"
    for _ in range(100):
        numbered = numbered_files(folder)
        num = int(numbered[-1].name[:4]) + 1 if numbered else 1
        try:
            return files.write_json(folder / f"{num:04d}_{safe}.json", data, clobber=False)
        except FileExistsError:
            continue  # another writer took the number (history is never overwritten); take the next
    raise BaselineError(f"{folder}: could not find a free baseline number; remove stray files there")
