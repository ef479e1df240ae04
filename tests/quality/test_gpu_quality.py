"""`scripts/gpu-check --quality`: the GPU gate's quality run, rehearsed on the CPU so that it works
the first time it meets a GPU. Never run on a GPU yet: on the CPU there is no device time and no
kernel count (those gates judge nothing here, and the table says so), and the GPU-side slowdown is
sized from wall time; the CUDA-graph case's captured slowdown needs CUDA and is not rehearsed."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
from pathlib import Path

import pytest

from perfgate.measure import op_counts
from perfgate.quality import gpu_quality as gq
from perfgate.quality.inject import every_nth
from tests.commands.test_gpu_check import ROOT, _env
from tests.helpers import HANG_GUARD_S


def test_the_plan_refuses_a_record_without_noise() -> None:
    with pytest.raises(ValueError, match="passes must be at least 2"):
        gq.Plan(device="cpu", cases=gq.CPU_CASES, passes=1)
    assert every_nth(0.20, 0.02) == 10  # F.linear a fifth of the step: every 10th call twice adds 2%


@pytest.mark.slow
def test_the_quality_run_rehearsed_on_the_cpu_writes_its_detection_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(
        [
            str(ROOT / "scripts" / "gpu-check"),
            "--quality",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--cases",
            "physicsnemo-block:tiny:baseline",
            "--repeats",
            "1",
            "--rounds",
            "3",
            "--",
            "--passes",
            "2",
            "--profile-steps",
            "1",
            "--traces",
            str(out / "traces"),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["health", "quality"] and summary["passed"]
    data = json.loads((out / "quality" / "quality.json").read_text())
    (setup,) = data["setups"]
    assert setup["case"] == "physicsnemo-block-tiny-baseline" and setup["error"] is None
    assert set(setup["linear_every"]) == set(setup["busy_wait_ms"]) == {"1", "2", "5"}
    # Two passes, and the one measured again where they disagreed (a busy VM): each pass's noise counts.
    assert setup["pass_noise"]["latency"]["passes"] == 2 + (setup["record_remeasured"] or 0)
    kinds = sorted((row["kind"], row["size_pct"]) for row in data["rows"])
    assert kinds == [("gpu", 1), ("gpu", 2), ("gpu", 5), ("host", 1), ("host", 2), ("host", 5), ("unchanged", 0)]
    tally = {(t["gate"], t["kind"], t["size_pct"]): t for t in data["tally"]}
    assert len(tally) == 6 * 8  # each gate: 7 conditions and its false alarms over every kind not meant to move it
    for kind, size in kinds:  # wall time is judged three ways; the CPU has no device time or kernels
        totals = {tally[(gate, kind, size)]["total"] for gate in ("wall-stored", "wall-ab", "wall-ab-paired")}
        assert totals == {1}
        assert {tally[(g, kind, size)]["total"] for g in ("device-time", "device-time-ab", "kernels")} == {0}
    table = (out / "summary.md").read_text()
    assert "| device time, stored | - | - |" in table
    assert "| device time, same-job A/B (paired blocks, mean) | - |" in table
    assert "| wall time, same-job A/B (paired rounds) |" in table
    row = data["rows"][0]  # the raw rounds, side by side, so a table can be re-judged offline
    assert len(row["samples_ms"]) == len(row["ab_base_ms"]) == 3
    assert (out / "quality" / "quality.md").read_text() in table  # the detection table in the summary
    # the kept trace (3 steps, gzipped) is the profiler's own and counts as a live window does
    counts = op_counts.counts_from_events(
        op_counts.read_trace(out / "traces" / "physicsnemo-block-tiny-baseline.trace.json.gz"), 3, device_traced=False
    )
    assert counts.aten_ops_per_step.get("aten::linear", 0) >= 1


def test_a_graph_case_gets_its_gpu_side_slowdown_built_in_and_every_comparison_is_judged() -> None:
    # A CUDA graph replays no F.linear: the slowdown must be in place while the case is built (captured).
    # Rehearsed with a plain CPU step standing in for the replay; the capture itself needs CUDA.
    import torch

    original = torch.nn.functional.linear
    builds: list[bool] = []  # per build: was F.linear patched meanwhile
    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)

    def build(spec):
        builds.append(torch.nn.functional.linear is not original)
        return "m-tiny-cudagraphs", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), True

    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "cudagraphs"),), repeats=1, rounds=3, passes=2, profile_steps=1)
    plan = gq.Plan(**{**plan.__dict__, "warmup_s": 0.0})
    saved: list[int] = []  # rows in each checkpoint: one per comparison, so a cut run keeps what it judged
    result = gq.run(plan, build, checkpoint=lambda run: saved.append(len(run.rows)))
    assert saved == [1, 2, 3, 4, 5, 6, 7]
    assert builds == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]  # the case, its second build, the every-call-doubled copy, one per size
    assert torch.nn.functional.linear is original  # nothing left patched
    assert len(result.rows) == 7 and all(r.verdicts["wall-ab"] is not None for r in result.rows)
    assert result.setups[0].linear_every.keys() == {"1", "2", "5"}


def test_kinds_and_unchanged_repeats_choose_the_comparisons_and_a_cut_run_has_some_of_each() -> None:
    """A lease's minutes spent where a goal needs them: many unchanged comparisons (the false-alarm
    bound), host-side slowdowns alone on a launch-bound case; no GPU-side sizing when none is asked."""
    import torch

    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)
    builds: list[str] = []

    def build(spec):
        builds.append(spec[2])
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged", "host"), sizes_pct=(5.0,),
                   repeats=2, unchanged_repeats=4, rounds=3, passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip
    order: list[tuple[str, float]] = []
    result = gq.run(plan, build, checkpoint=lambda run: order.append((run.rows[-1].kind, run.rows[-1].size_pct)))
    assert builds == [
        "baseline",
        "baseline",
    ]  # its second build (the current side), no copy to size a GPU-side slowdown
    assert order == [("unchanged", 0), ("host", 5), ("unchanged", 0), ("host", 5), ("unchanged", 0), ("unchanged", 0)]
    assert result.setups[0].linear_every == {} and result.setups[0].busy_wait_ms.keys() == {"5"}
    tally = {(t.gate, t.kind): t.total for t in result.tally}
    assert tally[("wall-ab", "unchanged")] == 4 and tally[("wall-ab", "host")] == 2
    with pytest.raises(ValueError, match="kinds 'unchanged,slow': choose from unchanged,gpu,host"):
        gq.Plan(device="cpu", cases=gq.CPU_CASES, kinds=("unchanged", "slow"))
    with pytest.raises(ValueError, match="unchanged_repeats must be at least 1"):
        gq.Plan(device="cpu", cases=gq.CPU_CASES, unchanged_repeats=0)


def test_a_failing_device_time_window_loses_its_gate_not_the_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device-time A/B window has not run on a GPU yet: should it fail there, the comparison
    keeps its other gates and says why that one judged nothing."""
    import torch

    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)

    def build(spec):
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(op_counts, "interleaved_device_ms", broken)
    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged",), repeats=1, rounds=3,
                   passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip
    (row,) = gq.run(plan, build).rows
    assert row.verdicts["device-time-ab"] is None and row.verdicts["wall-ab"] is not None
    assert row.messages["device-time-ab"] == "not measured: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"


