"""FLOPs per step (attention counted on the CPU), the measured matmul peak and the roofline."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perfgate.cases import flops
from perfgate.cases.workload import build_workload, get_model


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
    count = flops.count_step_flops(wl.module, wl.inputs, step_kind="train")
    assert count.total == 3 * _tiny_block_forward_flops()  # backward of a matmul costs two
    assert all(p.grad is None for p in wl.module.parameters())


def _peak(tflops: float, dtype: str = "fp32", op: str = "linear", tf32: bool | None = None) -> flops.Peak:
    return flops.Peak(tflops=tflops, dtype=dtype, op=op, shape="s", seconds=1e-3, device="cpu", tf32=tf32)


def test_ops_fall_into_kernel_families() -> None:
    names = {
        "addmm": "linear",
        "mm": "linear",
        "_scaled_mm": "linear",
        "bmm": "bmm",
        "baddbmm": "bmm",
        "_scaled_dot_product_flash_attention": "bmm",
        "convolution": "conv",
        "convolution_backward": "conv",
    }
    assert {op: flops.op_class(op) for op in names} == names


def test_a_conv_and_linear_model_is_counted_per_family() -> None:
    """From FlopCounterMode's own output, not a hand-built count."""
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 16))
    count = flops.count_step_flops(model, (torch.randn(2, 4, 6, 6),))
    assert count.by_class == {"conv": 2 * 2 * 8 * 4 * 9 * 36, "linear": 2 * 2 * 288 * 16}
    assert sum(count.by_class.values()) == count.total


def test_roofline_is_the_ideal_time_of_each_family_at_its_peak() -> None:
    count = flops.FlopCount(
        total=int(3e9), by_module={}, by_op={"addmm": int(2e9), "convolution": int(1e9)}, attention=0, method="m"
    )
    # 2 GFLOP at 2 TFLOP/s (1 ms) + 1 GFLOP at 0.5 TFLOP/s (2 ms): 3 ms ideal; measured 6 ms.
    r = flops.roofline(count, 6.0, {"linear": _peak(2.0), "conv": _peak(0.5, op="conv", tf32=True)})
    assert r["gflop_per_step"] == 3.0 and r["achieved_tflops"] == pytest.approx(0.5)
    assert r["peak_tflops"] == pytest.approx(1.0) and r["peak_share"] == pytest.approx(0.5)
    assert r["peak_dtype"] == "fp32+fp32 tf32"  # the TF32 convolutions are named
    assert set(r["peak_basis"]) == {"linear", "conv"}


def test_no_share_above_the_measured_peak_or_without_one() -> None:
    count = flops.FlopCount(total=int(4e9), by_module={}, by_op={"mm": int(4e9)}, attention=0, method="m")
    over = flops.roofline(count, 1.0, {"linear": _peak(1.0)})  # 4 TFLOP/s against a 1 TFLOP/s peak
    assert "peak_share" not in over and "does not bound" in over["peak_note"]
    reason = flops.roofline(count, 1.0, "int8/fp8 matmuls: no peak is measured for quantised math")
    assert "peak_share" not in reason and reason["peak_note"].startswith("int8/fp8")
    assert "peak_share" not in flops.roofline(count, 1.0, None)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({}, torch.float32),
        ({"dtype": "float32"}, torch.float32),
        ({"dtype": "bfloat16"}, torch.bfloat16),
        ({"autocast": "float16"}, torch.float16),  # probed: the CPU autocast runs linear and conv in fp16
        ({"dtype": "bfloat16", "quantized_linears": 4}, "int8/fp8"),
        ({"engine_build_s": 1.0}, "TensorRT"),
    ],
    ids=["eager", "fp32", "bf16-cast", "autocast-fp16", "quantised", "tensorrt"],
)
def test_math_dtypes_of_a_variant(info: dict, expected: torch.dtype | str) -> None:
    got = flops.math_dtypes(info, "cpu", ["linear", "conv"])
    if isinstance(expected, str):
        assert isinstance(got, str) and got.startswith(expected)
    else:
        assert got == {"linear": expected, "conv": expected}


def test_peak_is_measured_once_per_device_dtype_and_family(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(device: torch.device, dtype: torch.dtype, op: str) -> flops.Peak:
        calls.append((str(device), dtype, op))
        return _peak(1.0, flops.SHORT[dtype], op)

    monkeypatch.setattr(flops, "_PEAKS", {})
    monkeypatch.setattr(flops, "measure_peak", fake)
    a = flops.peak_for("cpu", torch.float32, "linear")
    b = flops.peak_for("cpu", torch.float32, "linear")
    flops.peak_for("cpu", torch.bfloat16, "linear")
    flops.peak_for("cpu", torch.float32, "conv")
    assert a is b and calls == [
        ("cpu", torch.float32, "linear"),
        ("cpu", torch.bfloat16, "linear"),
        ("cpu", torch.float32, "conv"),
    ]


@pytest.mark.parametrize("op", flops.OP_CLASSES)
def test_measure_peak_times_a_real_problem_of_each_family(op: str) -> None:
    peak = flops.measure_peak("cpu", torch.float32, op, max_scale=1)
    assert peak.op == op and peak.tflops > 0 and peak.seconds > 0 and peak.dtype == "fp32" and peak.tf32 is None


def test_tf32_applies_to_fp32_on_cuda_only() -> None:
    assert flops.tf32_enabled("cpu", torch.float32, "conv") is None
    assert flops.tf32_enabled("cuda:0", torch.bfloat16, "conv") is None
    assert flops.tf32_enabled("cuda:0", torch.float32, "conv") is bool(torch.backends.cudnn.allow_tf32)
    assert flops.tf32_enabled("cuda:0", torch.float32, "linear") is bool(torch.backends.cuda.matmul.allow_tf32)


def test_extra_info_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flops, "_PEAKS", {("cpu", torch.float32, "linear", None): _peak(0.1)})
    count = flops.FlopCount(total=int(5e8), by_module={}, by_op={"addmm": int(5e8)}, attention=int(2e8), method="m")
    info = flops.flops_extra_info(count, 10.0, "cpu", {"dtype": "float32"})
    assert info["gflop_per_step"] == 0.5 and info["attention_gflop"] == pytest.approx(0.2)
    assert info["achieved_tflops"] == pytest.approx(0.05) and info["peak_share"] == pytest.approx(0.5)
