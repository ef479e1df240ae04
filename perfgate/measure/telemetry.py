"""Telemetry while a case runs: a background sampler of GPU and CPU state.

Every `interval_s` a daemon thread reads, through NVML (module `pynvml` from nvidia-ml-py), the
GPU's utilisation, memory used, temperature, power, SM clock and clock-event reasons, and through
psutil the machine's CPU utilisation, this process's CPU use and RSS, and how many cores other
processes kept busy. `summary()` gives min / mean / max per metric, the share of samples that
carried each clock-event reason, and the SM clock over the busy samples (`is_busy`); the gate
(`perfgate.gate.decide.telemetry_reason`) turns throttling, a low busy clock or another process on
the GPU into its "unreliable" verdict. Without NVML (no driver:
`NVMLError_LibraryNotFound`) the sampler reads the CPU only and says so once per process.

Reads run on the sampler's own thread: each NVML query costs tens of microseconds to a few
milliseconds, so at the default 0.1 s interval the sampler uses well under 1% of one core.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from perfgate.measure.nvml import NvmlUnavailable, import_pynvml, open_device
from perfgate.record import MinMeanMax, Telemetry, TelemetryGpu

log = logging.getLogger("perfgate.measure.telemetry")

MIB = 1024 * 1024

# NVML clock-event reasons (nvmlClocksEventReason* masks; values are NVML's stable ABI and only
# the fallback when a stand-in module lacks a name). The "ThrottleReasons" names are deprecated.
CLOCK_EVENT_REASONS: dict[str, tuple[str, int]] = {
    "gpu_idle": ("nvmlClocksEventReasonGpuIdle", 0x1),
    "applications_clocks": ("nvmlClocksEventReasonApplicationsClocksSetting", 0x2),
    "sw_power_cap": ("nvmlClocksEventReasonSwPowerCap", 0x4),
    "hw_slowdown": ("nvmlClocksEventReasonHwSlowdown", 0x8),
    "sync_boost": ("nvmlClocksEventReasonSyncBoost", 0x10),
    "sw_thermal_slowdown": ("nvmlClocksEventReasonSwThermalSlowdown", 0x20),
    "hw_thermal_slowdown": ("nvmlClocksEventReasonHwThermalSlowdown", 0x40),
    "hw_power_brake_slowdown": ("nvmlClocksEventReasonHwPowerBrakeSlowdown", 0x80),
    "display_clock_setting": ("nvmlClocksEventReasonDisplayClockSetting", 0x100),
}

SAMPLED_METRICS = (
    "gpu_util_pct",
    "gpu_mem_util_pct",
    "gpu_mem_used_mib",
    "gpu_temp_c",
    "gpu_power_w",
    "sm_clock_mhz",
    "cpu_util_pct",
    "process_cpu_pct",
    "other_cpu_cores",
    "rss_mib",
)

# Heat or hardware protection: the clock events that mean a slowed GPU (gate, throttle, health).
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def is_busy(gpu_util_pct: float | None, clock_events: list[str] | None) -> bool:
    """Whether a GPU reading was taken while the GPU worked: NVML saw a kernel in its last sample
    period (utilisation above 0) and does not call the GPU idle. The idle reason alone cannot tell:
    NVML's GpuIdle means nothing runs and the clocks are dropping to idle, and with this process's
    CUDA context open it never showed (252 kept telemetry summaries on H100 and H200: no gpu_idle in
    any, every sample counted busy, one case's 196 samples at a mean 0.3% utilisation among them),
    while the health checks before those runs, with no context, read it. The utilisation alone
    cannot either: it covers NVML's past sample period (1/6 s to 1 s), so a reading just after the
    work stopped can show some while the clocks drop, which is when NVML says GpuIdle. Without a
    utilisation reading (a GPU or driver that gives none) the idle reason decides."""
    if gpu_util_pct is None and clock_events is None:
        return False
    idle = clock_events is not None and "gpu_idle" in clock_events
    return not idle and (gpu_util_pct is None or gpu_util_pct > 0)


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One reading; None where the source or the field is unavailable."""

    t_s: float  # seconds since the sampler started
    cpu_util_pct: float | None = None  # whole machine, 0-100 over all cores
    process_cpu_pct: float | None = None  # this process, 100 = one core
    other_cpu_cores: float | None = None  # cores other processes kept busy (contention)
    rss_mib: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_util_pct: float | None = None
    gpu_mem_used_mib: float | None = None
    gpu_temp_c: float | None = None
    gpu_power_w: float | None = None
    sm_clock_mhz: float | None = None
    clock_event_mask: int | None = None
    gpu_other_processes: int | None = None  # None: cannot tell (PID namespaces)


# --- NVML ------------------------------------------------------------------------------------

_NOTICE_LOCK = threading.Lock()
_NOTICES_GIVEN: set[str] = set()


def notice_once(key: str, message: str) -> bool:
    """Log `message` the first time `key` is seen in this process; True if it was logged now."""
    with _NOTICE_LOCK:
        if key in _NOTICES_GIVEN:
            return False
        _NOTICES_GIVEN.add(key)
    log.warning(message)
    return True


def decode_clock_events(mask: int, nvml: Any = None) -> list[str]:
    """Names of the clock-event reasons set in an NVML bitmask."""
    out = []
    for name, (attr, default) in CLOCK_EVENT_REASONS.items():
        bit = int(getattr(nvml, attr, default)) if nvml is not None else default
        if mask & bit:
            out.append(name)
    return out


class NvmlReader:
    """Reads one GPU through an NVML module (pynvml, or a stand-in with the same names).

    A field the GPU or driver does not support (NVMLError) is dropped after its first failure
    rather than retried every sample; older drivers lack the *V / ClocksEvent entry points, so
    the deprecated names are tried once before giving up.
    """

    def __init__(self, nvml: Any, handle: Any, index: int) -> None:
        self.nvml = nvml
        self.handle = handle
        self.index = index
        self.unsupported: dict[str, str] = {}
        self.name = self._safe(lambda: _text(nvml.nvmlDeviceGetName(handle)), "name")
        self.max_sm_clock_mhz = self._safe(
            lambda: float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)), "max_sm_clock"
        )
        self.total_mem_mib = self._safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / MIB, "total_mem")

    def _safe(self, read: Any, field: str) -> Any:
        if field in self.unsupported:
            return None
        try:
            return read()
        except self.nvml.NVMLError as exc:
            self.unsupported[field] = str(exc) or type(exc).__name__
            return None
        except AttributeError as exc:  # a stand-in or an old nvidia-ml-py without the function
            self.unsupported[field] = str(exc)
            return None

    def _temperature(self) -> float:
        n = self.nvml
        try:
            return float(n.nvmlDeviceGetTemperatureV(self.handle, n.NVML_TEMPERATURE_GPU))
        except (n.NVMLError, AttributeError):
            return float(n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU))  # drivers before the V API

    def clock_event_mask(self) -> int:
        """The clock-event reasons active now (NVML bitmask; the deprecated throttle-reason call on old drivers)."""
        n = self.nvml
        try:
            return int(n.nvmlDeviceGetCurrentClocksEventReasons(self.handle))
        except (n.NVMLError, AttributeError):
            return int(n.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle))

    def _other_processes(self) -> int | None:
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        pids = {int(p.pid) for p in procs}
        # Inside a container NVML reports host PIDs: if ours is not among them we cannot tell ours apart.
        return len(pids - {os.getpid()}) if os.getpid() in pids else None

    def close(self) -> None:
        """Release this reader's nvmlInit (NVML counts them)."""
        try:
            self.nvml.nvmlShutdown()
        except (self.nvml.NVMLError, AttributeError):
            pass

    def read(self) -> dict[str, Any]:
        n, h = self.nvml, self.handle
        util = self._safe(lambda: n.nvmlDeviceGetUtilizationRates(h), "utilization")
        mem = self._safe(lambda: n.nvmlDeviceGetMemoryInfo(h), "memory")
        power_mw = self._safe(lambda: n.nvmlDeviceGetPowerUsage(h), "power")
        return {
            "gpu_util_pct": float(util.gpu) if util is not None else None,
            "gpu_mem_util_pct": float(util.memory) if util is not None else None,
            "gpu_mem_used_mib": mem.used / MIB if mem is not None else None,
            "gpu_temp_c": self._safe(self._temperature, "temperature"),
            "gpu_power_w": power_mw / 1000.0 if power_mw is not None else None,
            "sm_clock_mhz": self._safe(lambda: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)), "sm_clock"),
            "clock_event_mask": self._safe(self.clock_event_mask, "clock_events"),
            "gpu_other_processes": self._safe(self._other_processes, "processes"),
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml(cuda_index: int = 0, nvml: Any = None) -> tuple[NvmlReader | None, str | None]:
    """(reader, None) or (None, why GPU telemetry is unavailable). Never raises for a missing driver."""
    try:
        dev = open_device(cuda_index, nvml)
    except NvmlUnavailable as exc:
        if exc.stage == "import":
            return None, str(exc.error)
        if exc.stage == "init":
            not_found = getattr(nvml or import_pynvml(), "NVMLError_LibraryNotFound", None)
            if not_found is not None and isinstance(exc.error, not_found):
                return None, "NVML library not found (no NVIDIA driver on this machine)"
            return None, f"nvmlInit failed: {exc.error}"
        return None, f"NVML has no device for cuda:{cuda_index}: {exc.error}"
    return NvmlReader(dev.nvml, dev.handle, dev.index), None