def test_the_device_time_window_is_asked_for_blocks_and_judged_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's `device_block_steps` reaches the window and the judge: the window's figures are
    per-block means (here the H200 run's own, docs/data/gpu-2026-11-28-h200: the bf16 block's
    GPU-side +2% comparisons #0 and #1, blocked by five), judged as blocks of that many steps."""
    import gzip

    import torch

    from perfgate.measure.device_time import block_means

    run = Path(__file__).resolve().parents[2] / "docs" / "data" / "gpu-2026-11-28-h200" / "quality.json.gz"
    rows = [r for r in json.loads(gzip.decompress(run.read_bytes()))["rows"] if r["kind"] == "gpu"][:2]
    measured = [[m for r in rows for m in block_means(r[key], 5)] for key in ("ab_base_device_ms", "device_ms")]
    asked: list[tuple[int, int, bool]] = []  # (rounds, block steps, sampled meanwhile)
    sampling: list[bool] = []
    real_sampler = gq.gpu_sampler

    @contextlib.contextmanager
    def sampler(device):
        with real_sampler(device) as tel:
            sampling.append(True)
            try:
                yield tel
            finally:
                sampling.pop()

    def window(steps, device, rounds, rng, *, block_steps=1):
        asked.append((rounds, block_steps, bool(sampling)))
        return measured

    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)

    def build(spec):
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    monkeypatch.setattr(op_counts, "interleaved_device_ms", window)
    monkeypatch.setattr(gq, "gpu_sampler", sampler)
    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged",), repeats=1, rounds=3,
                   passes=2, profile_steps=1, warmup_s=0.0, device_rounds=4, device_block_steps=5)  # fmt: skip
    (row,) = gq.run(plan, build).rows
    assert asked == [(4, 5, True)]  # the clocks kept with the comparison were sampled over this window too
    assert row.verdicts["device-time-ab"] == "regression" and "over 4 blocks" in row.messages["device-time-ab"]
    with pytest.raises(ValueError, match="device_block_steps must be at least 1"):
        gq.Plan(device="cpu", cases=gq.CPU_CASES, device_block_steps=0)


