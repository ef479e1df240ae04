"""The gate-quality experiment: logic on synthetic runs, the Wilson interval, the criterion, the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfgate import gate
from perfgate.ab import quality as quality_ab
from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.gate.settings import GateSettings
from perfgate.quality import experiment as q
from perfgate.quality import rates as qr
from tests.helpers import empty_pyproject


class FakeMeasurer:
    """Deterministic runs: 0.02 ms per layer with 1% Gaussian noise, contention from a schedule."""

    def __init__(
        self,
        *,
        cv: float = 0.01,
        contention: list[float] | None = None,
        slow_calls: set[int] | None = None,
        drift: float = 0.0,
    ) -> None:
        self.calls: list[int] = []
        self.cv = cv
        self.contention = contention or []
        self.slow_calls = slow_calls or set()  # call numbers whose step (not reference) a neighbour makes 30% slower
        self.drift = drift  # each run's machine speed: log-normal with this sigma, on step and reference alike

    def __call__(self, layers: int) -> q.ChainRun:
        i = len(self.calls)
        self.calls.append(layers)
        rng = np.random.default_rng(i)
        scale = math.exp(self.drift * rng.standard_normal())
        samples = (
            0.02 * layers * scale * (1.3 if i in self.slow_calls else 1.0) * (1 + self.cv * rng.standard_normal(60))
        )
        reference = 1.0 * scale * (1 + self.cv * rng.standard_normal(60))
        return q.ChainRun(
            layers=layers,
            samples_ms=samples.tolist(),
            reference_ms=reference.tolist(),
            contention_cores=self.contention[i] if i < len(self.contention) else 0.0,
        )


def test_layers_scale_the_work_exactly_and_reject_fractions():
    assert [q.layers_for(100, s) for s in (0, 2, 3, 5, 10, 20)] == [100, 102, 103, 105, 110, 120]
    assert q.layers_for(20, 5) == 21
    with pytest.raises(ValueError, match="not a whole number"):
        q.layers_for(10, 5)
    with pytest.raises(ValueError):
        q.layers_for(100, -5)


def test_unchanged_code_never_alarms_and_a_20pct_slowdown_always_does():
    fake = FakeMeasurer()
    cs = q.run_experiment(fake, depth=100, slowdowns_pct=(0, 20), comparisons=6)
    by = {r.slowdown_pct: r for r in qr.rates(cs, "default")}
    assert (by[0].n, by[0].alarms, by[0].current_runs) == (6, 0, 6)  # nothing to re-measure
    assert (by[20].n, by[20].alarms) == (6, 6)
    assert by[20].current_runs == 6 * 3  # each regression confirmed by both re-measurements
    assert by[20].median_change_pct == pytest.approx(20, abs=1)
    assert qr.smallest_detected(qr.rates(cs, "default")) == 20


def test_runs_are_interleaved_round_robin_with_alternating_order_and_checkpointed_per_round():
    fake = FakeMeasurer()
    saved: list[int] = []
    q.run_experiment(
        fake,
        depth=100,
        slowdowns_pct=(0, 5),
        comparisons=2,
        rules=(q.GateRule(name="default", settings=GateSettings(remeasure=0)),),
        checkpoint=lambda done: saved.append(len(done)),
    )
    # comparison 1 of each slowdown: baseline first; comparison 2: current first.
    assert fake.calls == [100, 100, 100, 105, 100, 100, 105, 100]
    assert saved == [2, 4]


def test_a_one_off_slow_run_is_re_measured_away_as_the_session_does():
    base_first = FakeMeasurer(slow_calls={1})  # the first current run is hit by a neighbour
    c = q.compare(
        base_first,
        100,
        100,
        [q.GateRule(name="default"), q.GateRule(name="no-remeasure", settings=GateSettings(remeasure=0))],
        slowdown_pct=0,
    )
    assert c.verdicts == {"default": gate.UNCHANGED, "no-remeasure": gate.REGRESSION}
    assert len(c.currents) == 3  # pooled: both re-measurements are taken, then judged with the suspect run

    persistent = FakeMeasurer(slow_calls={1, 2, 3})
    c = q.compare(persistent, 100, 100, [q.GateRule(name="default")], slowdown_pct=0)
    assert c.verdicts["default"] == gate.REGRESSION and len(c.currents) == 3  # remeasure=2: 1 + 2 runs


def test_sequential_verdict_asks_for_another_run_only_while_a_regression_is_unconfirmed():
    fake = FakeMeasurer(slow_calls={1, 2})
    base, slow1, slow2 = [fake(100)], fake(100), fake(100)
    rule = q.GateRule(name="d", settings=GateSettings(remeasure_pooled=False))
    assert q.sequential_verdict(base, [slow1], rule) == (None, 1)
    assert q.sequential_verdict(base, [slow1, slow2], rule) == (None, 2)
    assert q.sequential_verdict(base, [slow1, slow2, fake(100)], rule) == (gate.UNCHANGED, 3)
    assert q.sequential_verdict(base, [slow1], replace(rule, settings=GateSettings(remeasure=0))) == (
        gate.REGRESSION,
        1,
    )
    # Pooled (the default): all re-measurements are taken, then judged once; two slow of three still regress.
    assert q.sequential_verdict(base, [slow1, slow2], q.GateRule(name="p")) == (None, 2)
    assert q.sequential_verdict(base, [slow1, slow2, fake(100)], q.GateRule(name="p")) == (gate.REGRESSION, 3)
    assert q.sequential_verdict(base, [slow1], replace(rule, baseline_runs=2)) == (
        None,
        1,
    )  # needs a second baseline run


def test_pooled_confirmation_judges_all_re_measurements_together():
    # Two of three current runs are slow (+30%): "each" lets the last, normal one clear the case,
    # "pooled" sees the median of the pooled samples still 30% up.
    fake = FakeMeasurer(slow_calls={1, 2})
    rules = [q.GateRule(name="each", settings=GateSettings(remeasure_pooled=False)), q.GateRule(name="pooled")]
    c = q.compare(fake, 100, 100, rules, slowdown_pct=0)
    assert len(c.currents) == 3 and c.verdicts["each"] == gate.UNCHANGED and c.verdicts["pooled"] == gate.REGRESSION
    # One slow run among three: pooled, the two normal ones outvote it.
    c = q.compare(FakeMeasurer(slow_calls={1}), 100, 100, rules, slowdown_pct=0)
    assert c.verdicts == {"each": gate.UNCHANGED, "pooled": gate.UNCHANGED} and len(c.currents) == 3
    assert GateSettings().remeasure_pooled  # the session's default


def test_pooled_baseline_runs_dilute_a_lucky_fast_baseline():
    # The first baseline run is 30% slow (a neighbour): against it a +20% current is hidden; pooled
    # with two more baseline runs the median is the true one again.
    fake = FakeMeasurer(slow_calls={0})
    rules = [q.GateRule(name="one"), q.GateRule(name="three", baseline_runs=3)]
    c = q.compare(fake, 100, 120, rules, slowdown_pct=20)
    assert fake.calls[:4] == [100, 120, 100, 100]  # the session's pair first, then the extra baseline runs
    assert len(c.baselines) == 3
    assert c.verdicts["one"] != gate.REGRESSION and c.verdicts["three"] == gate.REGRESSION


def test_contended_runs_are_unreliable_counted_apart_and_retried():
    # Every run of the first two comparisons is contended (0.5 cores > 0.25), then none.
    fake = FakeMeasurer(contention=[0.5] * 4)
    cs = q.run_experiment(fake, depth=100, slowdowns_pct=(0,), comparisons=3)
    (r,) = qr.rates(cs, "default")
    assert (r.n, r.unreliable, r.alarms) == (3, 2, 0)
    assert [c.verdicts["default"] for c in cs] == [
        gate.UNRELIABLE,
        gate.UNRELIABLE,
        gate.UNCHANGED,
        gate.UNCHANGED,
        gate.UNCHANGED,
    ]
    # A machine that never quietens: attempts stop at twice the target, nothing is judged.
    cs = q.run_experiment(FakeMeasurer(contention=[1.0] * 100), depth=100, slowdowns_pct=(0,), comparisons=3)
    (r,) = qr.rates(cs, "default")
    assert (r.n, r.unreliable) == (0, 6) and math.isnan(r.rate)
    assert qr.smallest_detected([r]) is None


def test_a_contended_regression_remeasurement_makes_the_verdict_unreliable():
    fake = FakeMeasurer(slow_calls={1}, contention=[0.0, 0.0, 0.9])
    c = q.compare(fake, 100, 100, [q.GateRule(name="default")], slowdown_pct=0)
    assert c.verdicts["default"] == gate.UNRELIABLE and len(c.currents) == 3  # a contended run in the pool
    fake = FakeMeasurer(slow_calls={1}, contention=[0.0, 0.0, 0.9])
    c = q.compare(
        fake, 100, 100, [q.GateRule(name="each", settings=GateSettings(remeasure_pooled=False))], slowdown_pct=0
    )
    assert c.verdicts["each"] == gate.UNRELIABLE and len(c.currents) == 2


def _wilson_closed_form(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(0, 50), (1, 50), (48, 50), (50, 50), (7, 20)])
def test_wilson_interval_matches_the_closed_form(k, n):
    lo, hi = qr.wilson_interval(k, n)
    assert (lo, hi) == pytest.approx(_wilson_closed_form(k, n), abs=1e-9)
    assert lo <= k / n <= hi


def test_wilson_interval_of_nothing_is_everything():
    assert qr.wilson_interval(0, 0) == (0.0, 1.0)
    assert qr.wilson_interval(0, 50)[1] == pytest.approx(0.0714, abs=1e-4)  # 0/50 still allows 7%


def _rate(s: float, alarms: int, n: int = 50) -> qr.Rate:
    lo, hi = qr.wilson_interval(alarms, n)
    return qr.Rate(
        slowdown_pct=s,
        n=n,
        alarms=alarms,
        rate=alarms / n,
        ci_lo=lo,
        ci_hi=hi,
        unreliable=0,
        inconclusive=0,
        improvements=0,
        median_change_pct=None,
        current_runs=n,
    )


def test_smallest_detected_needs_few_false_alarms_and_steady_detection_above():
    rs = [_rate(0, 1), _rate(2, 10), _rate(5, 48), _rate(10, 50), _rate(20, 50)]
    assert qr.smallest_detected(rs) == 5  # 48/50 = 96% >= 95%; 1/50 false alarms allowed
    assert qr.smallest_detected([_rate(0, 2), *rs[1:]]) is None  # 2/50 false alarms: the gate fails the criterion
    assert qr.smallest_detected(rs[1:]) is None  # no unchanged-code measurement, no claim
    # A dip above does not count: 5% is only "detected" if 10% and 20% are too.
    assert qr.smallest_detected([_rate(0, 0), _rate(5, 50), _rate(10, 40), _rate(20, 50)]) == 20
    assert qr.smallest_detected([_rate(0, 0), _rate(5, 47), _rate(10, 47)]) is None


def test_report_and_noise_from_synthetic_runs():
    cs = q.run_experiment(
        FakeMeasurer(cv=0.01),
        depth=100,
        slowdowns_pct=(0, 20),
        comparisons=4,
        rules=(q.GateRule(name="default"), q.GateRule(name="tol30", settings=GateSettings(latency_tolerance=0.3))),
    )
    data = qr.report(
        cs,
        [q.GateRule(name="default"), q.GateRule(name="tol30", settings=GateSettings(latency_tolerance=0.3))],
        depth=100,
        config={"x": 1},
        samples=False,
    )
    assert data["rules"]["default"]["smallest_detected_pct"] == 20
    assert data["rules"]["tol30"]["smallest_detected_pct"] is None  # a 30% floor misses 20%
    assert data["noise"]["runs"] == 4 * 2 + 4  # baselines of both slowdowns + the unchanged currents
    assert data["noise"]["raw_ms"]["between_run_cv"] < 0.01 and data["noise"]["normalised"]["between_run_cv"] < 0.01
    assert data["noise"]["reference_ms"]["median"] == pytest.approx(1.0, rel=0.01)
    assert "samples_ms" not in data["comparisons"][0]["baselines"][0]
    json.dumps(data)  # JSON-ready


def test_chain_workload_measures_in_a_fresh_process_and_leaves_threads_alone():
    import torch

    wl = q.ChainWorkload(depth=2, width=8, batch=2, threads=1)
    threads = torch.get_num_threads()
    run = q.FreshProcessMeasurer(wl)(3)
    assert run.layers == 3 and len(run.samples_ms) >= 10 and all(x > 0 for x in run.samples_ms)
    assert (
        len(run.reference_ms) == len(run.samples_ms) and run.reference_median_ms > 0
    )  # as the suite measures on a CPU
    inproc = q.measure_chain(wl, 2, reference=False)
    assert inproc.layers == 2 and inproc.reference_ms is None and torch.get_num_threads() == threads


def test_normalising_cancels_machine_drift_that_makes_the_raw_gate_alarm():
    """Each run's machine is up to ~+-30% faster or slower (sigma 15%), step and reference alike:
    judged on raw ms unchanged code alarms often; judged on step/reference ratios it does not,
    and a 20% slowdown is still caught every time."""
    rules = (q.GateRule(name="default"), q.GateRule(name="raw", settings=GateSettings(normalise=False, remeasure=0)))
    cs = q.run_experiment(FakeMeasurer(drift=0.15), depth=100, slowdowns_pct=(0, 20), comparisons=20, rules=rules)
    norm = {r.slowdown_pct: r for r in qr.rates(cs, "default")}
    raw = {r.slowdown_pct: r for r in qr.rates(cs, "raw", rules[1].settings)}
    assert norm[0].alarms == 0 and norm[20].alarms == 20
    assert raw[0].alarms >= 3  # ~36% expected: half of the pairs differ by more than ~10%
    assert norm[20].median_change_pct == pytest.approx(20, abs=1)
    assert abs(raw[20].median_change_pct - 20) > abs(norm[20].median_change_pct - 20)


def test_cli_small_run_writes_json(tmp_path, capsys):
    out = tmp_path / "gq.json"
    rc = main(
        [
            "gate-quality",
            "--comparisons",
            "2",
            "--slowdowns",
            "0,20",
            "--depth",
            "5",
            "--width",
            "8",
            "--batch",
            "2",
            "--threads",
            "1",
            "--isolation",
            "inprocess",
            "--wait-quiet-s",
            "0",
            "--also",
            "normalise=false",
            "--also",
            "latency_tolerance=0.1,remeasure=1",
            "--also",
            "baseline_runs=2,remeasure_pooled=false",
            "--pyproject",
            str(empty_pyproject(tmp_path)),
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    rates = data["rules"]["default"]["rates"]
    assert [r["slowdown_pct"] for r in rates] == [0, 20]
    assert all(r["n"] == 2 or r["n"] + r["unreliable"] == 4 for r in rates)  # contended runs retried, up to 2x
    assert data["rules"]["latency_tolerance=0.1,remeasure=1"]["rule"]["settings"]["remeasure"] == 1
    assert data["rules"]["baseline_runs=2,remeasure_pooled=false"]["rule"]["settings"]["remeasure_pooled"] is False
    assert (
        data["config"]["partial"] is False
        and data["config"]["threads"] == 1
        and data["config"]["reference"]["depth"] == 30
    )
    assert all(len(c["baselines"]) == 2 for c in data["comparisons"])
    assert {b["layers"] for c in data["comparisons"] for b in c["baselines"]} == {5}
    assert {cur["layers"] for c in data["comparisons"] for cur in c["currents"]} == {5, 6}
    text = capsys.readouterr()
    assert "smallest slowdown detected" in text.out and "+20%" in text.out and "gate-quality:" in text.err

    # The stored runs judged again under other rules, measuring nothing.
    again = tmp_path / "again.json"
    assert (
        main(
            [
                "gate-quality",
                "--from-json",
                str(out),
                "--pyproject",
                str(empty_pyproject(tmp_path)),
                "--also",
                "remeasure=0",
                "--also",
                "baseline_runs=3",
                "--json",
                str(again),
            ]
        )
        == 0
    )
    redo = json.loads(again.read_text())
    assert redo["config"]["rejudged_from"] == str(out) and len(redo["comparisons"]) == len(data["comparisons"])
    assert [r["n"] for r in redo["rules"]["default"]["rates"]] == [r["n"] for r in rates]  # same runs, same verdicts
    assert all(
        r["n"] == 0
        and r["not_judged"] + r["unreliable"]
        == len([c for c in data["comparisons"] if c["slowdown_pct"] == r["slowdown_pct"]])
        for r in redo["rules"]["baseline_runs=3"]["rates"]
    )  # only two baseline runs were taken
    assert "not judged" in capsys.readouterr().out


def test_rejudge_reproduces_the_live_verdicts_and_marks_missing_runs():
    rules = [
        q.GateRule(name="each", settings=GateSettings(remeasure_pooled=False)),
        q.GateRule(name="each0", settings=GateSettings(remeasure=0)),
    ]
    live = q.run_experiment(
        FakeMeasurer(slow_calls={1, 5, 9}), depth=100, slowdowns_pct=(0, 10), comparisons=4, rules=rules
    )
    stored = q.load_comparisons(json.loads(json.dumps(qr.report(live, rules, depth=100, config={}))))
    again = q.rejudge(stored, [*rules, q.GateRule(name="pooled")])
    assert [c.verdicts["each"] for c in again] == [c.verdicts["each"] for c in live]
    assert [c.verdicts["each0"] for c in again] == [c.verdicts["each0"] for c in live]
    # "pooled" needs both re-measurements after a suspicion; "each" stopped after one where it cleared the case.
    assert [len(c.currents) for c in again] == [2, 3, 1, 3, 1, 3, 1, 3]  # slow_calls 1 (0%), 5 (1st re-run, 0%), ...
    assert [c.verdicts["pooled"] == q.NOT_JUDGED for c in again] == [len(c.currents) == 2 for c in again]
    assert q.rejudge(stored, [q.GateRule(name="b2", baseline_runs=2)])[0].verdicts["b2"] == q.NOT_JUDGED
    with pytest.raises(ValueError, match="no-samples"):
        q.load_comparisons(qr.report(live, rules, depth=100, config={}, samples=False))


def test_a_reports_runs_read_back_as_chain_runs_key_for_key():
    """The report's runs, as `perfgate gate-quality --json` writes them, read back through ChainRun and
    written again: the same keys and values; a report without a run's layers is no gate-quality report."""
    rules = [q.GateRule(name="default")]
    live = q.run_experiment(FakeMeasurer(), depth=100, slowdowns_pct=(0, 10), comparisons=2, rules=rules)
    written = json.loads(json.dumps(qr.report(live, rules, depth=100, config={})))
    stored = q.load_comparisons(written)
    runs = [r for c in written["comparisons"] for r in (*c["baselines"], *c["currents"])]
    again = [r.to_json() for c in stored for r in c.runs]
    assert [list(r) for r in again] == [list(r) for r in runs]  # the same keys, in their order
    derived = ("median_ms", "reference_median_ms")  # of the samples as written (rounded to 5 decimals)
    assert [{k: v for k, v in r.items() if k not in derived} for r in again] == [
        {k: v for k, v in r.items() if k not in derived} for r in runs
    ]
    assert all(a[k] == pytest.approx(r[k], rel=1e-5) for a, r in zip(again, runs) for k in derived)
    assert q.ChainRun.from_json(runs[0]) == stored[0].baselines[0]
    del written["comparisons"][0]["currents"][0]["layers"]
    with pytest.raises(ValueError, match="missing 'layers'"):
        q.load_comparisons(written)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--slowdowns", "0,x"], "--slowdowns"),
        (["--depth", "10", "--slowdowns", "0,5"], "whole number"),
        (["--also", "latency_tol=0.1"], "--also"),
        (["--also", "confirm=pooled"], "--also"),
        (["--precision", "2"], "--precision"),
        (["--from-json", "/nonexistent/gq.json"], "--from-json"),
        (["--comparisons", "0"], "--comparisons"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_4(argv, needle, capsys):
    assert main(["gate-quality", "--isolation", "inprocess", *argv]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_quiet_measurer_waits_out_neighbours_before_the_first_run_and_after_a_contended_one():
    probes = iter([0.9, 0.8, 0.1, 0.1, 0.6, 0.0])
    fake = FakeMeasurer(contention=[0.0, 0.5, 0.0])
    said: list[str] = []
    fn = q.quiet_measurer(fake, 0.25, probe=lambda: next(probes), progress=said.append)
    fn(100)  # probes 0.9, 0.8, 0.1: waits, then runs
    fn(100)  # no probe after a quiet run; this run is contended (0.5)
    fn(100)  # probes 0.1: quiet, runs
    assert fake.calls == [100, 100, 100] and next(probes) == 0.6  # exactly four probes used
    assert len(said) == 1 and "0.90 cores" in said[0]
    # A machine that never quietens: the wait gives up after the timeout and measures anyway.
    assert q.wait_for_quiet(0.25, timeout_s=0.0, probe=lambda: 2.0) >= 0.0


@pytest.mark.slow
def test_ab_on_a_real_case_writes_both_gates_verdicts_and_rates(tmp_path, capsys, monkeypatch):
    # One unchanged comparison of a real tiny case: interleaved A/B and the stored gate, side by side.
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    out = tmp_path / "ab.json"
    args = ["--ab", "--cases", "physicsnemo-block-tiny-baseline", "--comparisons", "1", "--detect-comparisons", "0"]
    assert main(["gate-quality", *args, "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["comparisons"]
    assert (row["kind"], row["slowdown_pct"], row["interleaved"]["mode"]) == ("local", 0.0, "interleaved")
    assert row["interleaved"]["processes"] >= 3  # a verdict rests on several fresh processes
    (ratios,) = row["interleaved"]["ratios"].values()
    assert all(math.isfinite(r) and r > 0 for r in ratios)  # each process measured both sides
    # Identical code on both sides: no alarm (0 of 51 unchanged comparisons alarmed in docs/gate-quality.md).
    assert row["interleaved"]["verdicts"]["physicsnemo-block-tiny-baseline"] in (gate.UNCHANGED, gate.INCONCLUSIVE)
    assert row["stored"]["repo_policy"]["physicsnemo-block-tiny-baseline"] in gate.VERDICT_ORDER
    rules = {r.rule: r for r in quality_ab.rates([row])}
    assert set(rules) == {"same-job A/B", "stored, repo policy", "stored, default 5% (first judgement)"}
    assert rules["same-job A/B"].mode == "interleaved" and rules["same-job A/B"].n == 1
    assert "same-job A/B (interleaved)" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--comparisons", "--detect-comparisons", "--shared-comparisons"])
def test_ab_refuses_a_negative_count_in_one_line(option, capsys):
    # A negative count never reached 0 in the round-robin: the experiment would never end.
    assert main(["gate-quality", "--ab", option, "-1"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip().endswith(f"{option} -1: give a count of 0 or more")
