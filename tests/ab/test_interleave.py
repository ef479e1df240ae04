"""measure_interleaved on the shared timed-rounds loop, with a fake clock advanced by the steps: the
base and the head alternate in a random order each round, each right after an untimed call of itself,
and the stop rule judges head/base."""

from __future__ import annotations

import pytest

from perfgate.ab.interleave import measure_interleaved
from perfgate.measure.stats import StopRule
from tests import fake_clock
from tests.fake_clock import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return fake_clock.install(monkeypatch)


def test_base_and_head_alternate_randomly_each_after_its_untimed_call(clock):
    log: list[str] = []

    def side(name: str, ms: float):
        def step() -> str:
            log.append(name)
            clock.takes(ms)
            return name

        return step

    stop = StopRule(precision=0.01, min_rounds=12, max_rounds=40, budget_s=float("inf"))
    m = measure_interleaved(side("base", 2.0), side("head", 5.0), "cpu", stop=stop, warmup_rounds=3, seed=3)
    assert log[:8] == ["base", "head"] * 4  # outputs, then the warm-up rounds
    timed = log[8 : 8 + 4 * 12]
    per_round = [timed[i : i + 4] for i in range(0, len(timed), 4)]
    assert all(r[0] == r[1] and r[2] == r[3] and {r[0], r[2]} == {"base", "head"} for r in per_round)
    assert {r[0] for r in per_round} == {"base", "head"}  # both orders drawn
    assert log[8 + 4 * 12 :] == ["base"] * 2 + ["head"] * 2  # the peak memory of each side alone
    # Exact ratios are as precise as can be: the stop rule, judging head/base, stops at its minimum.
    assert m.ratios == [2.5] * 12 and m.median_ratio == 2.5
    assert m.samples_base_ms == [2.0] * 12 and m.samples_head_ms == [5.0] * 12
    assert (m.out_base, m.out_head) == ("base", "head")


def test_the_device_time_window_fits_its_blocks_to_the_step() -> None:
    """A worker's device-time window (GPU only) is sized by the step it times: the Self Forcing
    block's 393 ms step gets the 3 blocks a t test needs (12 s), the world model's 12 ms graph the
    10 the GPU quality run uses, and a 50 ms step what fits two seconds."""
    from perfgate.ab.interleave import device_blocks_for

    assert [device_blocks_for(s) for s in (0.393, 0.012, 0.05, 0.0)] == [3, 10, 4, 10]


def test_each_sides_first_output_is_kept_though_the_step_overwrites_it(clock):
    """A CUDA-graph step returns the same static buffer each call, overwritten in place (and
    cudagraph trees free it on the next call): accuracy must read each side's first output."""
    import torch

    def overwriting(ms: float):
        buf = torch.zeros(3)
        calls = [0]

        def step() -> torch.Tensor:
            calls[0] += 1
            buf.fill_(calls[0])
            clock.takes(ms)
            return buf

        return step

    stop = StopRule(precision=0.01, min_rounds=3, max_rounds=3, budget_s=float("inf"))
    m = measure_interleaved(overwriting(2.0), overwriting(3.0), "cpu", stop=stop, warmup_rounds=2, seed=1)
    assert m.out_base.tolist() == [1.0] * 3 and m.out_head.tolist() == [1.0] * 3