def test_the_slower_kernel_kind_runs_sized_and_is_dropped_where_it_adds_launches() -> None:
    """kind "kernel": every Nth F.linear twice as wide (the same launches, more work in each), sized
    like the GPU-side kind and judged by every gate; a step whose wider copy launches another
    number of kernels than its record is no same-launch slowdown, and the set-up says so."""
    import random

    import torch

    from perfgate.output.gpu_quality import detection_markdown

    lin, x = torch.nn.Linear(256, 256), torch.randn(64, 256)

    def build(spec):
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged", "kernel"), sizes_pct=(50.0,),
                   repeats=1, rounds=5, passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip
    result = gq.run(plan, build)
    assert [r.kind for r in result.rows] == ["unchanged", "kernel"]
    assert result.setups[0].wider_every.keys() == {"50"} and result.setups[0].kernel_note is None
    header = "| gate | unchanged | false alarms: unchanged and kinds not meant to move the gate | slower kernel +50% |"
    assert header in detection_markdown(result)
    setup = gq.CaseSetup(case="m-tiny-baseline", bound=None, wall_ms=1.0, device_ms=None)
    _, step, _ = build(None)
    slowed = gq._gpu_slowed(plan, None, build, step, False, setup, random.Random(0), same_launch=True, launches=5.0)
    assert slowed == {}
    assert setup.kernel_note == "not a same-launch slowdown here: None kernel launches per step, not 5.0"
    from perfgate.quality.inject import slow_linear_wider

    undo, seen = slow_linear_wider(1)
    try:
        graphed = gq._holding(step, seen)  # a graph case's step keeps its patch's wider weights alive
        graphed()
    finally:
        undo()
    assert graphed.args[1] is seen and len(seen.made) == 1


