"""GPU busy time per step: the interval merge, the per-kernel attribution, the host share, and the
gate's device-time judge naming the kernels whose time grew.

Two kinds of trace are read. The real ones: 3-step torch.profiler traces kept by
`scripts/gpu-check --quality --traces` on an NVIDIA H200 (2026-11-27, torch 2.11.0+cu130,
docs/data/gpu-2026-11-27-h200/traces), checked against that run's own records. The constructed
one: a real CPU trace of this torch into which device activities are added in kineto's exact form
(`ChromeTraceLogger::handleActivity`), for what the GPU traces do not show (overlapping streams,
two devices): its names, durations and overlaps are made up, the event format is kineto's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from perfgate.gate.metrics import judge_device_time
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED
from perfgate.measure import op_counts
from perfgate.measure.device_time import block_means, device_time_from_events, host_share, merged_us
from perfgate.record import CaseRecord, PassNoise

ROOT = Path(__file__).resolve().parents[2]
H200_RUN = ROOT / "docs" / "data" / "gpu-2026-11-27-h200"
TRACE_STEPS = 3  # gpu-quality keeps 3 steps per trace (Plan.trace_steps)
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"


def _gpu_event(cat: str, name: str, ts: float, dur: float, *, stream: int = 7, device: int = 0) -> dict:
    """One device activity as kineto writes it (ts and dur in microseconds with three decimals)."""
    args = {"External id": 12, "device": device, "stream": stream, "correlation": 345}
    if cat == "kernel":
        args.update({"registers per thread": 168, "shared memory": 213504, "grid": [132, 1, 1], "block": [384, 1, 1]})
    else:
        args.update({"bytes": 4096, "memory bandwidth (GB/s)": 1.5})
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": round(ts, 3),
            "dur": round(dur, 3), "args": args}  # fmt: skip


def _real_cpu_trace(tmp_path: Path, steps: int) -> list[dict]:
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            lin(x)
    path = tmp_path / "cpu-trace.json"
    prof.export_chrome_trace(str(path))
    return op_counts.read_trace(path)


def test_overlaps_merge_and_gaps_do_not_count() -> None:
    assert merged_us([(0, 10), (5, 12), (20, 25), (24, 24)]) == 17  # [0,12) + [20,25); an empty one ignored
    assert merged_us([]) == 0


def test_busy_time_and_per_kernel_time_from_a_real_trace_with_kineto_device_events(tmp_path: Path) -> None:
    steps = 2
    events = _real_cpu_trace(tmp_path, steps)
    assert any(e.get("cat") == "cpu_op" for e in events)  # the real part
    t = 1000.0
    for _ in range(steps):  # per step: a GEMM on stream 7 overlapping a copy on stream 13, then a memset and a GELU
        events += [
            _gpu_event("kernel", GEMM, t, 410.0),
            _gpu_event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t + 400.0, 30.0, stream=13),
            _gpu_event("gpu_memset", "Memset (Device)", t + 500.0, 2.5),
            _gpu_event("kernel", "triton_poi_fused_gelu_0", t + 510.0, 50.0),
            # spans the kernels above: not device work of its own
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "perfgate.step",
                "pid": 0,
                "tid": 7,
                "ts": t,
                "dur": 560.0,
            },  # fmt: skip
        ]
        t += 2000.0
    dt = device_time_from_events(events, steps)
    # GEMM [0, 410) and the copy [400, 430) overlap by 10 us: 430 + 2.5 + 50 = 482.5 us busy per step.
    assert dt.device_ms_per_step == pytest.approx(0.4825)
    assert dt.kernel_ms_per_step[GEMM] == pytest.approx(0.41)
    assert list(dt.kernel_ms_per_step)[0] == GEMM  # largest first
    assert "perfgate.step" not in dt.kernel_ms_per_step
    assert dt.intervals == 8
    # The same window counts the launches: one mechanism, one trace.
    oc = op_counts.counts_from_events(events, steps, device_traced=True)
    assert oc.kernels_per_step == 2 and oc.copies_per_step == 2
    assert oc.device_ms_per_step == pytest.approx(0.4825)
    assert op_counts.counts_from_events(events, steps, device_traced=False).device_ms_per_step is None  # a CPU run
    # The file round trip, gzipped as a kept trace would be.
    import gzip

    with gzip.open(tmp_path / "t.json.gz", "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    again = device_time_from_events(op_counts.read_trace(tmp_path / "t.json.gz"), steps)
    assert again.device_ms_per_step == pytest.approx(dt.device_ms_per_step)


def test_block_means_average_consecutive_steps_and_drop_a_partial_block() -> None:
    assert block_means([1.0, 3.0, 2.0, 4.0, 9.0], 2) == [2.0, 3.0]
    assert block_means([1.0, 2.0], 1) == [1.0, 2.0]
    assert block_means([1.0], 2) == []
    with pytest.raises(ValueError, match="block must be at least 1"):
        block_means([1.0], 0)


def test_two_devices_are_busy_separately() -> None:
    events = [_gpu_event("kernel", "k", 0.0, 100.0, device=0), _gpu_event("kernel", "k", 0.0, 100.0, device=1)]
    assert device_time_from_events(events, 1).device_ms_per_step == pytest.approx(0.2)


def test_host_share_calls_an_idle_gpu_launch_bound() -> None:
    idle = host_share(wall_ms=22.4, device_ms=11.2 * 0.5)
    assert idle.bound == "launch-bound" and idle.host_ms_per_step == pytest.approx(16.8)
    busy = host_share(wall_ms=15.8, device_ms=15.2)
    assert busy.bound == "device-bound" and busy.device_busy_share == pytest.approx(15.2 / 15.8)
    with pytest.raises(ValueError, match="wall time"):
        host_share(0, 1)


def _rec(device_ms: float, kernels: dict[str, float], noise: dict[str, PassNoise] | None = None) -> CaseRecord:
    return CaseRecord(device_ms_per_step=device_ms, kernel_ms_per_step=kernels, pass_noise=noise)


def test_the_device_time_judge_names_the_kernels_whose_time_grew() -> None:
    base = _rec(1.0, {GEMM: 0.41, "triton_poi_fused_gelu_0": 0.05})
    cur = _rec(1.04, {GEMM: 0.45, "triton_poi_fused_gelu_0": 0.05})
    v = judge_device_time("c", cur, base, GateSettings())
    assert v is not None and v.verdict == REGRESSION and v.metric == "device_time"
    assert "0.41 -> 0.45 ms (+9.8%)" in v.message and GEMM[:20] in v.message
    same = judge_device_time("c", _rec(1.005, {GEMM: 0.41}), base, GateSettings())
    assert same is not None and same.verdict == UNCHANGED
    faster = judge_device_time("c", _rec(0.96, {GEMM: 0.37}), base, GateSettings())
    assert faster is not None and faster.verdict == IMPROVEMENT
    assert judge_device_time("c", CaseRecord(), base, GateSettings()) is None  # a CPU run: nothing to judge


def test_a_change_below_the_baselines_recorded_noise_is_not_claimed() -> None:
    noisy = {"device_time": PassNoise(passes=3, spread_pct=3.0, detects_pct=6.0)}
    v = judge_device_time("c", _rec(1.04, {GEMM: 0.45}), _rec(1.0, {GEMM: 0.41}, noisy), GateSettings())
    assert v is not None and v.verdict == INCONCLUSIVE
    assert "detects >= 6.0% here" in v.message


def _h200(case: str) -> op_counts.OpCounts:
    events = op_counts.read_trace(H200_RUN / "traces" / f"{case}.trace.json.gz")
    return op_counts.counts_from_events(events, TRACE_STEPS, device_traced=True)


def _h200_setups() -> dict[str, dict]:
    return {s["case"]: s for s in json.loads((H200_RUN / "quality.json").read_text())["setups"]}


@pytest.mark.parametrize(
    "traced",
    [
        "physicsnemo-block-full-baseline",
        "physicsnemo-block-full-bf16",
        "owl-world-model-1b-cacheframes0-baseline",
        "owl-world-model-1b-cacheframes0-cudagraphs",
    ],
    ids=lambda traced: f"{traced}.trace",  # not a case id: that reads as a benchmark run
)
def test_a_kept_h200_trace_gives_its_runs_device_time_and_bound(traced: str) -> None:
    """The kept 3-step window against the record's three 10-step windows of the same process (their
    device time differed by 0.02-1.8% between passes): the same busy time and the same verdict on
    the host share."""
    got, setup = _h200(traced), _h200_setups()[traced]
    assert got.device_ms_per_step == pytest.approx(setup["device_ms"], rel=0.02)
    assert host_share(setup["wall_ms"], got.device_ms_per_step).bound == setup["bound"]
    # one stream, kernels back to back: the busy time is the summed time (to float rounding of
    # microsecond timestamps near 1e9)
    assert got.device_ms_per_step == pytest.approx(sum(got.kernel_ms_per_step.values()), rel=1e-5)
    assert got.kernels_per_step == int(got.kernels_per_step)  # whole launches in every step


def test_the_world_models_eager_step_is_launch_bound_and_its_graph_replays_the_same_kernels() -> None:
    eager, graph = (
        _h200("owl-world-model-1b-cacheframes0-baseline"),
        _h200("owl-world-model-1b-cacheframes0-cudagraphs"),
    )
    wall = _h200_setups()["owl-world-model-1b-cacheframes0-baseline"]["wall_ms"]
    share = host_share(wall, eager.device_ms_per_step)
    assert share.bound == "launch-bound" and share.host_ms_per_step > 2 * eager.device_ms_per_step
    # CUPTI records a replayed graph's kernels one by one: the count sees into the replay, and the
    # GPU does the same work either way (device time within 2%), only the host's share differs.
    assert graph.kernels_per_step == eager.kernels_per_step == 1570
    assert graph.device_ms_per_step == pytest.approx(eager.device_ms_per_step, rel=0.02)
    assert list(graph.kernel_ms_per_step)[:2] == list(eager.kernel_ms_per_step)[:2]
    # the same case's record from the pytest run of the pr tier (another process, same lease)
    pr = json.loads((H200_RUN / "pr-cold.json").read_text())["benchmarks"]
    (rec,) = [b["extra_info"] for b in pr if b["name"].endswith("[owl-world-model-1b-cacheframes0-cudagraphs]")]
    assert rec["kernels_per_step"] == graph.kernels_per_step
    assert rec["device_ms_per_step"] == pytest.approx(graph.device_ms_per_step, rel=0.02)


def test_losing_bf16_on_the_h200_is_a_device_time_regression_that_names_the_fp32_kernels() -> None:
    """Two real windows of the PhysicsNeMo block: bf16 as the baseline, fp32 as the current (what a
    lost autocast does): the judge names the fp32 kernels that appeared, largest first."""

    def rec(c: op_counts.OpCounts) -> CaseRecord:
        return CaseRecord(device_ms_per_step=c.device_ms_per_step, kernel_ms_per_step=c.kernel_ms_per_step)

    bf16, fp32 = _h200("physicsnemo-block-full-bf16"), _h200("physicsnemo-block-full-baseline")
    v = judge_device_time("physicsnemo-block-full", rec(fp32), rec(bf16), GateSettings())
    assert v is not None and v.verdict == REGRESSION
    top = next(iter(fp32.kernel_ms_per_step))
    assert top.startswith("fmha_cutlassF_f32") and top[:40] in v.message and "(new)" in v.message
    same = judge_device_time("physicsnemo-block-full", rec(bf16), rec(bf16), GateSettings())
    assert same is not None and same.verdict == UNCHANGED


def _marks_like_record_function(tmp_path: Path, spans: list[tuple[float, float]], labels: list[str]) -> list[dict]:
    """`record_function` ranges as this torch's profiler writes them (a real CPU trace with one range
    per label), moved onto the given host-time spans of a kept GPU trace: the kept traces were taken
    without step marks, so the marks' times are placed around the real launches of each step."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from perfgate.measure.device_time import STEP_MARK

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for label in labels:
            with record_function(f"{STEP_MARK}{label}"):
                torch.ones(2) + 1
    path = tmp_path / "marks.json"
    prof.export_chrome_trace(str(path))
    marks = [e for e in op_counts.read_trace(path) if str(e.get("name", "")).startswith(STEP_MARK)]
    assert [m["cat"] for m in marks] == ["user_annotation"] * len(labels)  # the category the parser reads
    for m, (start, end) in zip(sorted(marks, key=lambda m: m["ts"]), spans, strict=True):
        m["ts"], m["dur"] = start, end - start
    return marks


