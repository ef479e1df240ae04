from dataclasses import replace

import numpy as np
import pytest

from perfgate import gate
from perfgate.gate import metrics
from perfgate.gate.policy import METRIC_NAMES, Policy, parse
from perfgate.gate.settings import GateSettings
from perfgate.record import CaseRecord, MinMeanMax, Pooled, Telemetry, TelemetryGpu
from tests.helpers import bench

S = GateSettings()


def rec(samples, **kw) -> CaseRecord:
    """A case record as the runner writes it (through the same extra_info the JSON holds)."""
    return CaseRecord.from_extra_info(bench("a", samples, **kw)["extra_info"])


def compare(cur: CaseRecord, base: CaseRecord | None, policy=Policy()) -> list[gate.Verdict]:
    return gate.compare("a", cur, base, policy)


def _samples(med, n=30, cv=0.03, seed=0):
    return list(np.random.default_rng(seed).normal(med, med * cv, n))


def test_known_shift_is_a_regression_with_a_p_value():
    v = metrics.judge_latency_samples("c", _samples(11.0, seed=1), _samples(10.0, seed=2), S)
    assert v.verdict == gate.REGRESSION and v.p_value < S.alpha and v.change_pct == pytest.approx(10, abs=3)


def test_identical_distributions_alarm_no_more_than_the_stated_rate():
    alarms = sum(
        metrics.judge_latency_samples("c", _samples(10.0, seed=2 * i), _samples(10.0, seed=2 * i + 1), S).verdict
        == gate.REGRESSION
        for i in range(200)
    )
    assert alarms <= 2  # alpha 0.01 and a 5% effect floor


def test_big_but_noisy_change_is_inconclusive_and_small_significant_one_unchanged():
    noisy = metrics.judge_latency_samples("c", [10, 30, 9, 31, 10], [10, 11, 29, 9, 30], S)
    assert noisy.verdict == gate.INCONCLUSIVE
    tiny = metrics.judge_latency_samples(
        "c", _samples(10.2, n=200, cv=0.01, seed=3), _samples(10.0, n=200, cv=0.01, seed=4), S
    )
    assert tiny.verdict == gate.UNCHANGED  # significant, but under the 5% tolerance
    assert metrics.judge_latency_samples("c", [10, 30, 10, 30], [10, 10, 10, 10], S).verdict == gate.INCONCLUSIVE


def test_improvement():
    assert (
        metrics.judge_latency_samples("c", _samples(8.0, seed=5), _samples(10.0, seed=6), S).verdict == gate.IMPROVEMENT
    )


def test_memory_tolerance_with_absolute_slack():
    base = rec([1.0], peak_mem_mib=100.0)
    assert metrics.judge_memory("c", rec([1.0], peak_mem_mib=125.0), base, S).verdict == gate.REGRESSION
    assert (
        metrics.judge_memory("c", rec([1.0], peak_mem_mib=110.0), base, S).verdict == gate.UNCHANGED
    )  # 5% + 16 MiB slack
    assert metrics.judge_memory("c", rec([1.0], peak_mem_mib=10.0), base, S).verdict == gate.IMPROVEMENT
    assert metrics.judge_memory("c", rec([1.0], peak_mem_mib=None), base, S) is None  # nothing to judge


def test_accuracy_and_speedup():
    base = rec([1.0], rel_l2=0.001, speedup=2.0)
    assert metrics.judge_accuracy("c", rec([1.0], rel_l2=0.01), base, S).verdict == gate.REGRESSION
    assert metrics.judge_accuracy("c", rec([1.0], rel_l2=float("nan")), base, S).verdict == gate.REGRESSION
    assert metrics.judge_accuracy("c", rec([1.0], rel_l2=0.0015), base, S).verdict == gate.UNCHANGED
    assert metrics.judge_speedup("c", rec([1.0], speedup=1.5), base, S).verdict == gate.REGRESSION
    assert metrics.judge_speedup("c", rec([1.0], speedup=2.05), base, S).verdict == gate.UNCHANGED
    assert metrics.judge_speedup("c", rec([1.0], speedup=3.0), base, S).verdict == gate.IMPROVEMENT


