import pytest
import torch

from perfgate.measure.core import CpuTimer, StopRule, WarmupRule, make_timer, measure, warmup_settled
from tests import fake_clock
from tests.fake_clock import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return fake_clock.install(monkeypatch)


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


def test_each_round_times_the_reference_then_calls_the_step_untimed_then_times_it(clock):
    # The order every recorded step/reference ratio was measured in. The untimed call takes 9 ms,
    # the timed one 4 ms: samples of 4 ms show which call was timed.
    calls: list[str] = []

    def step():
        calls.append("step")
        clock.takes(9.0 if calls.count("step") % 2 else 4.0)

    def reference():
        calls.append("reference")
        clock.takes(2.0)

    m = measure(
        step,
        "cpu",
        stop=StopRule(min_rounds=3, max_rounds=3, budget_s=5),
        warmup=WarmupRule(min_rounds=1, max_rounds=1, window=1),
        reference=reference,
    )
    # 5 reference calls before the first call, the first call, 1 warm-up round, then the rounds
    # (the step's count is even again after warm-up: its next call is the untimed one).
    assert calls[:7] == ["reference"] * 5 + ["step"] * 2
    rounds = calls[7 : 7 + 9]
    assert rounds == ["reference", "step", "step"] * 3
    assert m.samples_ms == [4.0] * 3 and m.reference_ms == [2.0] * 3


def test_reference_normalises_cpu_only():
    with pytest.raises(ValueError, match="CPU timings only"):
        measure(lambda: None, "cuda", reference=lambda: None)


def test_reference_step_is_built_once_and_runs():
    from perfgate.measure.core import REFERENCE_SHAPE, reference_step

    ref = reference_step()
    assert ref is reference_step()
    assert tuple(ref().shape) == (REFERENCE_SHAPE["batch"], REFERENCE_SHAPE["width"])
