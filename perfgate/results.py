"""Reading result files: pytest-benchmark JSON (runs, baselines, aggregated ranks) and the gate's
verdicts file, with one-line errors naming the file and the problem.

`read_benchmark_json` is the one loader: `perfgate.history.load_run` (history, reports) and
`perfgate.gate.store.load` (baselines, compare) both call it and add their own checks of the
entries on top. It tells a truncated file (a killed writer: every bracket so far matched, some
left open) from a corrupt one (mismatched brackets, stray text), so the fix it suggests fits.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from perfgate import gate


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
        return path.read_text(encoding="utf8")
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


# ----------------------------------------------------------------------------- the verdicts file


@dataclass(frozen=True)
class VerdictSet:
    """The gate's verdicts of one run, as the session wrote them to `.perfgate/verdicts.json`."""

    verdicts: list[gate.Verdict]
    skipped: dict[str, str] = field(default_factory=dict)
    fingerprint_id: str | None = None
    source: str | None = None
    gate_enabled: bool = True  # False: --perfgate-no-gate, measured only
    fail_on_improvement: bool = False  # --perfgate-ratchet: an improvement fails too
    notices: tuple[str, ...] = ()  # e.g. that no baseline was recorded for this fingerprint

    @property
    def failing(self) -> list[gate.Verdict]:
        return gate.failing(self.verdicts, fail_on_improvement=self.fail_on_improvement)


def verdicts_json(vs: VerdictSet, fingerprint: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The verdicts file's content (what `verdicts_from_json` reads back)."""
    verdicts = gate.sort_verdicts(vs.verdicts)
    return {
        "fingerprint_id": vs.fingerprint_id,
        "fingerprint": dict(fingerprint) if fingerprint is not None else None,
        "failed": bool(vs.failing),
        "gate_enabled": vs.gate_enabled,
        "fail_on_improvement": vs.fail_on_improvement,
        "notices": list(vs.notices),
        "verdicts": [v.as_dict() for v in verdicts],
        "skipped": dict(vs.skipped),
    }


def verdicts_from_json(data: Any, source: str = "verdicts") -> VerdictSet:
    """A verdicts file's content; files written before gate_enabled/notices existed read as gated."""
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
        raise ResultFileError(
            source,
            "not a perfgate verdicts file (no 'verdicts' list); pass the file pytest wrote "
            "with --perfgate-verdicts (default .perfgate/verdicts.json)",
        )
    names = {f.name for f in fields(gate.Verdict)}
    out = []
    for i, v in enumerate(data["verdicts"]):
        if not isinstance(v, dict) or not {"case", "metric", "verdict"} <= v.keys():
            raise ResultFileError(
                source, f"verdict #{i} lacks case, metric or verdict; regenerate it with pytest --perfgate-verdicts"
            )
        out.append(gate.Verdict(**{k: v[k] for k in names if k in v}))
    skipped = data.get("skipped") if isinstance(data.get("skipped"), dict) else {}
    notices = data.get("notices") if isinstance(data.get("notices"), list) else []
    return VerdictSet(
        gate.sort_verdicts(out),
        dict(skipped),
        data.get("fingerprint_id"),
        source,
        gate_enabled=data.get("gate_enabled") is not False,
        fail_on_improvement=data.get("fail_on_improvement") is True,
        notices=tuple(str(n) for n in notices),
    )


def load_verdicts(path: str | os.PathLike[str]) -> VerdictSet:
    """The verdicts file at `path`; ResultFileError (one line naming the file and the fix) otherwise."""
    path = Path(path)
    try:
        data = _parse(path, _read_text(path))
    except ResultFileError as exc:
        fix = "pass the file pytest wrote with --perfgate-verdicts" if exc.unreadable else "rerun pytest to rewrite it"
        raise ResultFileError(path, f"{exc.problem}; {fix}", unreadable=exc.unreadable) from None
    return verdicts_from_json(data, str(path))


def as_verdict_set(
    verdicts: VerdictSet | Mapping[str, Any] | Sequence[gate.Verdict | Mapping[str, Any]] | None,
) -> VerdictSet | None:
    """A VerdictSet from the file's JSON or a list of verdicts (None stays None: no verdicts)."""
    if verdicts is None or isinstance(verdicts, VerdictSet):
        return verdicts
    if isinstance(verdicts, Mapping):
        return verdicts_from_json(verdicts)
    return verdicts_from_json({"verdicts": [v.as_dict() if isinstance(v, gate.Verdict) else dict(v) for v in verdicts]})