def test_the_wider_copies_are_made_before_the_window_that_counts_the_slowed_steps_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the slower-kernel kind is sized from a profiler window of the slowed step, whose
    launches must equal the record's. Each weight's wider copy is a torch.cat made at its first
    call, a kernel of its own on a GPU (the kept H100 trace, ../shared/evidence/2026-11-23-h100:
    `aten::cat` launches CatArrayBatchedCopy): made inside the window, the PhysicsNeMo block's 11
    launches would read ~11.8 and the kind be dropped on every eager case. Rehearsed with the real
    profiler on the CPU, counting what each aten op would launch on a GPU (one kernel per addmm and
    per cat, as the kept trace shows)."""
    import random

    import torch

    lin, x = torch.nn.Linear(64, 64), torch.randn(8, 64)

    def build(spec):
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    def profiled_as_on_a_gpu(step, device, steps):
        ops = op_counts.count_step(step, "cpu", steps, warmup=0).aten_ops_per_step
        launches = ops.get("aten::addmm", 0.0) + ops.get("aten::cat", 0.0)
        return 2.0, launches, {}, {}

    monkeypatch.setattr(gq, "profiled", profiled_as_on_a_gpu)
    monkeypatch.setattr(op_counts, "interleaved_device_ms", lambda steps, device, rounds, rng, **_: [[1.0], [2.0]])
    plan = gq.Plan(device="cuda:0", cases=(("m", "tiny", "baseline"),), kinds=("kernel",), sizes_pct=(2.0,),
                   profile_steps=10)  # fmt: skip
    setup = gq.CaseSetup(case="m-tiny-baseline", bound=None, wall_ms=1.0, device_ms=1.0)
    _, step, _ = build(None)
    slowed = gq._gpu_slowed(plan, None, build, step, False, setup, random.Random(0), same_launch=True, launches=1.0)
    assert setup.kernel_note is None
    assert slowed.keys() == {2.0} and setup.wider_every == {"2": 50}  # share 1.0 (2.0 ms against 1.0) / 2%
    assert setup.linear_calls_per_step == 1


def test_each_comparison_keeps_the_gpus_clocks_and_the_gates_telemetry_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_state through the real nvidia-ml-py over a stand-in driver (tests/fake_nvml.py): a GPU
    held at 1800 of 1980 MHz by its power cap reads as such, and the gate's telemetry rule does not
    distrust it (a power cap is no slowdown reason there: what a lease must show to matter); a
    thermal slowdown it does. The detection table lays the clocks beside the case. The GPU runs the
    comparison's steps: this process's context is open and NVML sees work (utilisation 97%)."""
    import pynvml

    from perfgate.output.gpu_quality import detection_markdown
    from tests.fake_nvml import GIB, FakeGpu, install

    def state_of(gpu: FakeGpu) -> gq.GpuState:
        gpu.compute, gpu.util_pct = [(os.getpid(), GIB)], 97
        install(monkeypatch, gpu)
        sampler = gq.gpu_sampler("cuda:0")
        for _ in range(3):
            sampler.sample()
        sampler.stop()
        return gq.gpu_state(sampler)

    capped = state_of(FakeGpu(sm_mhz=1800, clock_events=pynvml.nvmlClocksEventReasonSwPowerCap))
    assert capped.busy_sm_clock_mhz == 1800 and capped.clock_events == {"sw_power_cap": 1.0}
    assert capped.unreliable is None
    hot = state_of(FakeGpu(sm_mhz=1900, clock_events=pynvml.nvmlClocksEventReasonHwThermalSlowdown))
    assert hot.unreliable and "hw_thermal_slowdown in 100% of samples" in hot.unreliable
    setup = gq.CaseSetup(case="c", bound="device-bound", wall_ms=1.4, device_ms=1.37)
    rows = [
        gq.Comparison(case="c", kind="unchanged", size_pct=0.0, repeat=i, verdicts=dict.fromkeys(gq.GATES, "unchanged"),
                      messages={}, wall_s=0.2, wall_change_pct=0.0, device_change_pct=0.0, gpu_state=st)
        for i, st in enumerate((capped, hot))
    ]  # fmt: skip
    plan = gq.Plan(device="cuda:0", cases=(("c", None, "bf16"),))
    table = detection_markdown(gq.QualityRun(plan=plan, setups=[setup], rows=rows, tally=gq.tally(rows), wall_s=1.0))
    assert "| c | 1800..1900 | - | hw_thermal_slowdown 100%, sw_power_cap 100% | 1/2 |" in table


def _row(kind: str, size: float, verdicts: dict[str, str], repeat: int = 0) -> gq.Comparison:
    return gq.Comparison(case="c", kind=kind, size_pct=size, repeat=repeat, verdicts=verdicts, messages={},
                         wall_s=0.1, wall_change_pct=0.0, device_change_pct=0.0)  # fmt: skip


