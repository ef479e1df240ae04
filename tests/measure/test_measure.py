import time

import pytest
import torch

from perfgate.measure.core import CpuTimer, StopRule, WarmupRule, contention, make_timer, measure, warmup_settled


class FakeClock:
    """The timer's clock (time.perf_counter_ns), advanced only by the steps: what a step "takes" is
    exact, so the tests assert the loop's bookkeeping, never how busy the machine was."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def takes(self, ms: float) -> None:
        self.ns += round(ms * 1e6)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(time, "perf_counter_ns", c)
    return c


def test_first_call_is_timed_apart_from_steady_state(clock):
    calls = []

    def step():
        calls.append(1)
        clock.takes(50.0 if len(calls) == 1 else 1.0)  # a "compile" on the first call only
        return torch.ones(2)

    m = measure(
        step,
        "cpu",
        stop=StopRule(min_rounds=5, max_rounds=5, budget_s=1),
        warmup=WarmupRule(min_rounds=1, max_rounds=3, window=1),
    )
    assert m.first_call_s == pytest.approx(0.05)
    assert m.samples_ms == [1.0] * 5
    assert m.timer == "CpuTimer" and m.memory.method in ("vmhwm", "rss_sampler")
    assert torch.equal(m.output, torch.ones(2))


def test_warmup_waits_until_samples_settle():
    rule = WarmupRule(min_rounds=2, max_rounds=50, window=3, tolerance=0.1)
    assert not warmup_settled([10, 5, 3, 2, 1, 1], rule)
    assert warmup_settled([10, 5, 1.0, 1.0, 1.05, 1.0, 1.0, 1.02], rule)


def test_stops_at_max_rounds_on_noise(clock):
    import random

    random.seed(0)
    # No budget to run out (a stalled busy VM once spent 5 s in 4 rounds): only the rounds can stop it.
    m = measure(
        lambda: clock.takes(random.choice([1.0, 3.0])),
        "cpu",
        stop=StopRule(precision=0.001, min_rounds=3, max_rounds=12, budget_s=float("inf")),
    )
    assert len(m.samples_ms) == 12 and m.stop == "max_rounds"


def test_contention_counts_only_other_processes():
    # 3 s of all-process CPU time, 1 s of it ours, over 2 s of wall time: one other core busy.
    assert contention((10.0, 5.0), (13.0, 6.0), 2.0) == pytest.approx(1.0)
    assert contention((10.0, 5.0), (11.0, 6.0), 2.0) == 0.0


def test_cuda_timer_is_never_used_on_cpu():
    assert isinstance(make_timer("cpu"), CpuTimer)
    with pytest.raises(ValueError, match="unsupported device"):
        make_timer("meta")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU build's behaviour")
def test_cuda_event_timer_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    # A CPU build fails at the events; a CUDA build (PyPI's, as tests-matrix.yml installs) at the first use.
    with pytest.raises((RuntimeError, AssertionError, AttributeError)):
        make_timer("cuda").time_ms(lambda: None)


def test_reference_is_timed_after_every_round_and_the_stop_rule_sees_the_ratio(clock):
    m = measure(
        lambda: clock.takes(4.0),
        "cpu",
        stop=StopRule(min_rounds=10, max_rounds=20, precision=0.5, budget_s=5),
        reference=lambda: clock.takes(2.0),
    )
    assert m.reference_ms is not None and len(m.reference_ms) == len(m.samples_ms)
    # Exact ratios of 2 are as precise as can be: the stop rule, judging ratios, stops at its minimum.
    assert m.samples_ms == [4.0] * 10 and m.reference_ms == [2.0] * 10
    assert (
        measure(lambda: None, "cpu", stop=StopRule(min_rounds=3, max_rounds=3)).reference_ms is None
    )  # off unless asked


def test_reference_normalises_cpu_only():
    with pytest.raises(ValueError, match="CPU timings only"):
        measure(lambda: None, "cuda", reference=lambda: None)


def test_reference_step_is_built_once_and_runs():
    from perfgate.measure.core import REFERENCE_SHAPE, reference_step

    ref = reference_step()
    assert ref is reference_step()
    assert tuple(ref().shape) == (REFERENCE_SHAPE["batch"], REFERENCE_SHAPE["width"])
