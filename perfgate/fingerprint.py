"""Hardware and software fingerprint that keys baselines.

Two runs are comparable only when everything that changes speed is the same: GPU model, compute
capability, driver, CUDA, the torch / torchao / torch-tensorrt versions, the CPU model, the CPU
flags that select kernels (AMX and AVX-512 BF16 decide whether bf16 is fast), and the thread count.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

# CPU flags that change which kernels oneDNN / inductor pick, hence the speed of a case.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_fp16")

# Fields that key a baseline; everything else in the fingerprint is informative only.
KEY_FIELDS = (
    "device_type",
    "gpu_name",
    "compute_capability",
    "driver",
    "cuda",
    "torch",
    "torchao",
    "torch_tensorrt",
    "cpu_model",
    "cpu_flags",
    "threads",
    "world_size",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_info(cpuinfo_text: str | None = None) -> tuple[str, list[str]]:
    """CPU model name and the speed-relevant flags, from /proc/cpuinfo where present."""
    text = cpuinfo_text
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine(), []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE)
    have = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else platform.machine()), [f for f in SPEED_FLAGS if f in have]


def nvml_driver_version() -> str | None:
    """The NVIDIA driver version through NVML, or None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver here
        return None


def fingerprint(device: torch.device | str) -> dict[str, Any]:
    """The fingerprint of this machine for runs on `device`."""
    device = torch.device(device)
    model, flags = cpu_info()
    fp: dict[str, Any] = {
        "device_type": device.type,
        "gpu_name": None,
        "compute_capability": None,
        "driver": None,
        "cuda": None,
        "torch": torch.__version__,
        "torchao": _version("torchao"),
        "torch_tensorrt": _version("torch-tensorrt"),
        "cpu_model": model,
        "cpu_flags": flags,
        "threads": torch.get_num_threads(),
        # An 8-rank torchrun case is not comparable with a single-process one.
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        fp.update(
            gpu_name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            driver=nvml_driver_version(),
            cuda=torch.version.cuda,
        )
    return fp


def fingerprint_id(fp: dict[str, Any]) -> str:
    """A readable, filesystem-safe key: device, hardware, threads and a hash of every key field."""
    key = {k: fp.get(k) for k in KEY_FIELDS}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    hw = fp.get("gpu_name") if fp.get("device_type") == "cuda" else fp.get("cpu_model")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", str(hw or "unknown")).strip("-").lower()[:40]
    return f"{fp.get('device_type')}-{slug}-t{fp.get('threads')}-{digest}"


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Key fields that differ between two fingerprints: what makes a baseline foreign."""
    return {k: (a.get(k), b.get(k)) for k in KEY_FIELDS if a.get(k) != b.get(k)}