# --- psutil ----------------------------------------------------------------------------------


class CpuReader:
    """Machine and process CPU use between successive reads (psutil time counters, not
    psutil.cpu_percent, whose module-wide state other callers would disturb)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self._ncores = psutil.cpu_count() or 1
        self._last = self._times()

    def _times(self) -> tuple[float, float, float, float]:
        t = self._psutil.cpu_times()
        busy = sum(getattr(t, f, 0.0) for f in ("user", "system", "nice", "irq", "softirq", "steal"))
        own = self._proc.cpu_times()
        return time.perf_counter(), busy, busy + t.idle + getattr(t, "iowait", 0.0), own.user + own.system

    def read(self) -> dict[str, float | None]:
        now = self._times()
        (t0, busy0, total0, own0), (t1, busy1, total1, own1) = self._last, now
        self._last = now
        wall, total = t1 - t0, total1 - total0
        rss = self._proc.memory_info().rss / MIB
        if wall <= 0 or total <= 0:
            return {"rss_mib": rss, "cpu_util_pct": None, "process_cpu_pct": None, "other_cpu_cores": None}
        busy, own = busy1 - busy0, own1 - own0
        return {
            "rss_mib": rss,
            "cpu_util_pct": 100.0 * busy / total,
            "process_cpu_pct": 100.0 * own / wall,
            "other_cpu_cores": max(busy - own, 0.0) / wall,
        }


# --- the sampler -----------------------------------------------------------------------------


class _Aggregate:
    """Exact running min / mean / max, so a long run can thin its stored timeline."""

    def __init__(self) -> None:
        self.n, self.total, self.lo, self.hi = 0, 0.0, float("inf"), float("-inf")

    def add(self, v: float) -> None:
        self.n += 1
        self.total += v
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def summary(self) -> MinMeanMax:
        return MinMeanMax(min=self.lo, mean=self.total / self.n, max=self.hi)


class TelemetrySampler:
    """Context manager sampling telemetry on a daemon thread while the code inside it runs.

    `device` "cuda[:N]" samples that GPU through NVML (or `nvml`, a stand-in module); "cpu"
    samples the CPU only. `sample()` takes one reading on the calling thread (tests drive the
    sampler that way, without timing). At most `max_samples` readings are kept for a timeline
    (every other one is dropped when full); summaries stay exact.
    """

    def __init__(
        self,
        device: torch.device | str = "cpu",
        *,
        interval_s: float = 0.1,
        nvml: Any = None,
        max_samples: int = 10_000,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"telemetry interval must be positive, got {interval_s} s")
        self.device = torch.device(device)
        self.interval_s = interval_s
        self.max_samples = max_samples
        self.samples: list[Sample] = []
        self._agg = {m: _Aggregate() for m in SAMPLED_METRICS}
        self._reasons: dict[str, int] = {}
        self._masks = 0  # samples with a clock-event mask
        self._gpu_judged = 0  # samples with a utilisation or a mask: busy or not (is_busy)
        self._busy_samples = 0
        self._busy_clock = _Aggregate()
        self._other_procs_max: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()
        self._closed = False
        self._cpu = CpuReader()
        self.gpu: NvmlReader | None = None
        self.gpu_unavailable: str | None = None
        if self.device.type == "cuda":
            self.gpu, self.gpu_unavailable = open_nvml(self.device.index or 0, nvml)
            if self.gpu is None:
                notice_once("nvml", f"perfgate telemetry: {self.gpu_unavailable}; sampling the CPU only")

    # -- sampling --

    def sample(self) -> Sample:
        values: dict[str, Any] = dict(self._cpu.read())
        if self.gpu is not None:
            values.update(self.gpu.read())
        s = Sample(t_s=time.perf_counter() - self._t0, **values)
        with self._lock:
            self._record(s)
        return s

    def _record(self, s: Sample) -> None:
        for m in SAMPLED_METRICS:
            v = getattr(s, m)
            if v is not None:
                self._agg[m].add(float(v))
        names = None
        if s.clock_event_mask is not None:
            names = decode_clock_events(s.clock_event_mask, self.gpu.nvml if self.gpu else None)
            self._masks += 1
            for name in names:
                self._reasons[name] = self._reasons.get(name, 0) + 1
        if s.gpu_util_pct is not None or names is not None:
            self._gpu_judged += 1
            if is_busy(s.gpu_util_pct, names):
                self._busy_samples += 1
                if s.sm_clock_mhz is not None:
                    self._busy_clock.add(s.sm_clock_mhz)
        if s.gpu_other_processes is not None:
            self._other_procs_max = max(self._other_procs_max or 0, s.gpu_other_processes)
        self.samples.append(s)
        if len(self.samples) > self.max_samples:
            del self.samples[1::2]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> TelemetrySampler:
        self._t0 = time.perf_counter()
        self._cpu.read()  # prime the CPU counters: the first delta starts here
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name="perfgate-telemetry")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()  # the tail since the last tick
        if self.gpu is not None and not self._closed:
            self.gpu.close()
            self._closed = True

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- results --

    def summary(self) -> Telemetry:
        """Min / mean / max per metric and clock-event shares: the record's `telemetry`. A CUDA
        device's summary names the GPU read, or why none could be (`gpu_unavailable`)."""
        with self._lock:
            n = self._agg["rss_mib"].n  # every sample reads RSS
            gpu_n = max(self._agg[m].n for m in ("gpu_util_pct", "sm_clock_mhz"))
            masks, judged = self._masks, self._gpu_judged
            gpu = self.gpu
            return Telemetry(
                interval_s=self.interval_s,
                n_samples=n,
                source="nvml+psutil" if gpu is not None else "psutil",
                metrics={m: a.summary() for m, a in self._agg.items() if a.n},
                gpu=TelemetryGpu(
                    index=gpu.index,
                    name=gpu.name,
                    max_sm_clock_mhz=gpu.max_sm_clock_mhz,
                    total_mem_mib=gpu.total_mem_mib,
                    unsupported=dict(gpu.unsupported),
                    n_samples=gpu_n,
                )
                if gpu is not None
                else None,
                gpu_unavailable=self.gpu_unavailable if self.device.type == "cuda" else None,
                clock_events={
                    name: self._reasons[name] / masks for name in CLOCK_EVENT_REASONS if name in self._reasons
                }
                if masks
                else None,
                busy_samples=self._busy_samples if judged else None,
                busy_sm_clock_mhz=self._busy_clock.summary() if self._busy_clock.n else None,
                gpu_other_processes_max=self._other_procs_max,
            )

    def timeline(self) -> list[dict[str, Any]]:
        """The stored samples as dicts (for reports), fields that were never read left out."""
        with self._lock:
            return [{k: v for k, v in asdict(s).items() if v is not None} for s in self.samples]
