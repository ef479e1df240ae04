"""The paired latency judge (perfgate.gate.paired): what `perfgate ab`'s processes and the GPU
quality run's interleaved rounds are judged by."""

from __future__ import annotations

import math

from perfgate import gate
from perfgate.gate.paired import judge_logs
from perfgate.gate.settings import GateSettings

S = GateSettings()


def _logs(pcts: list[float]) -> list[float]:
    return [math.log(1 + p / 100) for p in pcts]


def _judge(pcts: list[float], test: str, final: bool = False) -> gate.Verdict | None:
    return judge_logs(
        "c", _logs(pcts), S, final=final, unit="process", test=test, baseline_ms=1.0, current_ms=1.0, n_total=len(pcts)
    )


def test_interleaved_processes_decide_with_a_t_test() -> None:
    assert _judge([5.1, 4.8, 5.3], "t").verdict == gate.REGRESSION  # three processes agree on +5%
    assert _judge([-4.9, -5.2, -5.0], "t").verdict == gate.IMPROVEMENT
    unchanged = _judge([0.3, -0.2, 0.1], "t")
    assert unchanged.verdict == gate.UNCHANGED and "within +-2%" in unchanged.message
    assert " over 3 processes: " in unchanged.message  # once read "3 processs" in a pull request's summary
    assert _judge([3.0, -1.0, 6.0], "t") is None  # not clear yet: ask for another process
    assert _judge([3.0, -1.0, 6.0], "t", final=True).verdict == gate.INCONCLUSIVE
    assert _judge([1.0, 1.2], "t") is None  # fewer than MIN_PAIRS decide nothing


def test_process_pairs_need_seven_for_the_rank_test() -> None:
    """Wilcoxon's exact one-sided p is 1/2^n at best: below 0.01 only from 7 pairs."""
    assert _judge([5, 6, 7, 5, 6, 7], "wilcoxon") is None
    assert _judge([5, 6, 7, 5, 6, 7, 6], "wilcoxon").verdict == gate.REGRESSION
    assert (
        _judge([1.5, 1.8, 1.2, 1.9, 1.6, 1.7, 1.4], "wilcoxon", final=True).verdict == gate.UNCHANGED
    )  # significant, under 2%


def test_device_time_rounds_judge_a_small_change_through_a_drift_both_sides_share() -> None:
    """The GPU's clocks drift over a window (the H200's bf16 block ran up to 3% slower minutes after
    its record): in one interleaved window both sides of a round share the drift, and +2% per round
    is a regression while unchanged rounds stay unchanged."""
    import random

    from perfgate.gate.paired import judge_device_time_rounds
    from perfgate.gate.verdicts import REGRESSION, UNCHANGED

    rng = random.Random(3)
    drift = [1.4 * (1 + 0.03 * i / 9) for i in range(10)]  # ms, +3% across the window
    base = [d * (1 + rng.gauss(0, 0.002)) for d in drift]
    slower = [d * 1.02 * (1 + rng.gauss(0, 0.002)) for d in drift]
    same = [d * (1 + rng.gauss(0, 0.002)) for d in drift]
    s = GateSettings()
    v = judge_device_time_rounds("c", slower, base, s)
    assert v is not None and v.verdict == REGRESSION and v.metric == "device_time"
    assert "over 10 rounds" in v.message and v.compared and v.compared.startswith("GPU busy ms per step")
    u = judge_device_time_rounds("c", same, base, s)
    assert u is not None and u.verdict == UNCHANGED
    assert judge_device_time_rounds("c", [], [], s) is None  # no device time (a CPU run)


def test_paired_rounds_judge_the_per_round_ratio_through_a_host_phase() -> None:
    """A launch-bound step's host runs in phases (docs/gpu-runs.md: ~22 ms for a stretch of rounds,
    then ~36 ms); both sides of a round share the phase, so the per-round ratio keeps the +5%."""
    import random

    from perfgate.gate.paired import judge_rounds

    rng = random.Random(1)
    phase = [22.0 if (i // 8) % 2 == 0 else 36.0 for i in range(30)]
    base = [p * rng.uniform(0.99, 1.01) for p in phase]
    slowed = [p * 1.05 * rng.uniform(0.99, 1.01) for p in phase]
    s = GateSettings()
    assert judge_rounds("c", slowed, base, s).verdict == "regression"
    same = [p * rng.uniform(0.99, 1.01) for p in phase]
    assert judge_rounds("c", same, base, s).verdict == "unchanged"
