"""FLOPs per step and the roofline: achieved TFLOP/s against a peak measured on this machine.

Counting uses torch's `FlopCounterMode` (exact for Linear, convolutions and (b)mm). On the CPU
it counts scaled_dot_product_attention as 0 (the CPU flash kernel has no formula), so there the
count runs with SDPA forced to the MATH backend, which decomposes attention into the bmm calls it
counts. CUDA's flash / efficient / cuDNN kernels have formulas and are counted as they are.

FLOPs are the model's work: counted on the eager fp32 module and credited unchanged to every
variant (the MFU convention), so a quantised or compiled variant's achieved TFLOP/s compares
directly with the baseline's.

The share of peak is against the math the variant really runs, or it is not given. Each counted op
belongs to a kernel family (`OP_CLASSES`: linear, batched matmul, convolution) whose peak is timed
on this machine with that family's own op, in the dtype the variant computes it in (probed under
its autocast), with the TF32 settings in force; the step's ideal time is the sum over families of
FLOPs / peak. Why per family: on the first H100 run the Wan VAE read "182% of peak" because cuDNN
convolutions use TF32 by default while the peak was an fp32 matmul without it, and on a CPU
without fp16 hardware torch.mm runs fp16 at 2.7 GFLOP/s where F.linear (oneDNN) runs 38, so
autocast-fp16 cases read 157-397%. Quantised (int8/fp8) and TensorRT variants get no share: no peak
is measured for their math.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from perfgate.record import PeakBasis

SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True, kw_only=True)
class FlopCount:
    total: int  # FLOPs of one step (multiply-add = 2)
    by_module: dict[str, int]  # top-level submodule name -> FLOPs ("" = the root's own ops)
    by_op: dict[str, int]
    attention: int  # FLOPs inside attention (SDPA, or bmm under modules named *attn*/*attention*)
    method: str

    @property
    def gflop(self) -> float:
        return self.total / 1e9

    @property
    def by_class(self) -> dict[str, int]:
        """FLOPs per kernel family (see `op_class`)."""
        out: dict[str, int] = {}
        for op, n in self.by_op.items():
            out[op_class(op)] = out.get(op_class(op), 0) + n
        return out


def _attention_module(name: str) -> bool:
    low = name.lower()
    return "attn" in low or "attention" in low


def count_flops(fn: Callable[[], Any], device_type: str, root_name: str | None = None) -> FlopCount:
    """FLOPs of one call of `fn` (which runs the model once)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    if device_type == "cpu":
        with sdpa_kernel(SDPBackend.MATH), counter:
            fn()
        method = "FlopCounterMode; attention counted under SDPBackend.MATH (CPU)"
    else:
        with counter:
            fn()
        method = "FlopCounterMode"
    counts = counter.get_flop_counts()
    total = int(counter.get_total_flops())
    by_op = {
        str(op).split(".")[-1] if "." in str(op) else str(op): int(v) for op, v in counts.get("Global", {}).items()
    }
    root = root_name or next((k for k in counts if k != "Global" and "." not in k), None)
    by_module: dict[str, int] = {}
    attention = 0
    for name, ops in counts.items():
        if name == "Global" or root is None or not name.startswith(root + "."):
            continue
        rel = name[len(root) + 1 :]
        if "." not in rel:
            by_module[rel] = int(sum(ops.values()))
        parts = rel.split(".")
        # Attention FLOPs: the outermost module whose name says attention, counted once.
        if _attention_module(parts[-1]) and not any(_attention_module(p) for p in parts[:-1]):
            attention += int(sum(ops.values()))
    sdpa = sum(v for op, v in by_op.items() if "scaled_dot_product" in op)
    if not attention:
        attention = sdpa
    return FlopCount(total=total, by_module=by_module, by_op=by_op, attention=attention, method=method)


def count_step_flops(module: nn.Module, inputs: tuple[torch.Tensor, ...], *, step_kind: str = "inference") -> FlopCount:
    """FLOPs of one timed step: a forward (inference) or forward + backward (the training kinds).

    The train count leaves the optimiser out (FlopCounterMode counts no element-wise work) and
    clears the gradients it made, so the module is as it was.
    """
    device_type = next((t.device.type for t in inputs if isinstance(t, torch.Tensor)), "cpu")
    root = type(module).__name__
    from perfgate.cases.steps import is_training, train_loss

    if is_training(step_kind):

        def run() -> None:
            train_loss(module(*inputs)).backward()

        try:
            return count_flops(run, device_type, root)
        finally:
            module.zero_grad(set_to_none=True)

    def infer() -> None:
        with torch.no_grad():
            module(*inputs)

    return count_flops(infer, device_type, root)


