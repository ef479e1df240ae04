"""The evidence files the profiler rewrites each run (trace.json, its .ops.txt table) are replaced
whole: a run that dies while writing them leaves the previous run's files as they were."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from perfgate.profile.trace import trace_steps


def _step() -> None:
    x = torch.randn(16, 16)
    (x @ x).sum()


def test_a_trace_cut_short_leaves_the_previous_evidence_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "evidence" / "case" / "trace.json"
    first = trace_steps(_step, torch.device("cpu"), out, steps=1)
    trace, table = Path(first.trace), Path(first.ops_table)
    assert "aten::mm" in {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    before = {p: p.read_bytes() for p in (trace, table)}
    assert "aten::mm" in table.read_text()

    def crash(*args: object) -> None:
        raise OSError(5, "Input/output error (simulated crash)")

    monkeypatch.setattr(os, "replace", crash)  # the moment the new file would take the old one's place
    with pytest.raises(OSError, match="simulated"):
        trace_steps(_step, torch.device("cpu"), out, steps=1)
    assert {p: p.read_bytes() for p in (trace, table)} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["trace.json", "trace.ops.txt"]  # no scratch left
