"""perfgate.history.dashboard: the figure that heads each case, its baseline and tolerance, what
needs attention. Built from real producers' output: the committed CPU baseline, the committed
portable count baseline (perfgate.counts) and runs made from them as the store keeps them
(tests/history/year.py)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from perfgate.gate.policy import Policy, parse
from perfgate.history import dashboard as d
from perfgate.history.runs import Run, build_series
from tests.history import year

CPU_FP = json.loads(year.CPU_BASELINE.read_text())["perfgate"]["fingerprint_id"]


def _runs(n: int, steps=(), noise: float = 0.0) -> list[Run]:
    template = year.cpu_counts_template()
    rng = np.random.default_rng(3)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    return [
        Run(
            f"/s/{i:04d}-pr.json",
            year.make_run(
                template, index=i, when=start + timedelta(hours=i), cases=None, rng=rng, steps=steps, noise=noise
            ),
        )
        for i in range(n)
    ]


def _baselines(tmp_path: Path, policy: Policy = Policy()) -> d.Baselines:
    (tmp_path / "counts").mkdir()
    shutil.copy(year.COUNTS_BASELINE, tmp_path / "counts" / year.COUNTS_BASELINE.name)
    (tmp_path / CPU_FP).mkdir()
    shutil.copy(year.CPU_BASELINE, tmp_path / CPU_FP / "0001_baseline.json")
    return d.Baselines(tmp_path, policy)


def test_a_counted_cpu_case_is_headed_by_its_instructions_a_gpu_case_by_its_median():
    counted = Run("/s/c.json", year.cpu_counts_template()).benchmarks[0]
    timed = Run("/s/t.json", json.loads(year.CPU_BASELINE.read_text())).benchmarks[0]
    assert d.headline_metric(counted) == d.INSTRUCTIONS
    assert d.headline_metric(timed) == d.NORMALISED  # a CPU run without counts: the ratio the gate judges
    gpu = json.loads(year.CPU_BASELINE.read_text())
    for b in gpu["benchmarks"]:
        b["extra_info"].update(device="cuda:0", normalised_median=None, reference_ms=None)
    assert d.headline_metric(Run("/s/g.json", gpu).benchmarks[0]) == d.MEDIAN


def test_the_count_baseline_and_the_gates_tolerance_are_the_gates_own(tmp_path):
    policy = parse({"override": [{"device": "cpu", "metric": "instructions", "instructions_tolerance": 0.005}]})
    base = _baselines(tmp_path, policy)
    run = _runs(1)[0]
    bench = next(b for b in run.benchmarks if b.case_id == "owl-image-decoder-tiny-baseline")
    found = base.for_case(CPU_FP, bench, d.INSTRUCTIONS)
    counts = json.loads(year.COUNTS_BASELINE.read_text())["cases"]["owl-image-decoder-tiny-baseline"]
    assert found.value == counts["instructions_per_step"] and found.tolerance == 0.005
    assert found.source == f"counts/{year.COUNTS_BASELINE.name}"
    timed = base.for_case(CPU_FP, bench, d.NORMALISED)  # the machine's recorded baseline, its rounds' noise
    assert timed.source == f"{CPU_FP}/0001_baseline.json" and timed.tolerance == 0.05
    assert timed.noise is not None and 0 < timed.noise < 0.5
    other = base.for_case("cuda-elsewhere", bench, d.MEDIAN)
    assert other.value is None and "no baseline recorded" in other.source


def test_attention_ranks_a_count_step_beyond_tolerance_above_the_unchanged(tmp_path):
    base = _baselines(tmp_path)
    runs = _runs(12, steps=[year.Step("*owl-image-decoder*", 8, 1.02)])
    out = {}
    for s in build_series(runs, d.INSTRUCTIONS):
        newest = next(b for b in runs[-1].benchmarks if b.fullname == s.fullname)
        out[s.name] = d.figures(s, d.INSTRUCTIONS, newest, base.for_case(CPU_FP, newest, d.INSTRUCTIONS))
    stepped = out["test_step[owl-image-decoder-tiny-baseline]"]
    assert stepped.attention == "beyond tolerance"
    assert abs(stepped.newest_change_pct - 2.0) < 1e-6 and abs(stepped.change_pct[0]) < 1e-6
    assert stepped.beside.keys() == {d.MEDIAN}  # milliseconds beside the count
    ranked = sorted(out.values(), key=d.attention_order)
    assert ranked[0] is stepped and {f.attention for f in ranked[1:]} == {"within tolerance"}
    failed = d.figures(
        stepped.series,
        d.INSTRUCTIONS,
        runs[-1].benchmarks[0],
        stepped.baseline,
        verdicts=[{"case": "x", "metric": "latency", "verdict": "regression"}],
    )
    assert failed.attention == "regression" and d.attention_order(failed) < d.attention_order(stepped)


def test_the_optimisation_history_keeps_every_variant_of_the_newest_full_run():
    timed = json.loads(year.CPU_BASELINE.read_text())
    later = year.cpu_counts_template()  # a later run of the baseline variants only
    later["commit_info"]["time"] = "2027-01-01T00:00:00+00:00"
    runs = [Run("/s/all.json", timed), Run("/s/pr.json", later)]
    rows = d.optimisation_history(runs, "owl-image-decoder")
    variants = {
        b["extra_info"]["variant"] for b in timed["benchmarks"] if b["extra_info"]["model"] == "owl-image-decoder"
    }
    assert {r.variant for r in rows} == variants and len(variants) > 1
    speedups = [r.speedup for r in rows if r.speedup is not None]
    assert speedups == sorted(speedups, reverse=True)  # fastest first
    assert next(r.speedup for r in rows if r.variant == "baseline") == 1.0


def test_a_gpu_case_shows_its_device_time_and_launches_beside_its_median(tmp_path):
    gpu = json.loads(year.CPU_BASELINE.read_text())
    for b in gpu["benchmarks"]:
        b["extra_info"].update(device="cuda:0", normalised_median=None, reference_ms=None)
    first = gpu["benchmarks"][0]["extra_info"]
    first.update(device_ms_per_step=0.25 * first["median_ms"], kernels_per_step=42.0)
    runs = [Run("/s/g.json", gpu)]
    series = next(s for s in build_series(runs, d.MEDIAN) if s.fullname == gpu["benchmarks"][0]["fullname"])
    newest = runs[0].benchmarks[0]
    f = d.figures(series, d.MEDIAN, newest, d.Baseline(value=None, tolerance=0.05, source="none"))
    assert f.beside == {"device_ms_per_step": 0.25 * first["median_ms"], "kernels_per_step": 42.0}
    plain = d.figures(series, d.MEDIAN, runs[0].benchmarks[1], d.Baseline(value=None, tolerance=0.05, source="none"))
    assert "device_ms_per_step" not in plain.beside  # not recorded: nothing shown
