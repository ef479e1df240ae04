"""GPU busy time per step: the interval merge, the per-kernel attribution, the host share, and the
gate's device-time judge naming the kernels whose time grew.

What here was never produced by a GPU: no profiler trace from a GPU run was kept (issue 36), so
the trace read below is a real torch.profiler chrome trace of a CPU step (written by this torch's
`export_chrome_trace`: its `cpu_op` events, `ProfilerStep`s and metadata are real) into which
device activities are added in the exact form kineto's `ChromeTraceLogger::handleActivity`
writes them on a GPU (`{"ph": "X", "cat": "kernel" | "gpu_memcpy" | "gpu_memset", "name",
"pid": device, "tid": stream, "ts": us.nnn, "dur": us.nnn, "args": {...}}`). Their names,
durations and overlaps are made up; the event format is kineto's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from perfgate.gate.metrics import judge_device_time
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import INCONCLUSIVE, REGRESSION, UNCHANGED
from perfgate.measure import op_counts
from perfgate.measure.device_time import device_time_from_events, host_share, merged_us
from perfgate.record import CaseRecord, PassNoise

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
    assert judge_device_time("c", CaseRecord(), base, GateSettings()) is None  # a CPU run: nothing to judge


def test_a_change_below_the_baselines_recorded_noise_is_not_claimed() -> None:
    noisy = {"device_time": PassNoise(passes=3, spread_pct=3.0, detects_pct=6.0)}
    v = judge_device_time("c", _rec(1.04, {GEMM: 0.45}), _rec(1.0, {GEMM: 0.41}, noisy), GateSettings())
    assert v is not None and v.verdict == INCONCLUSIVE
    assert "detects >= 6.0% here" in v.message
