"""Reading result files: pytest-benchmark JSON (runs, baselines, aggregated ranks) and the gate's
verdicts file, with one-line errors naming the file and the problem.

`read_benchmark_json` is the one loader: `perfgate.history.runs.load_run` (history, reports) and
`perfgate.gate.store.load` (baselines, compare) both call it and add their own checks of the
entries on top. It tells a truncated file (a killed writer: every bracket so far matched, some
left open) from a corrupt one (mismatched brackets, stray text), so the fix it suggests fits.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.record import CaseRecord


class ResultFileError(Exception):
    """A result file that cannot be used; str() is one line: '<path>: <problem>'.
    `unreadable` is True when the file could not be read at all (missing, no permission)."""

    def __init__(self, path: str | os.PathLike[str], problem: str, *, unreadable: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem, self.unreadable = str(path), problem, unreadable


# Raw sample arrays are most of a result file and most of its parse time (json makes a float
# object per number); history needs none of them, so they are emptied before parsing. Only
# arrays of number characters match, so no string can be cut.
_SAMPLE_ARRAYS = re.compile(r'"(samples_ms|reference_ms|data)":\s*\[[-0-9.eE+,\s]*\]')


def read_benchmark_json(path: str | os.PathLike[str], *, samples: bool = True) -> dict[str, Any]:
    """The parsed file, a dict with a 'benchmarks' list; ResultFileError otherwise. `samples=False`
    empties extra_info.samples_ms, reference_ms and stats.data (4-5x faster on real files)."""
    path = Path(path)
    text = _read_text(path)
    try:
        data = json.loads(text if samples else _SAMPLE_ARRAYS.sub(r'"\1": []', text))
    except json.JSONDecodeError:
        data = _parse(path, text)  # the whole text: its error position is the file's, not the lean copy's
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultFileError(path, "not a pytest-benchmark file (no 'benchmarks' list)")
    return data


def _read_text(path: Path) -> str:
    try:
        if path.name.endswith(".gz"):  # a thinned run of the history store (perfgate.history.store)
            return gzip.decompress(path.read_bytes()).decode("utf8")
        return path.read_text(encoding="utf8")
    except (EOFError, gzip.BadGzipFile):
        raise ResultFileError(path, "truncated or corrupt gzip") from None
    except OSError as exc:
        raise ResultFileError(path, f"cannot read ({exc.strerror or exc})", unreadable=True) from None
    except UnicodeDecodeError:
        raise ResultFileError(path, "cannot read (not UTF-8 text)") from None


def _parse(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        what = "truncated" if truncated(text) else "corrupt"
        raise ResultFileError(path, f"{what} JSON at line {exc.lineno} column {exc.colno}") from None


def truncated(text: str) -> bool:
    """Whether broken JSON is a cut-off file (empty, or every bracket so far matched and some left
    open: a killed writer) rather than a corrupt one (mismatched brackets, stray text)."""
    stack: list[str] = []
    in_str = esc = False
    for ch in text:
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return False
    return bool(stack) or in_str or not text.strip()


def case_id(name: str) -> str:
    """The case id of a benchmark's name or fullname ('...::test_step[ID]' -> 'ID')."""
    return name.split("[", 1)[1].rstrip("]") if "[" in name else name


def case_records(data: Mapping[str, Any]) -> dict[str, CaseRecord]:
    """Case id -> typed record of every benchmark in a result file's data (what
    `read_benchmark_json` returned): the one place its perfgate keys become a CaseRecord."""
    return {case_id(b["name"]): CaseRecord.from_extra_info(b.get("extra_info") or {}) for b in data["benchmarks"]}


def load_records(path: str | os.PathLike[str], *, samples: bool = True) -> dict[str, CaseRecord]:
    """`case_records` of the result file at `path` (ResultFileError, one line, when unreadable)."""
    return case_records(read_benchmark_json(path, samples=samples))
