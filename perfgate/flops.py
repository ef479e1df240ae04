"""FLOPs per step and the roofline: achieved TFLOP/s against a peak measured on this machine.

Counting uses torch's `FlopCounterMode` (exact for Linear, convolutions and (b)mm). On the CPU
it counts scaled_dot_product_attention as 0 (the CPU flash kernel has no formula), so there the
count runs with SDPA forced to the MATH backend, which decomposes attention into the bmm calls it
counts. CUDA's flash / efficient / cuDNN kernels have formulas and are counted as they are.

FLOPs are the model's work: counted on the eager fp32 module and credited unchanged to every
variant (the MFU convention), so a quantised or compiled variant's achieved TFLOP/s compares
directly with the baseline's. The peak is one large matrix product per (device, dtype), timed
once per process and cached: the share of it tells how far the step is from the machine's
dense-matmul ceiling, not from the vendor's datasheet.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
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
    by_op = {str(op).split(".")[-1] if "." in str(op) else str(op): int(v) for op, v in counts.get("Global", {}).items()}
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


def count_step_flops(module: nn.Module, inputs: tuple[torch.Tensor, ...], *, step: str = "inference") -> FlopCount:
    """FLOPs of one benchmark step: a forward (inference) or forward + backward (train).

    The train count leaves the optimiser out (FlopCounterMode counts no element-wise work) and
    clears the gradients it made, so the module is as it was.
    """
    device_type = next((t.device.type for t in inputs if isinstance(t, torch.Tensor)), "cpu")
    root = type(module).__name__
    from perfgate.workload import is_training, train_loss

    if is_training(step):
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


@dataclass(frozen=True, kw_only=True)
class Peak:
    tflops: float
    dtype: str  # "fp32", "bf16", "fp16"
    n: int  # the n x n x n product timed
    seconds: float  # best time of one product
    device: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_PEAKS: dict[tuple[str, torch.dtype], Peak] = {}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_matmul_s(n: int, dtype: torch.dtype, device: torch.device, repeats: int = 3) -> float:
    """Best wall time of one n x n @ n x n product (after one untimed warm-up)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device, dtype)
    b = torch.randn(n, n, generator=g).to(device, dtype)
    torch.mm(a, b)
    _sync(device)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def measure_peak(
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    *,
    n_max: int | None = None,
    min_time_s: float = 0.05,
) -> Peak:
    """Dense matmul TFLOP/s: n doubles from 256 until one product takes `min_time_s` or n hits
    `n_max` (2048 on the CPU, 8192 on a GPU), so a dtype the CPU emulates slowly (fp16 without
    AMX-FP16 runs ~200x slower than fp32) still finishes in well under a second."""
    device = torch.device(device)
    n_max = n_max or (8192 if device.type == "cuda" else 2048)
    n, seconds = 256, 0.0
    while True:
        seconds = time_matmul_s(n, dtype, device, repeats=3 if device.type == "cuda" else 2)
        if seconds >= min_time_s or n >= n_max:
            break
        n *= 2
    return Peak(tflops=2 * n**3 / seconds / 1e12, dtype=SHORT.get(dtype, str(dtype)), n=n, seconds=seconds, device=str(device))


def peak_for(device: torch.device | str, dtype: torch.dtype = torch.float32) -> Peak:
    """The measured peak for (device, dtype), timed on first use and cached for the process."""
    device = torch.device(device)
    key = (str(device), dtype)
    if key not in _PEAKS:
        _PEAKS[key] = measure_peak(device, dtype)
    return _PEAKS[key]


def compute_dtype(info: dict[str, Any]) -> torch.dtype:
    """The dtype the variant's matmuls run in: autocast's, else the cast's, else fp32.

    Quantised variants keep fp32 (weight-only) or their activation dtype here: no int8 / fp8
    peak is measured, so their share is against the float peak and says so via `peak_dtype`.
    """
    name = info.get("autocast") or info.get("dtype") or "float32"
    return DTYPES.get(str(name).removeprefix("torch."), torch.float32)


def roofline(flops_per_step: int | float, median_ms: float, peak: Peak | None) -> dict[str, Any]:
    """GFLOP per step, achieved TFLOP/s at the median, and the share of the measured peak."""
    achieved = flops_per_step / (median_ms / 1e3) / 1e12 if median_ms > 0 else 0.0
    out: dict[str, Any] = {"gflop_per_step": flops_per_step / 1e9, "achieved_tflops": achieved}
    if peak is not None:
        out |= {"peak_tflops": peak.tflops, "peak_dtype": peak.dtype, "peak_matmul_n": peak.n, "peak_share": achieved / peak.tflops if peak.tflops > 0 else None}
    return out


def flops_extra_info(count: FlopCount, median_ms: float, device: torch.device | str, info: dict[str, Any]) -> dict[str, Any]:
    """The keys a case's extra_info gets: gflop_per_step, attention_gflop, achieved_tflops,
    peak_tflops, peak_dtype, peak_share, flops_method."""
    peak = peak_for(device, compute_dtype(info))
    return {**roofline(count.total, median_ms, peak), "attention_gflop": count.attention / 1e9, "flops_method": count.method}
