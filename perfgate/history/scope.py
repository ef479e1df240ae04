"""Whose history to show on this machine: its own fingerprint's when something was recorded for it,
else every recorded fingerprint, grouped, with one line saying so and which recorded machine is
closest. Pure: the caller reads the runs and this machine's fingerprint.

Why a fallback at all: a new CI VM or a reviewer's laptop has a fingerprint nobody recorded (the
pool mixes CPU generations), and "no readable saved runs" hid a repository holding two machines'
history. Numbers of another machine are shown beside its name, never compared with this one's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scope:
    fingerprint_id: str | None  # None: every fingerprint
    note: str | None  # the one line shown when this machine has no history of its own
    gathered: Any = None  # the runs read to decide, when every fingerprint is shown (read once)


def _same(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> bool:
    return a.get(key) is not None and a.get(key) == b.get(key)


def closeness(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple:
    """A sort key, larger is closer: the device kind, the GPU, then the CPU's vendor and family (a
    generation: the same family runs the same kernels at a similar speed), its model number and
    brand, the speed flags shared, the thread count and the torch version."""
    flags_mine, flags_theirs = set(mine.get("cpu_flags") or ()), set(theirs.get("cpu_flags") or ())
    shared_flags = len(flags_mine & flags_theirs) - len(flags_mine ^ flags_theirs)
    return (
        _same(mine, theirs, "device_type"),
        _same(mine, theirs, "gpu_name"),
        _same(mine, theirs, "compute_capability"),
        _same(mine, theirs, "cpu_vendor"),
        _same(mine, theirs, "cpu_family"),
        _same(mine, theirs, "cpu_model_number"),
        _same(mine, theirs, "cpu_model"),
        shared_flags,
        _same(mine, theirs, "threads"),
        _same(mine, theirs, "torch"),
    )


def closest(mine: Mapping[str, Any], recorded: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The id of the recorded fingerprint closest to `mine` (ties: the id's order), None if none."""
    if not recorded:
        return None
    return max(sorted(recorded), key=lambda fp_id: closeness(mine, recorded[fp_id]))


def _describe(fp: Mapping[str, Any]) -> str:
    if fp.get("device_type") == "cuda":
        return f"{fp.get('gpu_name')} (driver {fp.get('driver')}, CUDA {fp.get('cuda')})"
    family = f" family {fp.get('cpu_family')} model {fp.get('cpu_model_number')}" if fp.get("cpu_family") else ""
    return f"{fp.get('cpu_model')}{family}, {fp.get('threads')} threads"


def why_close(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """What the two share and where they differ, in a few words."""
    keys = ("gpu_name", "cpu_vendor", "cpu_family", "cpu_model", "threads", "torch")
    same = [k for k in keys if _same(mine, theirs, k)]
    names = {"gpu_name": "GPU", "cpu_vendor": "vendor", "cpu_family": "family", "cpu_model": "brand"}
    names["cpu_model_number"] = "model"
    differ = [k for k in ("gpu_name", "cpu_vendor", "cpu_family", "cpu_model_number") if mine.get(k) != theirs.get(k)]
    parts = [f"same {', '.join(names.get(k, k) for k in same)}" if same else "nothing in common"]
    if differ:
        parts.append("differs in " + ", ".join(f"{names.get(k, k)} ({theirs.get(k)} vs {mine.get(k)})" for k in differ))
    return "; ".join(parts)


def choose(
    mine_id: str,
    mine: Mapping[str, Any],
    recorded: Mapping[str, Mapping[str, Any] | None],
) -> Scope:
    """This machine's scope given the fingerprints that have saved runs (id -> the fingerprint
    block, or None for an old file without one)."""
    if mine_id in recorded:
        return Scope(mine_id, None)
    if not recorded:
        return Scope(None, None)
    known = {k: v for k, v in recorded.items() if v}
    best = closest(mine, known)
    if best is None:
        where = f"none has a fingerprint block to compare with ({len(recorded)} recorded)"
    else:
        where = f"closest: {best} ({_describe(known[best])}; {why_close(mine, known[best])})"
    return Scope(
        None,
        f"none of the {len(recorded)} recorded fingerprint(s) is this machine's ({mine_id}, {_describe(mine)}); "
        f"{where}. Their numbers are theirs: record this machine's with pytest benchmarks --perfgate-record",
    )


def newest_per_fingerprint(runs: Sequence[Any], fingerprint_id: str | None) -> list[Any]:
    """The newest run of `fingerprint_id`, or of every fingerprint with None (in id order)."""
    newest: dict[str, Any] = {}
    for r in sorted(runs, key=lambda r: r.order_key()):
        if r.fingerprint_id and (fingerprint_id is None or r.fingerprint_id == fingerprint_id):
            newest[r.fingerprint_id] = r
    return [newest[k] for k in sorted(newest)]


def recorded_fingerprints(runs: Sequence[Any]) -> dict[str, Mapping[str, Any] | None]:
    """id -> fingerprint block (the newest run's) of perfgate.history.Run objects."""
    out: dict[str, Mapping[str, Any] | None] = {}
    for r in sorted(runs, key=lambda r: r.order_key()):
        if r.fingerprint_id:
            out[r.fingerprint_id] = r.fingerprint or out.get(r.fingerprint_id)
    return out
