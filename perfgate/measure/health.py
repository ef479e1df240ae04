"""Is this GPU fit to measure? The runner health check before a gated run (`perfgate health`,
called by scripts/ci-benchmark before the benchmarks).

Each check reads NVML (module `pynvml` from nvidia-ml-py) once, while the GPU is idle, and says
ok, FAIL (with the one-line fix), n/a (this GPU does not have the feature: ECC on consumer GPUs)
or unknown (NVML refused the read, e.g. no permission):

- persistence: persistence mode on, so no job pays for the driver's start-up or starts from a
  low-power state;
- clocks: the SM application clock (the clock the GPU runs compute at, `nvidia-smi -ac`) not set
  below `clock_ratio_min` of the maximum SM clock, unless that is the GPU's own default (a T4's
  default is 37% of its maximum: a clock someone lowered fails, the factory setting does not);
- clock events: no thermal, power-brake or hardware slowdown active while the GPU is idle;
- processes: no other compute or graphics process on the GPU;
- ECC: no uncorrected ECC error since the driver loaded, no retired page or remapped row waiting
  for a reset, no ECC mode change waiting for a reboot;
- memory: at least `min_free_share` of the memory free.

NVML has no call to read locked clocks (`nvidia-smi -lgc`: nvidia-ml-py has only the Set and
Reset calls), so a lock set too low shows only under load: the telemetry during the run marks a
case unreliable when the busy SM clock stays under 75% of the maximum (perfgate.gate.decide).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from perfgate.measure.telemetry import MIB, SLOWDOWN_REASONS, NvmlReader, decode_clock_events, open_nvml

OK, FAIL, NA, UNKNOWN = "ok", "FAIL", "n/a", "unknown"


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: str  # OK, FAIL, NA or UNKNOWN
    detail: str
    fix: str | None = None  # what to do about a FAIL, one line


@dataclass(frozen=True, kw_only=True)
class Health:
    device: str
    gpu: str | None = None  # NVML's name of the GPU
    nvml_index: int | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


# --- the checks: each takes the NVML module and a device handle --------------------------------


def persistence(n: Any, h: Any) -> Check:
    if n.nvmlDeviceGetPersistenceMode(h) == n.NVML_FEATURE_ENABLED:
        return Check(name="persistence", status=OK, detail="persistence mode is on")
    return Check(
        name="persistence",
        status=FAIL,
        detail="persistence mode is off: a job may pay for the driver's start-up and start from a low-power state",
        fix="sudo systemctl enable --now nvidia-persistenced (survives reboots), or sudo nvidia-smi -pm 1",
    )


def _default_app_mhz(n: Any, h: Any) -> int | None:
    try:
        return n.nvmlDeviceGetClock(h, n.NVML_CLOCK_SM, n.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
    except n.NVMLError:
        return None


def clocks(n: Any, h: Any, clock_ratio_min: float) -> Check:
    max_mhz = n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)
    app_mhz = n.nvmlDeviceGetClock(h, n.NVML_CLOCK_SM, n.NVML_CLOCK_ID_APP_CLOCK_TARGET)
    default_mhz = _default_app_mhz(n, h)
    floor_mhz = clock_ratio_min * max_mhz
    if default_mhz is not None:
        floor_mhz = min(floor_mhz, default_mhz)  # the GPU's own default is never a misconfiguration
    if max_mhz and app_mhz < floor_mhz:
        default = f", default {default_mhz} MHz" if default_mhz is not None else ""
        return Check(
            name="clocks",
            status=FAIL,
            detail=f"the SM application clock is {app_mhz} MHz, {app_mhz / max_mhz:.0%} of the maximum {max_mhz} MHz "
            f"(< {clock_ratio_min:.0%}{default}): every case would run slowed",
            fix="sudo nvidia-smi -rac (default application clocks), or -ac MEM,SM with a clock near the maximum "
            "(nvidia-smi -q -d SUPPORTED_CLOCKS), then record new baselines",
        )
    return Check(name="clocks", status=OK, detail=f"SM application clock {app_mhz} MHz of the maximum {max_mhz} MHz")


def clock_events(reader: NvmlReader) -> Check:
    names = decode_clock_events(reader.clock_event_mask(), reader.nvml)
    slowed = [r for r in names if r in SLOWDOWN_REASONS]
    if slowed:
        return Check(
            name="clock events",
            status=FAIL,
            detail=f"the clocks are slowed while the GPU is idle ({', '.join(slowed)})",
            fix="check cooling and power: nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER (thermal: airflow and fans; "
            "power brake: the power supply and its cables)",
        )
    return Check(name="clock events", status=OK, detail=f"no slowdown ({', '.join(names) or 'no reason'} active)")


def _processes(n: Any, h: Any) -> list[Any]:
    procs = list(n.nvmlDeviceGetComputeRunningProcesses(h))
    try:
        procs += n.nvmlDeviceGetGraphicsRunningProcesses(h)  # a display server takes GPU time too
    except n.NVMLError_NotSupported:
        pass
    return procs


def _process_name(n: Any, pid: int) -> str:
    try:
        return os.path.basename(str(n.nvmlSystemGetProcessName(pid))) or "?"
    except n.NVMLError:  # gone, or another PID namespace
        return "?"


def processes(n: Any, h: Any, own_pid: int) -> Check:
    others: dict[int, Any] = {}
    for p in _processes(n, h):
        if p.pid != own_pid:
            others.setdefault(p.pid, p)
    if not others:
        return Check(name="processes", status=OK, detail="no other process on the GPU")
    listed = ", ".join(
        f"pid {pid} {_process_name(n, pid)}"
        + (f" ({p.usedGpuMemory / MIB:.0f} MiB)" if p.usedGpuMemory is not None else "")
        for pid, p in sorted(others.items())
    )
    return Check(
        name="processes",
        status=FAIL,
        detail=f"{len(others)} other process(es) on the GPU: {listed}",
        fix="stop them, or keep them off this runner's GPU (one runner per GPU, CUDA_VISIBLE_DEVICES); "
        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv lists them",
    )


def ecc(n: Any, h: Any) -> Check:
    current, pending = n.nvmlDeviceGetEccMode(h)
    problems = []
    if current != pending:
        problems.append("an ECC mode change waits for a reboot")
    if current == n.NVML_FEATURE_ENABLED:
        uncorrected = n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
        if uncorrected:
            problems.append(f"{uncorrected} uncorrected ECC error(s) since the driver loaded")
        try:  # page retirement: GPUs before Ampere
            if n.nvmlDeviceGetRetiredPagesPendingStatus(h) == n.NVML_FEATURE_ENABLED:
                problems.append("retired memory pages wait for a GPU reset")
        except n.NVMLError_NotSupported:
            pass
        try:  # row remapping: Ampere and newer
            _, _, remap_pending, remap_failed = n.nvmlDeviceGetRemappedRows(h)
            if remap_pending:
                problems.append("remapped memory rows wait for a GPU reset")
            if remap_failed:
                problems.append("a memory row could not be remapped")
        except n.NVMLError_NotSupported:
            pass
    if problems:
        return Check(
            name="ecc",
            status=FAIL,
            detail="; ".join(problems),
            fix="drain the runner, then reset the GPU (sudo nvidia-smi -r) or reboot; nvidia-smi -q -d "
            "ECC,PAGE_RETIREMENT,ROW_REMAPPER shows the counts; errors that come back, or a failed remap, mean "
            "the GPU needs replacing",
        )
    state = "on" if current == n.NVML_FEATURE_ENABLED else "off"
    return Check(name="ecc", status=OK, detail=f"ECC {state}, no uncorrected error or pending repair")


def memory(n: Any, h: Any, min_free_share: float) -> Check:
    mem = n.nvmlDeviceGetMemoryInfo(h)  # bytes
    free_mib, total_mib = mem.free / MIB, mem.total / MIB
    detail = f"{free_mib:.0f} of {total_mib:.0f} MiB free ({mem.free / mem.total:.0%})"
    if mem.free < min_free_share * mem.total:
        return Check(
            name="memory",
            status=FAIL,
            detail=f"{detail}, less than {min_free_share:.0%}: large cases would not fit, or would measure another "
            "workload's memory traffic",
            fix="find the holder (processes check, nvidia-smi); an idle GPU that keeps memory after a crash: "
            "sudo nvidia-smi -r",
        )
    return Check(name="memory", status=OK, detail=detail)


def _guarded(n: Any, name: str, read: Any) -> Check:
    """A check, or what NVML said instead: not supported (n/a) or another refusal (unknown)."""
    try:
        return read()
    except n.NVMLError_NotSupported:
        return Check(name=name, status=NA, detail="not supported on this GPU")
    except n.NVMLError as exc:
        return Check(name=name, status=UNKNOWN, detail=f"NVML could not read it: {exc}")


def run_checks(
    reader: NvmlReader, *, min_free_share: float = 0.9, clock_ratio_min: float = 0.75, own_pid: int | None = None
) -> list[Check]:
    n, h = reader.nvml, reader.handle
    pid = os.getpid() if own_pid is None else own_pid
    return [
        _guarded(n, "persistence", lambda: persistence(n, h)),
        _guarded(n, "clocks", lambda: clocks(n, h, clock_ratio_min)),
        _guarded(n, "clock events", lambda: clock_events(reader)),
        _guarded(n, "processes", lambda: processes(n, h, pid)),
        _guarded(n, "ecc", lambda: ecc(n, h)),
        _guarded(n, "memory", lambda: memory(n, h, min_free_share)),
    ]


def check_device(
    device: str, *, nvml: Any = None, min_free_share: float = 0.9, clock_ratio_min: float = 0.75
) -> Health:
    """The health of `device` ('cuda:N'); a CPU has nothing to check. `nvml`: a stand-in module."""
    import torch

    d = torch.device(device)
    if d.type != "cuda":
        return Health(device=device)
    reader, why = open_nvml(d.index or 0, nvml)
    if reader is None:
        fix = "install the NVIDIA driver (nvidia-smi must work) and nvidia-ml-py (a perfgate dependency)"
        return Health(device=device, checks=[Check(name="nvml", status=FAIL, detail=str(why), fix=fix)])
    try:
        checks = run_checks(reader, min_free_share=min_free_share, clock_ratio_min=clock_ratio_min)
        return Health(device=device, gpu=reader.name, nvml_index=reader.index, checks=checks)
    finally:
        reader.close()
