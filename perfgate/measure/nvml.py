"""The one NVML opener: import pynvml, nvmlInit, the handle of a CUDA device, and shutdown.

Telemetry, the energy counter, the throttle probe and the health check each hold their own NVML
session (nvmlInit is reference-counted, so each pairs its init with one shutdown); they differ
only in what they read first and how they word a failure, so the opening is here once and a
failure says which stage failed (`NvmlUnavailable.stage`) for the caller's message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from perfgate.extras import need

INSTALL_HINT = "pip install nvidia-ml-py==13.615.71"


class NvmlUnavailable(Exception):
    """NVML cannot serve this device: `stage` is "import", "init" or "handle"; `error` the cause."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(f"{stage}: {error}")
        self.stage, self.error = stage, error


def import_pynvml() -> ModuleType:
    # nvidia-ml-py, perfgate's `gpu` extra; imported lazily: the CPU-only path never needs it. A
    # missing one is one line naming the extra (the "import" stage's error), whoever opened NVML.
    return need("pynvml", "GPU telemetry")


def nvml_handle(nvml: Any, cuda_index: int) -> tuple[Any, int]:
    """The NVML handle of CUDA device `cuda_index`, and its NVML index.

    NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES, CUDA may not: match by UUID
    when torch can tell it, else map the index through CUDA_VISIBLE_DEVICES.
    """
    if torch.cuda.is_available():
        try:
            uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            return handle, int(nvml.nvmlDeviceGetIndex(handle))
        except Exception:  # noqa: BLE001 - any failure falls back to index mapping below
            pass
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    index = int(visible[cuda_index]) if cuda_index < len(visible) and visible[cuda_index].isdigit() else cuda_index
    return nvml.nvmlDeviceGetHandleByIndex(index), index


@dataclass(frozen=True)
class NvmlDevice:
    nvml: Any  # pynvml, or a stand-in with the same names (tests/fake_nvml.py)
    handle: Any
    index: int  # NVML's index of the device

    def shutdown(self) -> None:
        """End this session's nvmlInit (an error on the way out changes nothing for the caller)."""
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_device(cuda_index: int = 0, nvml: Any = None) -> NvmlDevice:
    """An NVML session on CUDA device `cuda_index`; NvmlUnavailable says which stage failed."""
    try:
        nvml = nvml if nvml is not None else import_pynvml()
    except ImportError as exc:
        raise NvmlUnavailable("import", exc) from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable("init", exc) from None
    try:
        handle, index = nvml_handle(nvml, cuda_index)
    except nvml.NVMLError as exc:
        NvmlDevice(nvml, None, -1).shutdown()
        raise NvmlUnavailable("handle", exc) from None
    return NvmlDevice(nvml, handle, index)