def _launch_spans(events: list[dict], steps: int) -> list[tuple[float, float]]:
    """Host-time spans of `steps` equal runs of consecutive calls that launched device work (each
    step launches the same)."""
    from perfgate.measure.device_time import DEVICE_CATS, LAUNCH_CATS

    launched = {e["args"]["correlation"] for e in events if e.get("cat") in DEVICE_CATS}
    calls = sorted((e for e in events if e.get("cat") in LAUNCH_CATS and e["args"].get("correlation") in launched),
                   key=lambda e: e["ts"])  # fmt: skip
    per = len(calls) // steps
    assert per * steps == len(calls)
    groups = [calls[i * per : (i + 1) * per] for i in range(steps)]
    return [(g[0]["ts"] - 0.5, g[-1]["ts"] + g[-1]["dur"] + 0.5) for g in groups]


@pytest.mark.parametrize(
    "traced", ["owl-world-model-1b-cacheframes0-cudagraphs", "owl-world-model-1b-cacheframes0-baseline"]
)
def test_each_marked_step_gets_the_gpu_work_it_launched_in_a_kept_h200_trace(tmp_path: Path, traced: str) -> None:
    """The device-time A/B window tells the steps apart by their launches (CUPTI's correlation id):
    a graph's 1,570 replayed kernels belong to its cudaGraphLaunch, an eager step's to its launches,
    though they run after the host moved on. Three real steps, marked A, B, A."""
    from perfgate.measure.device_time import device_ms_per_marked_step

    events = op_counts.read_trace(H200_RUN / "traces" / f"{traced}.trace.json.gz")
    whole = device_time_from_events(events, TRACE_STEPS).device_ms_per_step
    spans = _launch_spans(events, TRACE_STEPS)
    got = device_ms_per_marked_step(events + _marks_like_record_function(tmp_path, spans, ["A", "B", "A"]))
    assert list(got) == ["A", "B"] and len(got["A"]) == 2 and len(got["B"]) == 1
    steps = [got["A"][0], got["B"][0], got["A"][1]]
    assert sum(steps) / TRACE_STEPS == pytest.approx(whole, rel=1e-4)  # every activity in one step, none twice
    assert max(steps) / min(steps) < 1.02  # the same step three times
    # launches outside every mark (the window's synchronize, a step left unmarked) count for no step
    first = device_ms_per_marked_step(events + _marks_like_record_function(tmp_path, spans[:1], ["A"]))
    assert first == {"A": [pytest.approx(steps[0])]}
    assert device_ms_per_marked_step(events) == {}