def test_a_gate_a_kind_does_not_move_counts_its_regressions_as_false_alarms_not_catches() -> None:
    """A busy-wait adds no GPU work: a device-time or kernel-count "regression" on a host-side
    slowdown is a false alarm, not a catch (nor a kernel-count one on the slower-kernel kind, which
    keeps the launches). Such a cell reads '-' and its regressions join the gate's false alarms."""
    from perfgate.output.gpu_quality import detection_markdown

    every = dict.fromkeys(gq.GATES, "unchanged")
    rows = [
        _row("unchanged", 0.0, every),
        _row("host", 2.0, {**every, "wall-ab": "regression", "device-time": "regression"}),
        _row("host", 2.0, {**every, "device-time": "regression", "kernels": "regression"}, repeat=1),
        _row("kernel", 2.0, {**every, "device-time-ab": "regression", "kernels": "regression"}),
    ]
    plan = gq.Plan(device="cuda:0", cases=(("c", None, "bf16"),))
    setup = gq.CaseSetup(case="c", bound="device-bound", wall_ms=1.4, device_ms=1.37)
    table = detection_markdown(gq.QualityRun(plan=plan, setups=[setup], rows=rows, tally=gq.tally(rows), wall_s=1.0))
    # columns: unchanged, false alarms (all), host-side +2%, slower kernel +2%
    assert "| device time, stored | 0/1 | 2/3 | - | 0/1 |" in table
    assert "| kernel counts, stored | 0/1 | 2/4 | - | - |" in table
    assert "| wall time, same-job A/B (unpaired) | 0/1 | 0/1 | 1/2 | 0/1 |" in table
    t = {(r.gate, r.kind, r.size_pct): r for r in gq.tally(rows)}
    assert (t[("wall-ab", "host", 2.0)].caught, t[("wall-ab", "host", 2.0)].total) == (1, 2)
    assert t[("device-time", "host", 2.0)].expected is False
    assert (t[("device-time", gq.FALSE_ALARMS, 0.0)].caught, t[("device-time", gq.FALSE_ALARMS, 0.0)].total) == (2, 3)
    assert (t[("kernels", gq.FALSE_ALARMS, 0.0)].caught, t[("kernels", gq.FALSE_ALARMS, 0.0)].total) == (2, 4)
    assert (t[("wall-ab", gq.FALSE_ALARMS, 0.0)].caught, t[("wall-ab", gq.FALSE_ALARMS, 0.0)].total) == (0, 1)
    assert t[("device-time-ab", "kernel", 2.0)].expected and t[("device-time-ab", "kernel", 2.0)].caught == 1


def test_n_is_chosen_by_the_size_it_realises_and_holds_whole_periods_in_the_stored_window() -> None:
    """share / N closest to the target, not share / target rounded half to even (share 0.05 for +2%:
    N = 3, +1.67%, not N = 2, +2.5%); on an eager step N divides the stored window's F.linear calls
    where that lands within a quarter of the target, so every window counts as many doubled calls."""
    from perfgate.quality import inject

    assert every_nth(0.05, 0.02) == 3
    assert every_nth(0.025, 0.01) == 3  # 2.5 rounds to 2 in Python: +1.25%; N = 3 is +0.83%, closer
    assert every_nth(0.03, 0.02) == 2  # +1.5% beats +3%
    assert inject.every_nth(0.45, 0.02) == 23  # +1.96%
    assert inject.every_nth(0.45, 0.02, window_calls=40) == 20  # +2.25%: 4 F.linear a step, 10 steps: 2 doubled each
    assert inject.every_nth(0.45, 0.02, window_calls=7) == 23  # 7's divisors miss by far more than a quarter
    assert inject.every_nth(0.01, 0.02, window_calls=40) == 1


