import time

import pytest
import torch

from perfgate.measure import CpuTimer, StopRule, WarmupRule, contention, make_timer, measure, warmup_settled


def test_first_call_is_timed_apart_from_steady_state():
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)  # a "compile" on the first call only
        return torch.ones(2)

    m = measure(step, "cpu", stop=StopRule(min_rounds=5, max_rounds=5, budget_s=1), warmup=WarmupRule(min_rounds=1, max_rounds=3, window=1))
    assert m.first_call_s >= 0.05
    assert max(m.samples_ms) < 50
    assert len(m.samples_ms) == 5
    assert m.timer == "CpuTimer" and m.memory.method in ("vmhwm", "rss_sampler")
    assert torch.equal(m.output, torch.ones(2))


def test_warmup_waits_until_samples_settle():
    rule = WarmupRule(min_rounds=2, max_rounds=50, window=3, tolerance=0.1)
    assert not warmup_settled([10, 5, 3, 2, 1, 1], rule)
    assert warmup_settled([10, 5, 1.0, 1.0, 1.05, 1.0, 1.0, 1.02], rule)


def test_stops_at_max_rounds_on_noise():
    import random

    random.seed(0)
    m = measure(lambda: time.sleep(random.choice([0, 0.002])), "cpu", stop=StopRule(precision=0.001, min_rounds=3, max_rounds=12, budget_s=5))
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
    with pytest.raises((RuntimeError, AssertionError, AttributeError)):
        make_timer("cuda")
