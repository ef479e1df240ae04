"""A stand-in for the NVIDIA driver's libnvidia-ml under the real nvidia-ml-py (module `pynvml`).

nvidia-ml-py calls the C library through ctypes: each wrapper fetches a symbol from
`pynvml.nvmlLib`, passes ctypes out-parameters, and turns a non-zero return code into the matching
NVMLError subclass (NVMLError(3) is an NVMLError_NotSupported). `FakeLibNvml` sits where the shared
library would be, so the code under test runs nvidia-ml-py's own wrappers, with their return types,
their exceptions, their two-call process listing, and NVMLError_FunctionNotFound for a symbol the
driver lacks. Only the driver's answers are scripted, per GPU, in `FakeGpu`.

    lib = install(monkeypatch, FakeGpu(persistence=0))
    lib.refuse["nvmlDeviceGetRemappedRows"] = pynvml.NVML_ERROR_NO_PERMISSION

The clock-event mask follows the driver's GpuIdle: set while no process holds a CUDA context on the
GPU (no compute process listed; the kept health checks, taken before any context, read gpu_idle
at the 345 MHz idle clock), never while one does, at whatever utilisation (252 kept telemetry
summaries on H100 and H200, taken with the run's context open: no gpu_idle in any, one case's 196
samples at a mean 0.3% utilisation among them). A GPU running this process's step:
`FakeGpu(compute=[(os.getpid(), GIB)], util_pct=97)`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

GIB = 1024**3


@dataclass
class FakeGpu:
    """What the driver answers for one GPU; None where the GPU does not support the query."""

    name: bytes = b"NVIDIA H100 80GB HBM3"
    persistence: int = pynvml.NVML_FEATURE_ENABLED
    max_sm_mhz: int = 1980
    app_sm_mhz: int | None = 1980  # the application clock set now (nvidia-smi -ac)
    default_app_sm_mhz: int | None = 1980  # the GPU's default application clock (nvidia-smi -rac)
    clock_events: int | None = 0  # the reasons set besides GpuIdle, which the driver adds itself (above)
    util_pct: int = 0  # share of NVML's last sample period a kernel ran (nvmlUtilization_t.gpu)
    mem_util_pct: int = 0  # ... that device memory was read or written (nvmlUtilization_t.memory)
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes used; None: unknown)
    graphics: list[tuple[int, int | None]] | None = field(default_factory=list)
    process_names: dict[int, bytes] = field(default_factory=dict)
    ecc: tuple[int, int] | None = (pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED)  # (current, pending)
    ecc_uncorrected_volatile: int = 0
    retired_pages_pending: int | None = None  # page retirement: before Ampere
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # (corrected, uncorrected, pending, failed)
    total_bytes: int = 80 * GIB
    used_bytes: int = GIB // 2
    sm_mhz: int = 1980  # the SM clock now (perfgate.measure.throttle reads it after every timed round)
    energy_mj: int | None = 123_456_789  # total energy since the driver loaded (Volta and later)


class FakeLibNvml:
    """The C entry points nvidia-ml-py calls, answering from FakeGpu records; return codes as NVML's."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self._handles = [pynvml.struct_c_nvmlDevice_t() for _ in gpus]
        self.inits = self.shutdowns = 0
        self.refuse: dict[str, int] = {}  # entry point -> the error code it returns instead
        self.missing: set[str] = set()  # entry points this driver lacks (an older one)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            if name in object.__getattribute__(self, "missing"):
                raise AttributeError(name)  # what ctypes raises for a symbol the library lacks
            code = object.__getattribute__(self, "refuse").get(name)
            if code is not None:
                return lambda *args: code
        return object.__getattribute__(self, name)

    def _gpu(self, handle: Any) -> FakeGpu:
        address = ctypes.cast(handle, ctypes.c_void_p).value
        index = [ctypes.addressof(h) for h in self._handles].index(address)
        return self.gpus[index]

    @staticmethod
    def _out(ref: Any, value: Any) -> int:
        ref._obj.value = value
        return pynvml.NVML_SUCCESS

    # library and devices
    def nvmlInitWithFlags(self, flags: int) -> int:
        self.inits += 1
        return pynvml.NVML_SUCCESS

    def nvmlShutdown(self) -> int:
        self.shutdowns += 1
        return pynvml.NVML_SUCCESS

    def nvmlErrorString(self, code: int) -> bytes:
        return b"fake NVML error"

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        if index.value >= len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        ref._obj.contents = self._handles[index.value]
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetIndex(self, handle: Any, ref: Any) -> int:
        return self._out(ref, self.gpus.index(self._gpu(handle)))

    def nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        buf.value = self._gpu(handle).name
        return pynvml.NVML_SUCCESS

    # state
    def nvmlDeviceGetPersistenceMode(self, handle: Any, ref: Any) -> int:
        return self._out(ref, self._gpu(handle).persistence)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: Any, ref: Any) -> int:
        return self._out(ref, self._gpu(handle).max_sm_mhz)

    def nvmlDeviceGetClock(self, handle: Any, clock_type: Any, clock_id: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        mhz = {
            pynvml.NVML_CLOCK_ID_APP_CLOCK_TARGET: gpu.app_sm_mhz,
            pynvml.NVML_CLOCK_ID_APP_CLOCK_DEFAULT: gpu.default_app_sm_mhz,
        }.get(clock_id.value)
        return pynvml.NVML_ERROR_NOT_SUPPORTED if mhz is None else self._out(ref, mhz)

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: Any, ref: Any) -> int:
        return self._out(ref, self._gpu(handle).sm_mhz)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, ref: Any) -> int:
        mj = self._gpu(handle).energy_mj
        return pynvml.NVML_ERROR_NOT_SUPPORTED if mj is None else self._out(ref, mj)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.clock_events is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        idle = pynvml.nvmlClocksEventReasonGpuIdle if not gpu.compute else 0  # no context: idle
        return self._out(ref, gpu.clock_events | idle)

    def nvmlDeviceGetUtilizationRates(self, handle: Any, ref: Any) -> int:
        gpu, util = self._gpu(handle), ref._obj
        util.gpu, util.memory = gpu.util_pct, gpu.mem_util_pct
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle: Any, ref: Any) -> int:
        gpu, mem = self._gpu(handle), ref._obj
        mem.total, mem.used, mem.free = gpu.total_bytes, gpu.used_bytes, gpu.total_bytes - gpu.used_bytes
        return pynvml.NVML_SUCCESS

    # processes: the first call asks for the count (no array), the second fills the array
    def _processes(self, procs: list[tuple[int, int | None]] | None, count: Any, array: Any) -> int:
        if procs is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if not procs:
            count._obj.value = 0
            return pynvml.NVML_SUCCESS
        if array is None or count._obj.value < len(procs):
            count._obj.value = len(procs)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for i, (pid, used) in enumerate(procs):
            array[i].pid = pid
            array[i].usedGpuMemory = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
        count._obj.value = len(procs)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, array: Any) -> int:
        return self._processes(self._gpu(handle).compute, count, array)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any, count: Any, array: Any) -> int:
        return self._processes(self._gpu(handle).graphics, count, array)

    def nvmlSystemGetProcessName(self, pid: Any, buf: Any, size: Any) -> int:
        for gpu in self.gpus:
            if pid.value in gpu.process_names:
                buf.value = gpu.process_names[pid.value]
                return pynvml.NVML_SUCCESS
        return pynvml.NVML_ERROR_NOT_FOUND

    # ECC
    def nvmlDeviceGetEccMode(self, handle: Any, current: Any, pending: Any) -> int:
        ecc = self._gpu(handle).ecc
        if ecc is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        current._obj.value, pending._obj.value = ecc
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter_type: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.ecc is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        wanted = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return self._out(ref, gpu.ecc_uncorrected_volatile if (error_type.value, counter_type.value) == wanted else 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, ref: Any) -> int:
        pending = self._gpu(handle).retired_pages_pending
        return pynvml.NVML_ERROR_NOT_SUPPORTED if pending is None else self._out(ref, pending)

    def nvmlDeviceGetRemappedRows(self, handle: Any, *refs: Any) -> int:
        rows = self._gpu(handle).remapped_rows
        if rows is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        for ref, value in zip(refs, rows, strict=True):
            ref._obj.value = value
        return pynvml.NVML_SUCCESS


def install(monkeypatch: pytest.MonkeyPatch, *gpus: FakeGpu) -> FakeLibNvml:
    """Load FakeLibNvml as nvidia-ml-py's library for this test (nvmlInit then never dlopens one)."""
    lib = FakeLibNvml(list(gpus) or [FakeGpu()])
    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return lib