def test_the_gpu_side_share_is_sized_from_one_window_alternating_the_plain_and_slowed_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The share is read from ONE profiler window alternating the plain step and the step with
    every F.linear doubled: the record's pass and a later window of the slowed step drift apart (the
    unchanged bf16 block moved 2.7% window to window on an H200), which sized N wrong. Here the
    record read 1.0 ms, a later window finds the GPU 5% slower (plain 1.05, slowed 2.10 ms): the
    share is 1.0 (N = 50 for +2%), not 1.1 (N = 55, +1.8%)."""
    import random

    import torch

    lin, x = torch.nn.Linear(64, 64), torch.randn(8, 64)
    step = lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)  # noqa: E731
    windows: list[int] = []

    def window(steps, device, rounds, rng, *, block_steps=1):
        windows.append(len(steps))
        return [[1.05] * rounds, [2.10] * rounds]

    monkeypatch.setattr(gq, "profiled", lambda step, device, steps: (2.10, 1.0, {}, {}))
    monkeypatch.setattr(op_counts, "interleaved_device_ms", window)
    plan = gq.Plan(device="cuda:0", cases=(("m", "tiny", "baseline"),), kinds=("gpu",), sizes_pct=(2.0,),
                   profile_steps=10)  # fmt: skip
    setup = gq.CaseSetup(case="m-tiny-baseline", bound=None, wall_ms=1.1, device_ms=1.0)
    slowed = gq._gpu_slowed(plan, None, lambda spec: ("m", step, False), step, False, setup, random.Random(0))
    assert windows == [2]  # the plain and the slowed step, in one window
    assert setup.shares["gpu"] == pytest.approx(1.0)
    assert setup.linear_every == {"2": 50} and slowed.keys() == {2.0}
    assert setup.linear_calls_per_step == 1  # 10 calls a window: N = 50 holds no whole period, none within a quarter


def test_each_comparison_and_cell_reports_the_size_it_realised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The columns name the target; the run reports what each comparison measured it at, the median
    log ratio of the device-time A/B window's blocks, per row, per cell (median and range) and per
    case. The kept H200 run's bf16 '+2%' (docs/data/gpu-2026-11-28-h200, blocked by five) realised
    +2.4%. On a CPU there is no device time: the row says '-'."""
    import gzip

    from perfgate.measure.device_time import block_means
    from perfgate.output.gpu_quality import detection_markdown

    kept = Path(__file__).resolve().parents[2] / "docs" / "data" / "gpu-2026-11-28-h200" / "quality.json.gz"
    rows = [r for r in json.loads(gzip.decompress(kept.read_bytes()))["rows"] if r["kind"] == "gpu"]
    bf16 = [r for r in rows if "bf16" in r["case"]]
    realised = [gq.realised_pct(block_means(r["ab_base_device_ms"], 5), block_means(r["device_ms"], 5)) for r in bf16]
    assert len(realised) == 20 and 2.2 < statistics.median(realised) < 2.6

    every = dict.fromkeys(gq.GATES, "unchanged")
    cmp = [
        gq.Comparison(case="c", kind="gpu", size_pct=2.0, repeat=i, verdicts=every, messages={}, wall_s=0.1,
                      wall_change_pct=0.0, device_change_pct=0.0, realised_device_pct=v, realised_wall_pct=0.5)
        for i, v in enumerate((2.32, 2.43, 2.74))
    ]  # fmt: skip
    plan = gq.Plan(device="cuda:0", cases=(("c", None, "bf16"),))
    setup = gq.CaseSetup(case="c", bound="device-bound", wall_ms=1.4, device_ms=1.37)
    run = gq.QualityRun(plan=plan, setups=[setup], rows=cmp, tally=gq.tally(cmp), wall_s=1.0)
    (cell,) = {(t.realised_device_pct, t.realised_device_range) for t in run.tally}
    assert cell == (2.43, (2.32, 2.74))
    table = detection_markdown(run)
    assert "| realised % by device time, same-job A/B" in table and "| +2.43 (+2.32..+2.74) |" in table
    assert "| gpu-side +2%: +2.43 |" in table  # per case
    assert run.to_json()["tally"][0]["realised_device_pct"] == 2.43

    import torch

    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)
    build = lambda spec: ("m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False)  # noqa: E731
    cpu = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("gpu",), sizes_pct=(50.0,), repeats=1,
                  rounds=3, passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip
    result = gq.run(cpu, build)
    (row,) = result.rows
    assert row.realised_device_pct is None and row.realised_wall_pct is not None
    label = "realised % by device time, same-job A/B (mean of the blocks' log ratios; comparisons' median (range))"
    assert f"| {label} | - |" in detection_markdown(result)


def test_the_unchanged_side_is_a_second_build_of_the_case_not_the_recorded_step_itself() -> None:
    """The product's A/B compares two builds (two processes): the quality run's unchanged comparisons
    compare the recorded step with a second build of the case (the same seed), its own model and
    memory; the slowed sides wrap that build too (a graph case's are builds of their own)."""
    import torch

    calls: list[int] = []  # per build, its step's calls
    builds: list[bool] = []  # per build: was F.linear patched meanwhile
    original = torch.nn.functional.linear

    def build(spec):
        i = len(calls)
        calls.append(0)
        builds.append(torch.nn.functional.linear is not original)
        torch.manual_seed(0)
        lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)

        def step():
            calls[i] += 1
            return torch.nn.functional.linear(x, lin.weight, lin.bias)

        return "m-tiny-baseline", step, False

    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged", "host"), sizes_pct=(5.0,),
                   repeats=1, rounds=3, passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip
    before: list[int] = []
    result = gq.run(plan, build, checkpoint=lambda run: before.append(calls[1]) if len(run.rows) == 1 else None)
    assert builds == [False, False]  # the case, and its second build, unpatched
    assert len(result.rows) == 2 and before and before[0] > 3  # the unchanged comparison ran the second build's step
    assert calls[1] > before[0]  # and the host-side slowdown wraps it


