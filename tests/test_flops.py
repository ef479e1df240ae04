"""FLOPs per step (attention counted on the CPU), the measured matmul peak and the roofline."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perfgate import flops
from perfgate.workload import build_workload, get_model


def _tiny_block_forward_flops() -> int:
    """physicsnemo-block tiny by hand: B=2, N=64, C=64, H=4 heads of 16, MLP hidden 256."""
    B, N, C, H, Dh = 2, 64, 64, 4, 16
    linears = 2 * B * N * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)  # qkv, proj, fc1, fc2
    attention = 2 * 2 * B * H * N * N * Dh  # q @ k^T and attn @ v
    return linears + attention


def test_forward_flops_count_attention_on_the_cpu() -> None:
    wl = build_workload(get_model("physicsnemo-block"), "tiny", "cpu")
    count = flops.count_step_flops(wl.module, wl.inputs)
    assert count.total == _tiny_block_forward_flops()
    assert count.by_module == {"attn": 6291456, "mlp": 8388608}
    assert count.attention == count.by_module["attn"]
    # Why the MATH backend: FlopCounterMode alone sees the CPU flash kernel as 0 FLOPs.
    plain = FlopCounterMode(display=False)
    with torch.no_grad(), plain:
        wl.module(*wl.inputs)
    assert plain.get_total_flops() == count.total - 2 * 2 * 2 * 4 * 64 * 64 * 16


def test_train_step_counts_forward_and_backward_and_leaves_no_gradients() -> None:
    wl = build_workload(get_model("physicsnemo-train"), "tiny", "cpu")
    count = flops.count_step_flops(wl.module, wl.inputs, step="train")
    assert count.total == 3 * _tiny_block_forward_flops()  # backward of a matmul costs two
    assert all(p.grad is None for p in wl.module.parameters())


def test_roofline_arithmetic() -> None:
    peak = flops.Peak(tflops=2.0, dtype="bf16", n=1024, seconds=0.001, device="cpu")
    r = flops.roofline(4e9, 2.0, peak)  # 4 GFLOP in 2 ms = 2 TFLOP/s
    assert r["gflop_per_step"] == 4.0
    assert r["achieved_tflops"] == pytest.approx(2.0)
    assert r["peak_share"] == pytest.approx(1.0)
    assert r["peak_dtype"] == "bf16" and r["peak_matmul_n"] == 1024
    assert "peak_share" not in flops.roofline(4e9, 2.0, None)


@pytest.mark.parametrize(("info", "dtype"), [
    ({}, torch.float32),
    ({"dtype": "float32"}, torch.float32),
    ({"autocast": "bfloat16"}, torch.bfloat16),
    ({"dtype": "float16"}, torch.float16),
    ({"dtype": "bfloat16", "quantized_linears": 4}, torch.bfloat16),
], ids=["eager", "fp32", "autocast-bf16", "fp16-cast", "quantised-bf16"])
def test_compute_dtype_of_a_variant(info: dict, dtype: torch.dtype) -> None:
    assert flops.compute_dtype(info) == dtype


def test_peak_is_measured_once_per_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(device: torch.device, dtype: torch.dtype) -> flops.Peak:
        calls.append((str(device), dtype))
        return flops.Peak(tflops=1.0, dtype=flops.SHORT[dtype], n=256, seconds=1e-3, device=str(device))

    monkeypatch.setattr(flops, "_PEAKS", {})
    monkeypatch.setattr(flops, "measure_peak", fake)
    a = flops.peak_for("cpu", torch.float32)
    b = flops.peak_for("cpu", torch.float32)
    flops.peak_for("cpu", torch.bfloat16)
    assert a is b and calls == [("cpu", torch.float32), ("cpu", torch.bfloat16)]


def test_measure_peak_times_a_real_matmul() -> None:
    peak = flops.measure_peak("cpu", torch.float32, n_max=256)
    assert peak.n == 256 and peak.tflops > 0 and peak.seconds > 0 and peak.dtype == "fp32"


def test_extra_info_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flops, "_PEAKS", {("cpu", torch.float32): flops.Peak(tflops=0.1, dtype="fp32", n=2048, seconds=0.2, device="cpu")})
    count = flops.FlopCount(total=int(1e9), by_module={}, by_op={}, attention=int(2e8), method="m")
    info = flops.flops_extra_info(count, 10.0, "cpu", {"dtype": "float32"})
    assert info["gflop_per_step"] == 1.0 and info["attention_gflop"] == pytest.approx(0.2)
    assert info["achieved_tflops"] == pytest.approx(0.1) and info["peak_share"] == pytest.approx(1.0)
