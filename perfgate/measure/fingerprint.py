"""Hardware and software fingerprint that keys baselines.

Two runs are comparable only when everything that changes speed is the same: GPU model, compute
capability, driver, CUDA, the torch / torchao / torch-tensorrt versions, the CPU (vendor, family,
model, stepping and cache sizes: the brand string alone does not tell CPU generations apart), the
CPU flags that select kernels (AMX and AVX-512 BF16 decide whether bf16 is fast), and the thread
count.

Why the CPU's generation: baseline 0002 was recorded on an AMD EPYC of family 26 (Zen 5, 96 KiB L1d)
and a family-25 machine got the same id from the brand "AMD EPYC" and four flags; unchanged code
then read +3% to +32% there, and the +100% CPU tolerance that followed blinded the gate.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
from collections.abc import Mapping
from typing import Any

import torch

# CPU flags that change which kernels oneDNN / inductor pick, hence the speed of a case.
SPEED_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)

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
    "cpu_vendor",
    "cpu_family",
    "cpu_model_number",
    "cpu_stepping",
    "cpu_cache_kib",
    "cpu_flags",
    "threads",
    "world_size",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_flags() -> frozenset[str]:
    """Every flag of this CPU as Linux names it (amx_tile, avx512_fp16, ...), through py-cpuinfo."""
    return frozenset(_cpuinfo().get("flags") or ())


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, Any]:
    """py-cpuinfo's reading of this CPU (the library pytest-benchmark uses for machine_info), once
    per process: it takes a quarter of a second."""
    import cpuinfo  # py-cpuinfo2

    return dict(cpuinfo.get_cpu_info())


def cpu_fields(info: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint's CPU fields from a py-cpuinfo dict: brand, vendor, family / model / stepping,
    cache sizes in KiB, and the flags that pick kernels."""
    flags = set(info.get("flags") or ())
    caches = {
        name: int(info[key]) // 1024
        for name, key in (
            ("l1d", "l1_data_cache_size"),
            ("l1i", "l1_instruction_cache_size"),
            ("l2", "l2_cache_size"),
            ("l3", "l3_cache_size"),
        )
        if isinstance(info.get(key), int)
    }
    return {
        "cpu_model": info.get("brand_raw") or platform.processor() or platform.machine(),
        "cpu_vendor": info.get("vendor_id_raw"),
        "cpu_family": info.get("family"),
        "cpu_model_number": info.get("model"),
        "cpu_stepping": info.get("stepping"),
        "cpu_cache_kib": caches,
        "cpu_flags": [f for f in SPEED_FLAGS if f in flags],
    }


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
    fp: dict[str, Any] = {
        "device_type": device.type,
        "gpu_name": None,
        "compute_capability": None,
        "driver": None,
        "cuda": None,
        "torch": torch.__version__,
        "torchao": _version("torchao"),
        "torch_tensorrt": _version("torch-tensorrt"),
        **cpu_fields(_cpuinfo()),
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
    """A readable, filesystem-safe key: device, hardware (with the CPU's family and model, which
    the brand does not say), threads and a hash of every key field."""
    key = {k: fp.get(k) for k in KEY_FIELDS}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    hw = fp.get("gpu_name") if fp.get("device_type") == "cuda" else fp.get("cpu_model")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", str(hw or "unknown")).strip("-").lower()[:40]
    if fp.get("device_type") != "cuda" and fp.get("cpu_family") is not None:
        slug += f"-f{fp['cpu_family']}m{fp.get('cpu_model_number')}"
    return f"{fp.get('device_type')}-{slug}-t{fp.get('threads')}-{digest}"


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Key fields that differ between two fingerprints: what makes a baseline foreign."""
    return {k: (a.get(k), b.get(k)) for k in KEY_FIELDS if a.get(k) != b.get(k)}
