"""Accuracy of a variant's output against the fp32 eager reference.

A variant that is fast because it is wrong must never pass: every case compares its output with
the reference of the same weights and inputs; the gate fails it outside its variant's tolerance
(`tolerance_for` below, `perfgate.gate.decide.accuracy_violations`), and NaN or Inf
whatever the tolerance.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch


def flatten_outputs(out: Any) -> torch.Tensor:
    """All floating tensors of an output (tensor, tuple, list, dict) as one fp64 vector."""
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu", torch.float64).reshape(-1)
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        parts = [flatten_outputs(o) for o in out if isinstance(o, (torch.Tensor, tuple, list, dict))]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    raise TypeError(f"cannot compare output of type {type(out).__name__}")


def metrics(out: Any, ref: Any, *, kind: str = "tensor") -> dict[str, float]:
    """Relative L2 error, max abs error, cosine similarity, and PSNR for images and audio.

    PSNR takes a peak-to-peak range of 2 (signals in [-1, 1]).
    """
    a, b = flatten_outputs(out), flatten_outputs(ref)
    if a.shape != b.shape:
        raise ValueError(f"output has {a.numel()} values, reference {b.numel()}")
    finite = bool(torch.isfinite(a).all())
    diff = a - b
    ref_norm = float(b.norm())
    m = {
        "finite": float(finite),
        "rel_l2": float(diff.norm() / ref_norm) if ref_norm > 0 else float(diff.norm()),
        "max_abs": float(diff.abs().max()) if diff.numel() else 0.0,
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)) if a.numel() else 1.0,
    }
    if kind in ("image", "audio"):
        mse = float(diff.pow(2).mean())
        m["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(4.0 / mse)
    if not finite:
        m.update(rel_l2=math.inf, max_abs=math.inf, cosine=-1.0)
    return m


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    rel_l2: float
    cosine: float  # minimum
    psnr_db: float | None = None  # minimum, for images and audio


# Why these numbers: fp32 variants (compile, TensorRT fp32) only reorder float sums, ~1e-6 relative
# per op growing with depth; bf16 keeps 8 bits of mantissa (~0.4% per rounding), int8/fp8 ~1% per
# layer. Deep decoders compound it, so the bounds are loose enough for the full models yet far
# below what a broken kernel gives (rel_l2 ~1, cosine ~0).
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "baseline": Tolerance(rel_l2=1e-5, cosine=0.999999),
    "compile*": Tolerance(rel_l2=1e-3, cosine=0.9999, psnr_db=60),
    "cudagraphs": Tolerance(rel_l2=1e-5, cosine=0.999999),
    "tensorrt": Tolerance(rel_l2=1e-2, cosine=0.999, psnr_db=40),
    "*int8*": Tolerance(rel_l2=0.2, cosine=0.98, psnr_db=20),  # before *bf16*: bf16+fp8-* is judged as FP8
    "*fp8*": Tolerance(rel_l2=0.2, cosine=0.98, psnr_db=20),
    "*fp16*": Tolerance(rel_l2=0.05, cosine=0.998, psnr_db=30),
    "*bf16*": Tolerance(rel_l2=0.1, cosine=0.99, psnr_db=25),
    "*": Tolerance(rel_l2=0.1, cosine=0.99, psnr_db=25),
}


def tolerance_for(variant: str, overrides: Mapping[str, Tolerance] | None = None) -> Tolerance:
    """First matching glob, overrides before defaults, in their written order."""
    for table in (overrides or {}, DEFAULT_TOLERANCES):
        for pattern, tol in table.items():
            if fnmatch.fnmatchcase(variant, pattern):
                return tol
    raise KeyError(variant)  # unreachable: "*" matches