def test_compare_case_end_to_end_and_ordering():
    base = rec(_samples(10, seed=7), peak_mem_mib=100, rel_l2=1e-3, speedup=2.0)
    cur = rec(_samples(20, seed=8), peak_mem_mib=300, rel_l2=1e-3, speedup=2.0)
    verdicts = gate.sort_verdicts(compare(cur, base))
    assert {v.metric: v.verdict for v in verdicts} == {
        "latency": "regression",
        "memory": "regression",
        "accuracy": "unchanged",
        "speedup": "unchanged",
    }
    assert verdicts[0].verdict == gate.REGRESSION
    assert compare(cur, None)[0].verdict == gate.NO_BASELINE
    cur = replace(cur, unreliable="neighbour busy")
    assert compare(cur, base)[0].verdict == gate.UNRELIABLE


def test_every_gated_metric_is_one_row_the_policy_knows():
    names = ("latency", "memory", "energy", "accuracy", "speedup", "instructions", "device_time", "kernels")
    assert METRIC_NAMES == tuple(m.name for m in metrics.GATED) == names
    for m in metrics.GATED:
        assert hasattr(S, m.setting) and m.better in ("lower", "higher")


def test_budgets_are_asserted_whatever_the_baseline():
    policy = parse({"budget": [{"model": "m", "gpu": "*Test*", "max_p90_ms": 33}]})
    cur = rec([40.0] * 64)
    v = {x.metric: x.verdict for x in gate.absolute_checks("a", cur, policy, "Test GPU")}
    assert v == {"budget:p90_ms": gate.BUDGET}
    assert gate.absolute_checks("a", cur, policy, "Other GPU") == []


def test_an_fps_budget_is_judged_on_the_frames_per_second_the_runner_records():
    # The record comes from the runner itself (a real step of the tiny image decoder), so a unit
    # slip in how it derives fps from the step's frames and median shows here.
    import models  # noqa: F401
    from perfgate.cases.runner import Case, RunOptions, run_case
    from perfgate.measure.core import WarmupRule
    from perfgate.measure.stats import StopRule

    r = run_case(
        Case(model="owl-image-decoder", size="micro", variant="baseline", device="cpu"),
        RunOptions(stop=StopRule(min_rounds=3, max_rounds=3), warmup=WarmupRule(min_rounds=1, max_rounds=1, window=1)),
    )
    cur = CaseRecord.from_extra_info(r.extra_info)
    frames = r.extra_info["items_per_step"]["frames"]
    assert cur.fps == pytest.approx(frames / (cur.median_ms / 1e3))
    v = gate.absolute_checks("a", cur, parse({"budget": [{"model": cur.model, "min_fps": cur.fps * 1.5}]}), "cpu")
    assert [(x.metric, x.verdict) for x in v] == [("budget:fps", gate.BUDGET)]
    v = gate.absolute_checks("a", cur, parse({"budget": [{"model": cur.model, "min_fps": cur.fps / 1.5}]}), "cpu")
    assert [(x.metric, x.verdict) for x in v] == [("budget:fps", gate.UNCHANGED)]


def test_a_p90_budget_needs_64_rounds_and_is_not_judged_from_fewer():
    policy = parse({"budget": [{"model": "m", "gpu": "*Test*", "max_p90_ms": 33}]})
    assert gate.budget_min_rounds(policy, "m", "tiny", "baseline", "Test GPU") == 64
    assert gate.budget_min_rounds(policy, "m", "tiny", "baseline", "Other GPU") == 0
    assert gate.budget_min_rounds(parse({"budget": [{"min_fps": 30}]}), "m", "tiny", "baseline", "x") == 0
    (v,) = gate.absolute_checks("a", rec([40.0] * 63), policy, "Test GPU")
    assert v.verdict == gate.INCONCLUSIVE and v.metric == "budget:p90_ms" and v.current is None
    assert "insufficient samples (63 < 64" in v.message and "--perfgate-min-rounds 64" in v.message
    assert not gate.failing([v])


