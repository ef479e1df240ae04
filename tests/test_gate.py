import numpy as np
import pytest

from perfgate import gate
from perfgate.policy import GateSettings, Policy, parse
from tests.helpers import bench

S = GateSettings()


def _samples(med, n=30, cv=0.03, seed=0):
    return list(np.random.default_rng(seed).normal(med, med * cv, n))


def test_known_shift_is_a_regression_with_a_p_value():
    v = gate.judge_latency("c", _samples(11.0, seed=1), _samples(10.0, seed=2), S)
    assert v.verdict == gate.REGRESSION and v.p_value < S.alpha and v.change_pct == pytest.approx(10, abs=3)


def test_identical_distributions_alarm_no_more_than_the_stated_rate():
    alarms = sum(
        gate.judge_latency("c", _samples(10.0, seed=2 * i), _samples(10.0, seed=2 * i + 1), S).verdict == gate.REGRESSION
        for i in range(200)
    )
    assert alarms <= 2  # alpha 0.01 and a 5% effect floor


def test_big_but_noisy_change_is_inconclusive_and_small_significant_one_unchanged():
    noisy = gate.judge_latency("c", [10, 30, 9, 31, 10], [10, 11, 29, 9, 30], S)
    assert noisy.verdict in (gate.INCONCLUSIVE, gate.UNCHANGED)
    tiny = gate.judge_latency("c", _samples(10.2, n=200, cv=0.01, seed=3), _samples(10.0, n=200, cv=0.01, seed=4), S)
    assert tiny.verdict == gate.UNCHANGED  # significant, but under the 5% tolerance
    assert gate.judge_latency("c", [10, 30, 10, 30], [10, 10, 10, 10], S).verdict == gate.INCONCLUSIVE


def test_improvement():
    assert gate.judge_latency("c", _samples(8.0, seed=5), _samples(10.0, seed=6), S).verdict == gate.IMPROVEMENT


def test_memory_tolerance_with_absolute_slack():
    assert gate.judge_memory("c", 125.0, 100.0, S).verdict == gate.REGRESSION
    assert gate.judge_memory("c", 110.0, 100.0, S).verdict == gate.UNCHANGED  # 5% + 16 MiB slack
    assert gate.judge_memory("c", 10.0, 100.0, S).verdict == gate.IMPROVEMENT


def test_accuracy_and_speedup():
    assert gate.judge_accuracy("c", 0.01, 0.001, S).verdict == gate.REGRESSION
    assert gate.judge_accuracy("c", float("nan"), 0.001, S).verdict == gate.REGRESSION
    assert gate.judge_accuracy("c", 0.0015, 0.001, S).verdict == gate.UNCHANGED
    assert gate.judge_speedup("c", 1.5, 2.0, S).verdict == gate.REGRESSION
    assert gate.judge_speedup("c", 2.0, 2.05, S).verdict == gate.UNCHANGED


def test_compare_case_end_to_end_and_ordering():
    base = bench("a", _samples(10, seed=7), peak_mem_mib=100, rel_l2=1e-3, speedup=2.0)
    cur = bench("a", _samples(20, seed=8), peak_mem_mib=300, rel_l2=1e-3, speedup=2.0)
    verdicts = gate.sort_verdicts(gate.compare_case(cur, base, Policy()))
    assert {v.metric: v.verdict for v in verdicts} == {"latency": "regression", "memory": "regression", "accuracy": "unchanged", "speedup": "unchanged"}
    assert verdicts[0].verdict == gate.REGRESSION
    assert gate.compare_case(cur, None, Policy())[0].verdict == gate.NO_BASELINE
    cur["extra_info"]["unreliable"] = "neighbour busy"
    assert gate.compare_case(cur, base, Policy())[0].verdict == gate.UNRELIABLE


def test_budgets_are_asserted_whatever_the_baseline():
    policy = parse({"budget": [{"model": "m", "gpu": "*Test*", "min_fps": 30, "max_p90_ms": 33}]})
    cur = bench("a", [40.0] * 5, fps=25.0)
    v = {x.metric: x.verdict for x in gate.judge_budgets(cur, policy, "Test GPU")}
    assert v == {"budget:fps": gate.BUDGET, "budget:p90_ms": gate.BUDGET}
    assert gate.judge_budgets(cur, policy, "Other GPU") == []


def test_ratchet_fails_improvements_only_when_asked():
    vs = [gate.Verdict(case="c", metric="latency", verdict=gate.IMPROVEMENT)]
    assert gate.failing(vs) == [] and gate.failing(vs, fail_on_improvement=True) == vs


