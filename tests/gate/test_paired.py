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


def _h200_quality_rows() -> list[dict]:
    """The sixth GPU run's comparisons (H200, 2026-11-28): per comparison, the device-time A/B
    window's per-round GPU busy ms of the unchanged (`ab_base_device_ms`) and the current step."""
    import gzip
    import json
    from pathlib import Path

    run = Path(__file__).resolve().parents[2] / "docs" / "data" / "gpu-2026-11-28-h200" / "quality.json.gz"
    return json.loads(gzip.decompress(run.read_bytes()))["rows"]


def test_device_time_ab_judges_the_mean_so_a_slowdown_in_one_step_of_five_is_never_unchanged() -> None:
    """On the H200 the bf16 block's GPU-side +2% (every 20th F.linear twice: one step in five) read
    +12% in 2 of its 10 single-step rounds and +0% in 8: the median called it "unchanged" 20 times of
    20. Judged by the mean it is never called unchanged; the world model's +2% (every step) is still
    a regression, and no unchanged comparison is one."""
    from perfgate.gate.paired import judge_device_time_rounds
    from perfgate.gate.verdicts import INCONCLUSIVE, REGRESSION

    seen: dict[tuple[str, str], set[str]] = {}
    for row in _h200_quality_rows():
        v = judge_device_time_rounds(row["case"], row["device_ms"], row["ab_base_device_ms"], S)
        assert v is not None
        seen.setdefault((row["case"].split("-")[0], row["kind"]), set()).add(v.verdict)
    assert seen[("physicsnemo", "gpu")] == {INCONCLUSIVE}
    assert seen[("owl", "gpu")] == {REGRESSION}
    assert seen[("physicsnemo", "unchanged")] == seen[("owl", "unchanged")] == {gate.UNCHANGED}


def test_device_time_ab_in_blocks_of_five_steps_catches_the_slowdown_in_one_step_of_five() -> None:
    """The same run's per-step figures in blocks of five (perfgate.measure.device_time.block_means,
    what the window now measures): each block holds one doubled F.linear, so the bf16 block's +2%
    is a regression in every comparison (two windows' blocks joined: 4 blocks), and unchanged stays
    unchanged."""
    from perfgate.gate.paired import judge_device_time_rounds
    from perfgate.measure.device_time import block_means

    rows = _h200_quality_rows()
    seen: dict[tuple[str, str], set[str]] = {}
    for case in {r["case"] for r in rows}:
        for kind in ("unchanged", "gpu"):
            mine = [r for r in rows if r["case"] == case and r["kind"] == kind]
            for a, b in zip(mine[::2], mine[1::2], strict=True):
                cur = block_means(a["device_ms"], 5) + block_means(b["device_ms"], 5)
                base = block_means(a["ab_base_device_ms"], 5) + block_means(b["ab_base_device_ms"], 5)
                v = judge_device_time_rounds(case, cur, base, S, block_steps=5)
                assert v is not None and "over 4 blocks" in v.message and "block of 5 steps" in (v.compared or "")
                seen.setdefault((case.split("-")[0], kind), set()).add(v.verdict)
    assert seen[("physicsnemo", "gpu")] == seen[("owl", "gpu")] == {gate.REGRESSION}
    assert seen[("physicsnemo", "unchanged")] == seen[("owl", "unchanged")] == {gate.UNCHANGED}


def test_a_verdict_out_of_pairs_is_never_unchanged_on_its_estimate_alone() -> None:
    """Three process pairs near 0: the rank test's [min, max] covers the median only 75% of the
    time at 3 (93.75% at 5), so no "unchanged" by that interval before 6 pairs; when the pairs run
    out an estimate within +-2% whose interval reaches beyond is inconclusive (it was "unchanged":
    a +2.5% change read so in about 1 run of 4), saying the rank test could not decide at 3."""
    assert _judge([0.1, -0.1, 0.05], "wilcoxon") is None
    v = _judge([0.1, -0.1, 0.05], "wilcoxon", final=True)
    assert v.verdict == gate.INCONCLUSIVE and "no 95% CI from so few" in v.message
    assert "3 processes cannot reach p < 0.01 by the rank test (at best 0.12)" in v.message
    assert _judge([0.1, -0.1, 0.05, 0.2, -0.2, 0.1], "wilcoxon").verdict == gate.UNCHANGED  # 6: a 95% interval
    t = _judge([3.0, -1.0, -1.5], "t", final=True)  # +0.1% by its mean, 95% CI -6%..+6%
    assert t.verdict == gate.INCONCLUSIVE and "its interval reaches beyond: not told apart" in t.message
