"""The verdicts file (`--perfgate-verdicts`, default .perfgate/verdicts.json): the gate's verdicts of
one run, written by the session and read by reports, `perfgate report` and the merges of workers and shards."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.results import ResultFileError, _parse, _read_text


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