def test_the_stored_record_takes_the_runners_pass_rule_and_the_gpus_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quality run's record is built as the runner's (perfgate.gate.detectable.with_pass_noise):
    passes further apart than the latency tolerance re-measure the last once; still apart, the record
    is flagged unreliable and the stored wall-time gate does not judge against it. A GPU whose
    telemetry the gate distrusts flags the record, and a comparison it distrusts gets no stored
    timing verdicts, as perfgate.gate.decide.compare does."""
    import torch

    lin, x = torch.nn.Linear(32, 32), torch.randn(8, 32)

    def build(spec):
        return "m-tiny-baseline", (lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)), False

    real = gq.interleaved_ms
    plan = gq.Plan(device="cpu", cases=(("m", "tiny", "baseline"),), kinds=("unchanged",), repeats=1, rounds=3,
                   passes=2, profile_steps=1, warmup_s=0.0)  # fmt: skip

    def scripted(passes: list[float]):
        def timed(steps, device, rounds, rng):
            if len(steps) == 1 and passes:  # a record pass
                return [[passes.pop(0)] * rounds]
            return real(steps, device, rounds, rng)

        return timed

    monkeypatch.setattr(gq, "interleaved_ms", scripted([1.0, 1.3, 1.0]))  # a slow phase, then agreeing again
    result = gq.run(plan, build)
    assert result.setups[0].record_remeasured == 1 and result.setups[0].record_unreliable is None
    monkeypatch.setattr(gq, "interleaved_ms", scripted([1.0, 1.3, 1.3]))  # still apart
    result = gq.run(plan, build)
    assert "recording passes disagree" in (result.setups[0].record_unreliable or "")
    (row,) = result.rows
    assert row.verdicts["wall-stored"] == "inconclusive" and "measured unreliably" in row.messages["wall-stored"]
    assert row.verdicts["wall-ab"] is not None

    monkeypatch.setattr(gq, "interleaved_ms", real)
    why = "hw_thermal_slowdown in 100% of samples: timings are not trustworthy"
    hot = gq.GpuState(busy_sm_clock_mhz=1500.0, gpu_power_w=None, gpu_temp_c=None, clock_events={}, unreliable=why,
                      samples=3)  # fmt: skip
    monkeypatch.setattr(gq, "gpu_state", lambda tel: hot)
    result = gq.run(plan, build)
    assert "hw_thermal_slowdown" in (result.setups[0].record_unreliable or "")
    (row,) = result.rows
    assert row.verdicts["wall-stored"] == "unreliable" and "hw_thermal_slowdown" in row.messages["wall-stored"]


def test_stored_device_time_is_not_judged_against_a_record_its_gpu_telemetry_distrusted() -> None:
    """As perfgate.gate.decide.compare: a kept H200 record, its current run 15% more GPU work. Against
    the record as recorded it is a regression; against the same record flagged by the GPU's
    telemetry while it was recorded (another process on the GPU), inconclusive, saying why, the
    figures kept. Kernel counts, which a neighbour does not move, are judged as before."""
    from dataclasses import replace

    from perfgate.gate.settings import GateSettings
    from tests.helpers import kept_gpu_records

    case = "vjepa2-encoder-large-baseline"
    base = kept_gpu_records("gpu-2026-11-28-h200", "tier-cold")[case]
    cur = replace(base, device_ms_per_step=base.device_ms_per_step * 1.15)
    ab_base = list(base.samples_ms)
    out, _ = gq.judge_all(case, base, cur, ab_base, GateSettings())
    assert out["device-time"] == "regression"
    why = "1 other process(es) computed on the GPU: timings are not trustworthy"
    out, msgs = gq.judge_all(case, base, cur, ab_base, GateSettings(), record_gpu_unreliable=why)
    assert out["device-time"] == "inconclusive" and why in msgs["device-time"] and "GPU busy" in msgs["device-time"]
    assert out["kernels"] == "unchanged"