def test_unreliable_case_still_gates_memory_and_accuracy_but_not_timing():
    base = bench("a", _samples(10, seed=9), peak_mem_mib=100, rel_l2=1e-3, speedup=2.0)
    cur = bench("a", _samples(30, seed=10), peak_mem_mib=300, rel_l2=1e-3, speedup=0.5, unreliable="neighbour busy")
    v = {x.metric: x.verdict for x in gate.compare_case(cur, base, Policy())}
    assert v == {"latency": gate.UNRELIABLE, "memory": gate.REGRESSION, "accuracy": gate.UNCHANGED}


def test_an_unreliable_baseline_is_no_latency_reference():
    base = bench("a", _samples(10, seed=11), unreliable="recorded on a busy machine")
    v = gate.compare_case(bench("a", _samples(20, seed=12)), base, Policy())
    assert v[0].verdict == gate.INCONCLUSIVE and "re-record" in v[0].message


def test_normalised_latency_cancels_a_machine_wide_slowdown_but_catches_the_code_s():
    base, base_ref = _samples(10, seed=11), _samples(2, seed=12)
    # The whole machine 30% slower: step and reference alike. Raw ms regress; the ratios do not.
    cur, cur_ref = [x * 1.3 for x in _samples(10, seed=13)], [x * 1.3 for x in _samples(2, seed=14)]
    assert gate.judge_latency("c", cur, base, S).verdict == gate.REGRESSION
    v = gate.judge_latency("c", cur, base, S, reference=(cur_ref, base_ref))
    assert v.verdict == gate.UNCHANGED and abs(v.change_pct) < 3
    assert v.current == pytest.approx(np.median(cur)) and "+30" in v.message and "normalised" in v.message  # ms still reported
    # The step alone 20% slower on a machine 17% faster: raw ms hide it, the ratio sees +20%.
    cur, cur_ref = [x * 1.2 * 0.83 for x in _samples(10, seed=15)], [x * 0.83 for x in _samples(2, seed=16)]
    v = gate.judge_latency("c", cur, base, S, reference=(cur_ref, base_ref))
    assert v.verdict == gate.REGRESSION and v.change_pct == pytest.approx(20, abs=4)
    assert gate.judge_latency("c", cur, base, S).verdict == gate.UNCHANGED


def test_entries_normalise_only_when_asked_and_both_sides_have_reference_samples():
    base = bench("a", _samples(10, seed=21), reference_ms=_samples(2, seed=22))
    cur = bench("a", [x * 1.3 for x in _samples(10, seed=23)], reference_ms=[x * 1.3 for x in _samples(2, seed=24)])
    judge = lambda c, b, s=S: gate.judge_latency_entries("a", c["extra_info"], b["extra_info"], s)  # noqa: E731
    assert judge(cur, base).verdict == gate.UNCHANGED
    assert judge(cur, base, GateSettings(normalise=False)).verdict == gate.REGRESSION
    old = bench("a", _samples(10, seed=21))  # recorded before reference samples existed
    v = judge(cur, old)  # +30% raw: not failed on raw ms alone under a tolerance meant for ratios
    assert v.verdict == gate.INCONCLUSIVE and "the baseline has no reference samples" in v.message and "re-record" in v.message
    gpu = bench("a", [x * 1.3 for x in _samples(10, seed=23)])
    assert judge(gpu, old).message.startswith("median")  # neither side normalisable: no note
    assert parse({"gate": {"normalise": False}}).defaults.normalise is False


def test_speedups_on_different_bases_are_not_compared():
    base = bench("a", _samples(10, seed=31), speedup=2.0)  # an old baseline: raw-ms speedup, no basis recorded
    cur = bench("a", _samples(10, seed=32), speedup=0.5, speedup_basis="normalised_median")
    (v,) = [v for v in gate.compare_case(cur, base, Policy()) if v.metric == "speedup"]
    assert v.verdict == gate.INCONCLUSIVE and "not comparable" in v.message
    cur["extra_info"]["speedup_basis"] = "median_ms"
    (v,) = [v for v in gate.compare_case(cur, base, Policy()) if v.metric == "speedup"]
    assert v.verdict == gate.REGRESSION


def test_a_re_measured_case_is_judged_on_its_pooled_runs():
    base = bench("a", _samples(10, seed=41))
    cur = bench("a", _samples(10, seed=42))  # the last run alone: unchanged
    cur["extra_info"]["pooled"] = {"runs": 3, "samples_ms": _samples(10, seed=42) + _samples(13, seed=43) + _samples(13, seed=44),
                                   "reference_ms": None, "unreliable": None}
    (lat,) = [v for v in gate.compare_case(cur, base, Policy()) if v.metric == "latency"]
    assert lat.verdict == gate.REGRESSION  # two slow runs of three, as the session judged it
    cur["extra_info"]["pooled"]["unreliable"] = "neighbour busy in re-measurement 1"
    (lat,) = [v for v in gate.compare_case(cur, base, Policy()) if v.metric == "latency"]
    assert lat.verdict == gate.UNRELIABLE