def test_accuracy_outside_the_variants_tolerance_and_graph_breaks_fail_without_a_baseline():
    cur = rec([1.0], rel_l2=0.5, tolerance={"rel_l2": 0.1, "cosine": 0.99, "psnr_db": None}, graph_breaks=2)
    v = gate.absolute_checks("a", cur, Policy(), "")
    assert [(x.metric, x.verdict) for x in v] == [("accuracy", gate.REGRESSION)] and "0.5 > 0.1" in v[0].message
    v = gate.absolute_checks("a", cur, Policy(), "", fail_on_graph_break=True)
    assert [x.metric for x in v] == ["accuracy", "graph_breaks"] and "2 graph break(s)" in v[1].message
    nan = rec([1.0], tolerance={"rel_l2": 0.1, "cosine": 0.99})
    nan.accuracy["finite"] = 0.0
    assert [x.message for x in gate.absolute_checks("a", nan, Policy(), "")] == ["output has NaN or Inf"]


def test_ratchet_fails_improvements_only_when_asked():
    vs = [gate.Verdict(case="c", metric="latency", verdict=gate.IMPROVEMENT)]
    assert gate.failing(vs) == [] and gate.failing(vs, fail_on_improvement=True) == vs


def test_unreliable_case_still_gates_memory_and_accuracy_but_not_timing():
    base = rec(_samples(10, seed=9), peak_mem_mib=100, rel_l2=1e-3, speedup=2.0)
    cur = rec(_samples(30, seed=10), peak_mem_mib=300, rel_l2=1e-3, speedup=0.5, unreliable="neighbour busy")
    v = {x.metric: x.verdict for x in compare(cur, base)}
    assert v == {"latency": gate.UNRELIABLE, "memory": gate.REGRESSION, "accuracy": gate.UNCHANGED}


def test_an_unreliable_baseline_is_no_latency_reference():
    base = rec(_samples(10, seed=11), unreliable="recorded on a busy machine")
    v = compare(rec(_samples(20, seed=12)), base)
    assert v[0].verdict == gate.INCONCLUSIVE and "re-record" in v[0].message


def test_normalised_latency_cancels_a_machine_wide_slowdown_but_catches_the_code_s():
    base, base_ref = _samples(10, seed=11), _samples(2, seed=12)
    # The whole machine 30% slower: step and reference alike. Raw ms regress; the ratios do not.
    cur, cur_ref = [x * 1.3 for x in _samples(10, seed=13)], [x * 1.3 for x in _samples(2, seed=14)]
    assert metrics.judge_latency_samples("c", cur, base, S).verdict == gate.REGRESSION
    v = metrics.judge_latency_samples("c", cur, base, S, reference=(cur_ref, base_ref))
    assert v.verdict == gate.UNCHANGED and abs(v.change_pct) < 3
    assert (
        v.current == pytest.approx(np.median(cur)) and "+30" in v.message and "normalised" in v.message
    )  # ms still reported
    # The step alone 20% slower on a machine 17% faster: raw ms hide it, the ratio sees +20%.
    cur, cur_ref = [x * 1.2 * 0.83 for x in _samples(10, seed=15)], [x * 0.83 for x in _samples(2, seed=16)]
    v = metrics.judge_latency_samples("c", cur, base, S, reference=(cur_ref, base_ref))
    assert v.verdict == gate.REGRESSION and v.change_pct == pytest.approx(20, abs=4)
    assert metrics.judge_latency_samples("c", cur, base, S).verdict == gate.UNCHANGED


