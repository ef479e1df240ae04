import numpy as np
import pytest

from perfgate.measure.stats import (
    TAIL_MIN_SAMPLES,
    StopRule,
    median_ci,
    relative_ci_halfwidth,
    stop_reason,
    summarize,
    tail_ms,
    tail_note,
)


def test_summary_on_known_samples():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_ms"] == 3.0
    assert s["min_ms"] == 1.0 and s["max_ms"] == 100.0
    assert s["mean_ms"] == pytest.approx(22.0)
    assert s["iqr_ms"] == pytest.approx(2.0)
    assert s["p90_ms"] is None and s["p99_ms"] is None  # 5 samples support no tail
    assert s["n"] == 5


def test_tails_are_reported_only_from_mlperf_loadgen_sample_floors():
    x = list(np.random.default_rng(3).lognormal(0.0, 0.3, 700))
    for key, q, floor in (("p90_ms", 90, 64), ("p99_ms", 99, 662)):
        assert TAIL_MIN_SAMPLES[key] == floor
        assert tail_ms(x[: floor - 1], key) is None
        assert tail_ms(x[:floor], key) == pytest.approx(np.percentile(x[:floor], q))
    s = summarize(x[:100])
    assert s["p90_ms"] == pytest.approx(np.percentile(x[:100], 90)) and s["p99_ms"] is None
    assert tail_note(100) == "insufficient samples for tails: p99 needs >= 662 (MLPerf LoadGen), have 100"
    assert "p90 needs >= 64, p99 needs >= 662" in tail_note(17) and tail_note(662) is None


def test_median_ci_covers_the_true_median_at_the_stated_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        x = rng.lognormal(0.0, 0.5, size=40)  # skewed like timings; true median exp(0) = 1
        lo, hi = median_ci(x, 0.95)
        hits += lo <= 1.0 <= hi
    assert 0.93 <= hits / 400 <= 0.995


def test_median_ci_narrows_with_more_samples():
    rng = np.random.default_rng(1)
    x = rng.normal(10, 1, 1000)
    assert relative_ci_halfwidth(x[:1000]) < relative_ci_halfwidth(x[:30])


def test_stop_rule_respects_bounds_and_precision():
    rule = StopRule(precision=0.01, min_rounds=5, max_rounds=50, budget_s=10)
    assert stop_reason([1.0] * 4, 0.0, rule) is None  # below min rounds, even if precise
    assert stop_reason([1.0] * 5, 0.0, rule) == "precise"
    noisy = list(np.random.default_rng(2).lognormal(0, 1, 20))
    assert stop_reason(noisy, 0.0, rule) is None
    assert stop_reason(noisy, 11.0, rule) == "budget"
    assert stop_reason(noisy * 3, 0.0, rule) == "max_rounds"


@pytest.mark.parametrize(
    "kw", [dict(precision=0), dict(confidence=1.0), dict(min_rounds=10, max_rounds=5), dict(budget_s=0)]
)
def test_stop_rule_rejects_bad_values(kw):
    with pytest.raises(ValueError):
        StopRule(**kw)
