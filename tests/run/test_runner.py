"""The case runner without a model: in-run speedups, re-measurement, budgets and the chosen metrics
from stand-in results (perfgate.run.runner)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.cases.runner import Case, CaseResult
from perfgate.measure.core import Measurement
from perfgate.measure.memory import PeakMemory
from perfgate.record import CaseRecord
from perfgate.run import runner as run_mod
from perfgate.run.config import RunConfig
from perfgate.run.runner import Host, Runner


def _result(case: Case, median_ms: float, normalised: float | None) -> CaseResult:
    m = Measurement(
        samples_ms=[median_ms] * 10,
        first_call_s=0.0,
        warmup_rounds=0,
        stop="precise",
        memory=PeakMemory(peak_mem_mib=1.0, reserved_mem_mib=None, method="vmhwm"),
        device="cpu",
        timer="CpuTimer",
    )
    rec = CaseRecord(
        model=case.model,
        variant=case.variant,
        device="cpu",
        samples_ms=m.samples_ms,
        median_ms=median_ms,
        normalised_median=normalised,
        contention_cores=0.0,
    )
    return CaseResult(case=case, measurement=m, record=rec)


def _runner(config: RunConfig) -> Runner:
    return Runner(config=config, host=Host.detect(config))


def test_in_run_speedup_uses_reference_normalised_medians_so_drift_between_cases_cancels(tmp_path, monkeypatch):
    # Eager measured on a fast moment (10 ms, 2.0x the reference), the variant on a machine 50%
    # slower (7.5 ms but 1.0x the reference): the code is 2x faster, the milliseconds say 1.33x.
    results = {"baseline": (10.0, 2.0), "bf16": (7.5, 1.0), "compile": (5.0, None)}
    monkeypatch.setattr(run_mod, "run_case", lambda case, opts, progress=None: _result(case, *results[case.variant]))
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path))
    cases = {v: Case(model="m", size="tiny", variant=v, device="cpu") for v in results}
    s.measure(cases["baseline"])
    bf16 = s.measure(cases["bf16"]).extra_info
    assert bf16["speedup"] == pytest.approx(2.0) and bf16["speedup_basis"] == "normalised_median"
    # A variant without reference samples is not compared with a normalised eager value.
    assert "speedup" not in s.measure(cases["compile"]).extra_info


def _timed(case: Case, samples_ms: list[float]) -> CaseResult:
    r = _result(case, sorted(samples_ms)[len(samples_ms) // 2], None)
    r.record = replace(r.record, samples_ms=samples_ms, reference_ms=[1.0] * len(samples_ms))
    return r


@pytest.mark.parametrize(
    "pooled,slow_runs,verdict,runs",
    [
        (True, 1, "unchanged", 3),  # one slow run of three: the pooled median is the normal one
        (True, 2, "regression", 3),  # two of three: still slow when pooled
        (False, 1, "unchanged", 2),  # each: the first re-measurement clears it
        (False, 2, "unchanged", 3),  # each: the last re-measurement clears it
    ],
)
def test_a_suspected_regression_is_re_measured_pooled_or_each(tmp_path, monkeypatch, pooled, slow_runs, verdict, runs):
    from perfgate.gate.policy import Policy
    from perfgate.gate.settings import GateSettings

    rng = __import__("numpy").random.default_rng(0)
    normal = lambda: list(10 * (1 + 0.01 * rng.standard_normal(40)))  # noqa: E731
    calls: list[int] = []

    def run_case(case, opts, progress=None):
        calls.append(1)
        return _timed(case, [x * (1.5 if len(calls) <= slow_runs else 1.0) for x in normal()])

    monkeypatch.setattr(run_mod, "run_case", run_case)
    policy = Policy(defaults=GateSettings(remeasure_pooled=pooled))
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path, policy=policy))
    base = _timed(Case(model="m", size="tiny", variant="bf16", device="cpu"), normal())
    monkeypatch.setattr(Host, "baseline_record", lambda self, name: (base.record, Path("baselines/x/0001_b.json")))
    outcome = s.run(Case(model="m", size="tiny", variant="bf16", device="cpu"), "case")
    assert outcome.record is not None and outcome.error is None, outcome.traceback
    (lat,) = [v for v in outcome.verdicts if v.metric == "latency"]
    assert (lat.verdict, len(calls)) == (verdict, runs)
    assert ("3 runs pooled" in lat.message) == pooled
    info = outcome.record.to_extra_info()
    assert info["remeasured"] == runs - 1
    assert ("pooled" in info) == pooled and (not pooled or len(info["pooled"]["samples_ms"]) == 120)


def test_a_p90_budget_raises_the_rounds_so_the_budget_is_judged(tmp_path, monkeypatch):
    from perfgate.gate.policy import parse
    from perfgate.measure.core import measure
    from perfgate.measure.stats import summarize

    seen = []
    monkeypatch.setattr(
        run_mod, "run_case", lambda case, opts, progress=None: seen.append(opts) or _result(case, 1, None)
    )
    policy = parse({"budget": [{"model": "m", "variant": "bf16", "max_p90_ms": 33}]})
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path, policy=policy))
    s.measure(Case(model="m", size="tiny", variant="bf16", device="cpu"))
    s.measure(Case(model="m", size="tiny", variant="baseline", device="cpu"))
    budgeted, plain = seen
    assert (budgeted.stop.min_rounds, budgeted.stop.max_rounds) == (64, 200)
    assert plain.stop == s.config.run_options.stop and plain.stop.min_rounds == 10
    # The measurement honours it: a precise step stops at 64 rounds, enough for a p90.
    m = measure(lambda: sum(range(100)), "cpu", stop=budgeted.stop)
    assert len(m.samples_ms) >= 64 and summarize(m.samples_ms)["p90_ms"] is not None


def test_the_gpu_pull_request_gate_judges_only_the_chosen_metrics_and_never_re_measures(tmp_path, monkeypatch):
    # PERFGATE_MODE=pr: wall time is A/B's; the stored run judges kernels, device time, memory, accuracy.
    calls: list[int] = []

    def run_case(case, opts, progress=None):
        calls.append(1)
        r = _timed(case, [15.0] * 40)  # +50%: a latency regression the stored gate would re-measure
        r.record = replace(r.record, kernels_per_step=12.0, device_ms_per_step=4.0, peak_mem_mib=1.0)
        return r

    monkeypatch.setattr(run_mod, "run_case", run_case)
    chosen = ("kernels", "device_time", "memory", "accuracy")
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path, gate_metrics=chosen))
    case = Case(model="m", size="tiny", variant="bf16", device="cpu")
    base = _timed(case, [10.0] * 40)
    base.record = replace(base.record, kernels_per_step=11.0, device_ms_per_step=4.0, peak_mem_mib=1.0)
    monkeypatch.setattr(Host, "baseline_record", lambda self, name: (base.record, Path("baselines/x/0001_b.json")))
    verdicts = s.run(case, "case").verdicts
    assert {v.metric: v.verdict for v in verdicts} == {
        "kernels": "regression",
        "device_time": "unchanged",
        "memory": "unchanged",
    }
    assert len(calls) == 1
    monkeypatch.setattr(Host, "baseline_record", lambda self, name: None)
    assert [v.verdict for v in s.run(case, "case").verdicts] == ["no baseline"]  # says why nothing was judged


def test_the_pull_request_gate_keeps_the_memory_budget_and_graph_breaks(tmp_path):
    """A time budget goes with latency (A/B's on a pull request); the memory budget with memory and
    the graph-break check are no timing: the stored run of PERFGATE_MODE=pr still judges them."""
    chosen = ("kernels", "device_time", "memory", "accuracy")
    config = RunConfig(device="cpu", baselines_root=tmp_path, gate_metrics=chosen)
    judged = {
        m: config.judges(m) for m in ("budget:peak_mem_mib", "budget:fps", "budget:p90_ms", "graph_breaks", "latency")
    }
    assert judged == {
        "budget:peak_mem_mib": True,
        "budget:fps": False,
        "budget:p90_ms": False,
        "graph_breaks": True,
        "latency": False,
    }


def test_a_variant_unable_here_is_skipped_and_a_failing_case_is_its_own_error(tmp_path, monkeypatch):
    """The runner returns what became of the case instead of raising: a VariantError while building
    is a skip with its reason; any other error (a timeout, out of memory, a bug in the model) is an
    error verdict and the traceback. A broken baseline file is the run's error: it is raised."""
    from perfgate.cases.conversions import VariantError
    from perfgate.gate.store import BaselineError

    raised: list[BaseException] = []

    def run_case(case, opts, progress=None):
        raise raised[-1]

    monkeypatch.setattr(run_mod, "run_case", run_case)
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path))
    case = Case(model="m", size="tiny", variant="bf16", device="cpu")
    raised.append(VariantError("no bf16 kernels on this CPU"))
    skipped = s.run(case, "node::m")
    assert (skipped.skipped, skipped.record, skipped.verdicts) == ("no bf16 kernels on this CPU", None, ())
    raised.append(RuntimeError("shape mismatch\nsecond line"))
    failed = s.run(case, "node::m")
    assert failed.error == "RuntimeError: shape mismatch (the traceback with -v)" and failed.record is None
    assert [(v.case, v.metric, v.verdict) for v in failed.verdicts] == [("node::m", "run", "error")]
    assert failed.failing == failed.verdicts and "RuntimeError: shape mismatch" in (failed.traceback or "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        failed.error = None  # type: ignore[misc]
    raised.append(BaselineError("baselines/x/0001_a.json: not JSON"))
    with pytest.raises(BaselineError):
        s.run(case, "node::m")


def test_an_earlier_pass_that_cannot_be_read_fails_every_case_not_the_first_only(tmp_path, monkeypatch):
    monkeypatch.setattr(run_mod, "run_case", lambda case, opts, progress=None: _result(case, 10.0, None))
    missing = tmp_path / "missing.json"
    s = _runner(RunConfig(device="cpu", baselines_root=tmp_path, gate_enabled=False, earlier_passes=(missing,)))
    for model in ("a", "b"):
        out = s.run(Case(model=model, size="tiny", variant="baseline", device="cpu"), f"node::{model}")
        assert out.record is None and out.error is not None and f"{missing}: cannot read" in out.error


def test_the_run_outcome_is_built_once_with_its_notices_and_unjudged_line(tmp_path):
    from perfgate import gate
    from perfgate.run.outcome import run_outcome

    rec = CaseRecord(model="m", variant="bf16", device="cpu", samples_ms=[1.0])
    unreliable = gate.Verdict(case="node::m", metric="latency", verdict=gate.UNRELIABLE, message="contended")
    common = dict(fingerprint={"cpu_model": "x"}, fingerprint_id="abc", skips={"m-tiny-fp8": "no FP8 here"})
    out = run_outcome(
        **common,
        records={"node::m": rec},
        verdicts=[unreliable],
        gate_enabled=True,
        fail_unjudged=True,
        no_baseline_notice="perfgate: no baseline recorded",
    )
    assert out.no_baseline and out.verdicts.notices == ("perfgate: no baseline recorded",)
    assert out.unjudged_fails and out.unjudged is not None and out.unjudged.endswith("--perfgate-fail-unjudged)")
    assert out.measured and out.verdicts.skipped == {"m-tiny-fp8": "no FP8 here"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.recorded = tmp_path  # type: ignore[misc]
    quiet = run_outcome(**common, records={}, verdicts=[], gate_enabled=True, no_baseline_notice="unused")
    assert not quiet.no_baseline and quiet.verdicts.notices == () and not quiet.measured and quiet.unjudged is None