def test_entries_normalise_only_when_asked_and_both_sides_have_reference_samples():
    base = rec(_samples(10, seed=21), reference_ms=_samples(2, seed=22))
    cur = rec([x * 1.3 for x in _samples(10, seed=23)], reference_ms=[x * 1.3 for x in _samples(2, seed=24)])
    judge = lambda c, b, s=S: metrics.judge_latency("a", c, b, s)  # noqa: E731
    # The machine 30% slower, step and reference alike: from one run that cannot be told from an op
    # both share getting slower, so not "unchanged" (the reference moved beyond its noise).
    v = judge(cur, base)
    assert (
        v.verdict == gate.INCONCLUSIVE
        and "reference workload itself moved +" in v.message
        and "is a regression" in v.message
    )
    assert judge(cur, base, GateSettings(normalise=False)).verdict == gate.REGRESSION
    old = rec(_samples(10, seed=21))  # recorded before reference samples existed
    v = judge(cur, old)  # +30% raw: not failed on raw ms alone under a tolerance meant for ratios
    assert (
        v.verdict == gate.INCONCLUSIVE
        and "the baseline has no reference samples" in v.message
        and "re-record" in v.message
    )
    gpu = rec([x * 1.3 for x in _samples(10, seed=23)])
    assert judge(gpu, old).message.startswith("median")  # neither side normalisable: no note
    assert parse({"gate": {"normalise": False}}).defaults.normalise is False


def test_speedups_on_different_bases_are_not_compared():
    base = rec(_samples(10, seed=31), speedup=2.0)  # an old baseline: raw-ms speedup, no basis recorded
    cur = rec(_samples(10, seed=32), speedup=0.5, speedup_basis="normalised_median")
    (v,) = [v for v in compare(cur, base) if v.metric == "speedup"]
    assert v.verdict == gate.INCONCLUSIVE and "not comparable" in v.message
    cur = replace(cur, speedup_basis="median_ms")
    (v,) = [v for v in compare(cur, base) if v.metric == "speedup"]
    assert v.verdict == gate.REGRESSION


def test_a_re_measured_case_is_judged_on_its_pooled_runs():
    base = rec(_samples(10, seed=41))
    cur = rec(_samples(10, seed=42))  # the last run alone: unchanged
    pooled = Pooled(runs=3, samples_ms=_samples(10, seed=42) + _samples(13, seed=43) + _samples(13, seed=44))
    cur = replace(cur, pooled=pooled)
    (lat,) = [v for v in compare(cur, base) if v.metric == "latency"]
    assert lat.verdict == gate.REGRESSION  # two slow runs of three, as the session judged it
    cur = replace(cur, pooled=replace(pooled, unreliable="neighbour busy in re-measurement 1"))
    (lat,) = [v for v in compare(cur, base) if v.metric == "latency"]
    assert lat.verdict == gate.UNRELIABLE


def _latency(d: gate.Decision) -> str:
    return next(v.verdict for v in d.verdicts if v.metric == "latency")


def test_decide_re_measures_a_suspect_then_judges_the_runs_pooled():
    base, slow, same = rec(_samples(10, seed=51)), rec(_samples(13, seed=52)), rec(_samples(10, seed=53))
    first = gate.decide("a", [slow], base, Policy())
    assert first.remeasure and _latency(first) == gate.REGRESSION  # the suspect, not yet a verdict
    assert gate.decide("a", [slow, same], base, Policy()).remeasure  # remeasure = 2: one more
    pooled = gate.decide("a", [slow, slow, same], base, Policy())  # two slow of three still regress
    assert not pooled.remeasure and _latency(pooled) == gate.REGRESSION and pooled.record.pooled.runs == 3
    assert "3 runs pooled" in next(v.message for v in pooled.verdicts if v.metric == "latency")
    assert _latency(gate.decide("a", [slow, same, same], base, Policy())) == gate.UNCHANGED  # outvoted
    assert not gate.decide("a", [same], base, Policy()).remeasure


