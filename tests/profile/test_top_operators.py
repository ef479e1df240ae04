"""`perfgate profile`'s top operators and their shares, against torch's own table, on the kept
H200 traces (docs/data/gpu-2026-11-27-h200/traces: 3-step torch.profiler windows, torch
2.11.0+cu130) rebuilt into torch's operator rows by tests/kineto_rows.py.

Under Kineto a kernel's device time is on its own row and again, as self device time, on the row
of the op that launched it: the share is of the device total as torch's table sums it (device rows
only), so `aten::_cudnn_attention_forward` and its cuDNN kernel both read 42.7% of the bf16 block,
as torch printed it, where a sum over every row gave 21.4%."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfgate.measure import op_counts
from perfgate.profile.trace import device_total_us, top_operators
from tests.kineto_rows import function_events

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "docs" / "data" / "gpu-2026-11-27-h200" / "traces"
STEPS = 3
UNIT_US = {"s": 1e6, "ms": 1e3, "us": 1.0}


def _torch_device_total_ms(table: str) -> float:
    m = re.search(r"Self CUDA time total: ([\d.]+)(s|ms|us)", table)
    assert m, table[-500:]
    return float(m.group(1)) * UNIT_US[m.group(2)] / 1e3


def _torch_self_cuda_pct(table: str, name: str) -> float:
    """The `Self CUDA %` column of the row named `name` (a name short enough not to be cut)."""
    (line,) = [ln for ln in table.splitlines() if ln.strip().startswith(name + " ")]
    return float(re.findall(r"([\d.]+)%", line)[2])  # Self CPU %, CPU total %, Self CUDA %


@pytest.mark.parametrize(
    ("traced", "op", "pct"),
    [
        ("physicsnemo-block-full-bf16", "aten::_cudnn_attention_forward", 42.72),
        ("physicsnemo-block-full-baseline", "aten::_efficient_attention_forward", 43.68),
        ("owl-world-model-1b-cacheframes0-baseline", "aten::addmm", 73.44),
    ],
    ids=["physicsnemo-bf16.trace", "physicsnemo-fp32.trace", "owl-eager.trace"],  # not case ids: those read as runs
)
def test_a_share_is_of_the_device_total_as_torchs_table_gives_it(traced: str, op: str, pct: float) -> None:
    events = op_counts.read_trace(TRACES / f"{traced}.trace.json.gz")
    averages = function_events(events).key_averages()  # torch's operator rows
    table = averages.table(sort_by="self_cuda_time_total", row_limit=100)
    total_ms = _torch_device_total_ms(table)
    assert device_total_us(averages) / 1e3 == pytest.approx(total_ms, abs=5e-4)  # torch prints 3 decimals
    # the device total is every kernel, copy and memset once: the trace's own device activities
    dt = op_counts.counts_from_events(events, STEPS, device_traced=True)
    assert total_ms == pytest.approx(sum(dt.kernel_ms_per_step.values()) * STEPS, rel=1e-3)
    rows = {r["name"]: r for r in top_operators(averages, 1000, cuda=True)}
    assert _torch_self_cuda_pct(table, op) == pct  # what torch printed for the op
    assert rows[op]["share"] * 100 == pytest.approx(pct, abs=0.006)
    for r in rows.values():
        assert r["share"] == pytest.approx(r["self_device_ms"] / total_ms, rel=1e-3)
    # the device rows (kernels, memsets) share the whole device time between them
    device_rows = [r for r in rows.values() if not r["self_cpu_ms"] and r["self_device_ms"]]
    assert sum(r["share"] for r in device_rows) == pytest.approx(1.0, rel=1e-3)


def test_the_rebuilt_rows_are_the_live_profilers_on_a_real_cpu_trace(tmp_path: Path) -> None:
    """tests/kineto_rows.py against torch itself: a CPU profile with nested ranges, its exported
    trace rebuilt, gives the live profiler's rows (names, calls, self and total CPU times)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 32))
    x = torch.randn(8, 32)
    net(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("perfgate.step"), record_function("user range"):
                net(x).sum()
            prof.step()
    prof.export_chrome_trace(str(tmp_path / "t.json"))

    def rows(averages: list) -> dict:
        return {(e.key, e.is_user_annotation): (e.count, e.self_cpu_time_total, e.cpu_time_total) for e in averages}

    live = rows(prof.key_averages())
    rebuilt = rows(function_events(op_counts.read_trace(tmp_path / "t.json"), use_device=None).key_averages())
    assert rebuilt.keys() == live.keys() and ("user range", True) in live
    for key, (count, self_us, total_us) in live.items():
        assert rebuilt[key] == (count, pytest.approx(self_us, abs=0.01), pytest.approx(total_us, abs=0.01)), key
