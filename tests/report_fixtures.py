"""The report tests' inputs, from the files a real run of the suite writes (the `real_run` fixture
in conftest.py): its pytest-benchmark JSON with the telemetry sampler's real summaries and its
verdicts file; earlier runs for the history are copies of the real file at other commits, with
scaled medians. The report test modules load it through `pytest_plugins`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfgate import gate
from perfgate.gate.verdict_file import VerdictSet, load_verdicts
from tests.report_helpers import CASE, at_commit, day, write


@pytest.fixture
def real(real_run) -> dict[str, Any]:
    return json.loads(real_run.results.read_text())


@pytest.fixture
def tonight(real) -> dict[str, Any]:
    return at_commit(real, "c" * 40, day(9), dirty=True)


@pytest.fixture
def saved(tmp_path, real) -> Path:
    """Three earlier runs of the same cases, bf16 not among them, under the fingerprint's folder;
    in the last, eager was contended (unreliable)."""
    fp_dir = tmp_path / "baselines" / real["perfgate"]["fingerprint_id"]
    for i, scale in enumerate((0.95, 1.05, 0.98), start=1):
        run = at_commit(real, str(i) * 40, day(i), scale=scale, drop=("bf16",), contended=("baseline",) * (i == 3))
        write(fp_dir / f"{i:04d}_nightly.json", run)
    return tmp_path


@pytest.fixture
def verdicts(real_run) -> VerdictSet:
    """Verdicts of each kind on the real cases, with the real run's skipped case."""
    real = load_verdicts(real_run.verdicts)
    return VerdictSet(
        [
            gate.Verdict(
                case=CASE.format("physicsnemo-block-tiny-baseline"),
                metric="latency",
                verdict=gate.UNCHANGED,
                baseline=10.0,
                current=10.0,
                change_pct=0.0,
                p_value=0.5,
            ),
            gate.Verdict(
                case=CASE.format("physicsnemo-block-tiny-int8-dynamic"),
                metric="latency",
                verdict=gate.IMPROVEMENT,
                baseline=14.0,
                current=12.0,
                change_pct=-14.3,
                p_value=0.001,
                message="faster | much",
            ),
            gate.Verdict(
                case=CASE.format("physicsnemo-block-tiny-bf16"),
                metric="latency",
                verdict=gate.REGRESSION,
                baseline=5.0,
                current=6.5,
                change_pct=30.0,
                p_value=1e-4,
                message="median 6.500 ms vs 5.000 ms (+30.0% > 5%, p=0.0001)",
            ),
            gate.Verdict(
                case=CASE.format("physicsnemo-train-tiny-baseline"),
                metric="budget:median_ms",
                verdict=gate.BUDGET,
                baseline=0.5,
                current=1.0,
                message="median 1 ms, budget at most 0.5",
            ),
        ],
        real.skipped,
        real.fingerprint_id,
    )