def test_decide_without_pooling_needs_every_re_measurement_to_regress():
    policy = Policy(defaults=GateSettings(remeasure_pooled=False, remeasure=2))
    base, slow, same = rec(_samples(10, seed=61)), rec(_samples(13, seed=62)), rec(_samples(10, seed=63))
    assert gate.decide("a", [slow], base, policy).remeasure
    d = gate.decide("a", [slow, same], base, policy)
    assert not d.remeasure and _latency(d) == gate.UNCHANGED
    d = gate.decide("a", [slow, slow, slow], base, policy)
    assert not d.remeasure and _latency(d) == gate.REGRESSION
    assert not gate.decide("a", [slow], base, Policy(defaults=GateSettings(remeasure=0))).remeasure


def test_unreliable_reasons_come_from_the_gate_settings_and_telemetry():
    cpu = rec([1.0], contention_cores=0.3)
    assert "0.30 cores" in gate.unreliable_reason(cpu, S)
    assert gate.unreliable_reason(cpu, GateSettings(contention_max=0.5)) is None
    gpu = rec([1.0], device="cuda:0", contention_cores=5.0)  # host load is not the GPU's unreliability
    assert gate.unreliable_reason(gpu, S) is None
    gpu = replace(
        gpu,
        telemetry=Telemetry(
            clock_events={"hw_thermal_slowdown": 0.5},
            gpu=TelemetryGpu(max_sm_clock_mhz=1980.0),
            busy_sm_clock_mhz=MinMeanMax(min=900.0, mean=1000.0, max=1100.0),
            gpu_other_processes_max=1,
        ),
    )
    reason = gate.unreliable_reason(gpu, S)
    assert (
        "hw_thermal_slowdown in 50% of samples" in reason
        and "51% of the maximum" in reason
        and "1 other process" in reason
    )


def test_a_shared_op_slowdown_is_never_an_improvement_and_a_step_slowdown_still_fails():
    """Every F.linear done twice slows the reference more than a step that is part linear: the ratio
    reads an improvement while raw ms grew (the first version's blind spot)."""
    base, base_ref = _samples(10, seed=71), _samples(2, seed=72)
    shared = rec([x * 1.2 for x in _samples(10, seed=73)], reference_ms=[x * 1.6 for x in _samples(2, seed=74)])
    v = metrics.judge_latency("a", shared, rec(base, reference_ms=base_ref), S)
    assert (
        v.verdict == gate.INCONCLUSIVE
        and "improvement relative to the machine" in v.message
        and "moved +59.9%" in v.message
    )
    # The step alone 20% slower while the machine got 30% faster: the ratio's regression stands.
    local = rec([x * 1.2 * 0.7 for x in _samples(10, seed=75)], reference_ms=[x * 0.7 for x in _samples(2, seed=76)])
    v = metrics.judge_latency("a", local, rec(base, reference_ms=base_ref), S)
    assert v.verdict == gate.REGRESSION and "reference workload itself moved -30" in v.message
    # A reference within its noise: the normalised verdict as it was, with no note.
    calm = rec([x * 1.01 for x in _samples(10, seed=77)], reference_ms=_samples(2, seed=78))
    v = metrics.judge_latency("a", calm, rec(base, reference_ms=base_ref), S)
    assert v.verdict == gate.UNCHANGED and "reference workload itself" not in v.message


def test_device_time_is_not_judged_on_a_gpu_run_its_telemetry_marks_unreliable():
    """Slowed clocks and other processes on the GPU lengthen the kernels themselves: a run marked
    unreliable for them gets no device-time verdict; the same figures on a clean run regress."""
    from dataclasses import replace

    base = CaseRecord(
        model="m", size="s", variant="v", device="cuda:0", samples_ms=[1.0] * 12, median_ms=1.0, device_ms_per_step=0.5
    )
    slow = replace(base, device_ms_per_step=0.6, unreliable="GPU clocks were slowed: timings are not trustworthy")
    assert "device_time" not in {v.metric for v in gate.compare("c", slow, base, Policy())}
    clean = {v.metric: v.verdict for v in gate.compare("c", replace(slow, unreliable=None), base, Policy())}
    assert clean["device_time"] == "regression", clean