# --- peak -------------------------------------------------------------------------------------

OP_CLASSES = ("linear", "bmm", "conv")


def op_class(op: str) -> str:
    """The kernel family of an op FlopCounterMode counts: conv (convolution and its backward), bmm
    (batched matmuls and fused attention kernels), else linear (mm, addmm, _scaled_mm)."""
    if "conv" in op:
        return "conv"
    if "bmm" in op or "attention" in op:
        return "bmm"
    return "linear"


@dataclass(frozen=True, kw_only=True)
class Peak:
    tflops: float
    dtype: str  # "fp32", "bf16", "fp16"
    op: str  # kernel family: "linear", "bmm", "conv"
    shape: str  # the problem timed
    seconds: float  # best time of one call
    device: str
    tf32: bool | None = None  # fp32 on CUDA: whether this family ran with TF32

    def basis(self, gflop: float) -> PeakBasis:
        """The record's roofline entry for a family doing `gflop` per step at this peak."""
        return PeakBasis(
            gflop=gflop,
            tflops=self.tflops,
            dtype=self.dtype,
            op=self.op,
            shape=self.shape,
            seconds=self.seconds,
            device=self.device,
            tf32=self.tf32,
        )


_PEAKS: dict[tuple[str, torch.dtype, str, bool | None], Peak] = {}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tf32_enabled(device: torch.device | str, dtype: torch.dtype, op: str) -> bool | None:
    """Whether fp32 work of this family runs in TF32 on `device` now (None where TF32 does not apply):
    cuBLAS matmuls follow torch.backends.cuda.matmul, cuDNN convolutions torch.backends.cudnn (on by
    default)."""
    if torch.device(device).type != "cuda" or dtype != torch.float32:
        return None
    if op == "conv":
        return bool(torch.backends.cudnn.allow_tf32)
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _problem(op: str, scale: int, dtype: torch.dtype, device: torch.device) -> tuple[Callable[[], Any], float, str]:
    """(call, FLOPs, shape) of one dense problem of family `op`, `scale` = 1, 2, 4, ..."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device, dtype)

    if op == "linear":
        n = 256 * scale
        x, w = rand(n, n), rand(n, n)
        return (lambda: torch.nn.functional.linear(x, w)), 2.0 * n**3, f"linear {n}x{n}x{n}"
    if op == "bmm":
        n = 128 * scale
        a, b = rand(8, n, n), rand(8, n, n)
        return (lambda: torch.bmm(a, b)), 2.0 * 8 * n**3, f"bmm 8x{n}x{n}x{n}"
    if op == "conv":
        batch, ch, hw = scale, 128, 28
        x, w = rand(batch, ch, hw, hw), rand(ch, ch, 3, 3)
        return (
            (lambda: torch.nn.functional.conv2d(x, w, padding=1)),
            2.0 * batch * ch * ch * 9 * hw * hw,
            f"conv2d 3x3 [{batch},{ch},{hw},{hw}]",
        )
    raise ValueError(f"unknown op class {op!r}; known: {', '.join(OP_CLASSES)}")


def time_call_s(call: Callable[[], Any], device: torch.device, repeats: int = 3) -> float:
    """Best wall time of one call (after one untimed warm-up)."""
    call()
    _sync(device)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def measure_peak(
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    op: str = "linear",
    *,
    max_scale: int | None = None,
    min_time_s: float = 0.05,
) -> Peak:
    """TFLOP/s of a large dense problem of family `op`: the problem doubles in size from a small one
    until a call takes `min_time_s` or `max_scale` is reached (8 on the CPU: linear 2048, 32 on a
    GPU), so a dtype the CPU emulates slowly still finishes in well under a second."""
    device = torch.device(device)
    max_scale = max_scale or (32 if device.type == "cuda" else 8)
    scale = 1
    while True:
        call, work, shape = _problem(op, scale, dtype, device)
        seconds = time_call_s(call, device, repeats=3 if device.type == "cuda" else 2)
        if seconds >= min_time_s or scale >= max_scale:
            break
        scale *= 2
    return Peak(
        tflops=work / seconds / 1e12,
        dtype=SHORT.get(dtype, str(dtype)),
        op=op,
        shape=shape,
        seconds=seconds,
        device=str(device),
        tf32=tf32_enabled(device, dtype, op),
    )


def peak_for(device: torch.device | str, dtype: torch.dtype = torch.float32, op: str = "linear") -> Peak:
    """The measured peak of (device, dtype, family, TF32 setting), timed on first use and cached."""
    device = torch.device(device)
    key = (str(device), dtype, op, tf32_enabled(device, dtype, op))
    if key not in _PEAKS:
        _PEAKS[key] = measure_peak(device, dtype, op)
    return _PEAKS[key]


_AUTOCAST_DTYPES: dict[tuple[str, torch.dtype, str], torch.dtype] = {}


def autocast_dtype(device: torch.device | str, dtype: torch.dtype, op: str) -> torch.dtype:
    """The dtype a family's op computes in under `torch.autocast(device, dtype)` with fp32 inputs,
    found by running a tiny one: the autocast op lists differ by device and torch version."""
    device = torch.device(device)
    key = (str(device), dtype, op)
    if key not in _AUTOCAST_DTYPES:
        a = torch.randn(2, 8, 8, device=device)  # fp32, as the eager model's activations
        call = {
            "linear": lambda: torch.nn.functional.linear(a[0], a[1]),
            "bmm": lambda: torch.bmm(a, a),
            "conv": lambda: torch.nn.functional.conv2d(a[None], a.new_ones(2, 2, 3, 3), padding=1),
        }[op]
        with torch.autocast(device.type, dtype=dtype):
            _AUTOCAST_DTYPES[key] = call().dtype
    return _AUTOCAST_DTYPES[key]


DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def math_dtypes(
    info: Mapping[str, Any], device: torch.device | str, classes: Sequence[str]
) -> dict[str, torch.dtype] | str:
    """The dtype each family of the step computes in under the variant (from its conversion info),
    or why no share of peak can be given."""
    if info.get("quantized_linears"):
        return "int8/fp8 matmuls: no peak is measured for quantised math"
    if "engine_build_s" in info:
        return "TensorRT picks its own kernels and precisions: no peak is measured for them"
    model = DTYPE_NAMES.get(str(info.get("dtype", "float32")).removeprefix("torch."))
    if model is None:
        return f"no peak is measured for {info.get('dtype')} math"
    auto = info.get("autocast")
    if not auto:
        return {c: model for c in classes}
    auto_dtype = DTYPE_NAMES[str(auto).removeprefix("torch.")]
    return {c: (autocast_dtype(device, auto_dtype, c) if model == torch.float32 else model) for c in classes}


def roofline(count: FlopCount, median_ms: float, peaks: Mapping[str, Peak] | str | None) -> dict[str, Any]:
    """GFLOP per step, achieved TFLOP/s at the median and, with a measured peak per family of the
    step's ops, the share of the ideal time (sum of FLOPs / peak over families) in the measured one.
    A string for `peaks` is the reason no share is given (kept as `peak_note`)."""
    seconds = median_ms / 1e3
    achieved = count.total / seconds / 1e12 if seconds > 0 else 0.0
    out: dict[str, Any] = {"gflop_per_step": count.total / 1e9, "achieved_tflops": achieved}
    if isinstance(peaks, str):
        return {**out, "peak_note": peaks}
    by_class = {c: n for c, n in count.by_class.items() if n > 0}
    if not peaks or not by_class or seconds <= 0:
        return out
    ideal_s = sum(n / (peaks[c].tflops * 1e12) for c, n in by_class.items())
    share = ideal_s / seconds
    label = "+".join(sorted({peaks[c].dtype + (" tf32" if peaks[c].tf32 else "") for c in by_class}))
    basis = {c: peaks[c].basis(n / 1e9) for c, n in by_class.items()}
    if share > 1.0:
        # A peak timed while the machine was busy, or kernels faster than the peak's problem (a
        # conv1d path beside the conv2d timed): the peak does not bound this step, so no share.
        return {
            **out,
            "peak_basis": basis,
            "peak_note": f"{achieved:.3g} TFLOP/s is above the measured {label} peak "
            f"({count.total / ideal_s / 1e12:.3g}): that peak does not bound this step's kernels, so no share is given",
        }
    return {
        **out,
        "peak_tflops": count.total / ideal_s / 1e12,
        "peak_dtype": label,
        "peak_share": share,
        "peak_basis": basis,
    }


def flops_extra_info(
    count: FlopCount, median_ms: float, device: torch.device | str, info: Mapping[str, Any]
) -> dict[str, Any]:
    """The keys a case's extra_info gets: gflop_per_step, attention_gflop, achieved_tflops, flops_method
    and either peak_tflops, peak_dtype, peak_share, peak_basis or the peak_note saying why not."""
    classes = [c for c, n in count.by_class.items() if n > 0]
    dtypes = math_dtypes(info, device, classes)
    peaks = dtypes if isinstance(dtypes, str) else {c: peak_for(device, d, c) for c, d in dtypes.items()}
    return {**roofline(count, median_ms, peaks), "attention_gflop": count.attention / 1e9, "flops_method": count.method}