def test_a_marked_step_on_two_gpus_reads_what_the_stored_figure_reads(tmp_path: Path) -> None:
    """Kineto writes a device activity with its device as the pid: a kept H200 trace's device
    activities, copied onto pid 1, stand for the same step's work on a second GPU running at the
    same time. The A/B window's figure per step and the stored figure both count each GPU's busy
    time (merged per device, summed over devices), so neither reads the two GPUs as one."""
    from perfgate.measure.device_time import DEVICE_CATS, device_ms_per_marked_step

    events = op_counts.read_trace(H200_RUN / "traces" / "physicsnemo-block-full-bf16.trace.json.gz")
    one_gpu = device_time_from_events(events, TRACE_STEPS).device_ms_per_step
    second = [{**e, "pid": 1} for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]
    assert second and {e["pid"] for e in events if e.get("cat") in DEVICE_CATS} == {0}
    two_gpus = events + second
    stored = device_time_from_events(two_gpus, TRACE_STEPS).device_ms_per_step
    assert stored == pytest.approx(2 * one_gpu, rel=1e-9)
    spans = _launch_spans(events, TRACE_STEPS)
    got = device_ms_per_marked_step(two_gpus + _marks_like_record_function(tmp_path, spans, ["A", "B", "A"]))
    steps = [got["A"][0], got["B"][0], got["A"][1]]
    assert sum(steps) / TRACE_STEPS == pytest.approx(stored, rel=1e-4)
