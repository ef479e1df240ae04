"""Energy per step from the hardware's cumulative energy counters, or why there is none.

- NVIDIA GPUs: NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules
  since the driver loaded, Volta and later). Sampled power (`nvmlDeviceGetPowerUsage`) averages
  only part of the runtime on A100 / H100, so the counter is the honest source; it updates every
  20-100 ms, so it is read as a difference over a window of at least `min_window_s` (1 s), the step
  repeated until the window is full.
- CPUs: the RAPL package counters (`/sys/class/powercap/intel-rapl:N/energy_uj`, microjoules,
  wrapping at `max_energy_range_uj`; AMD's are exposed there too), where readable (root only since
  Linux 5.10; absent in most VMs, this project's development VM included). They count the whole
  package, other processes too: on a shared machine read them with that in mind.

Where no counter can be read the metric is skipped with its reason (`energy_skipped`): never a
zero, which a reader would take for a measurement.

The window is aligned on the counter's own updates: after a warm, synchronised step it waits for
the counter to tick, then runs steps (each synchronised) until the window is full and the counter
has ticked again. The energy between the two ticks covers every step but the last, which the tick
fell into; counting it as a whole step bounds the error by one step over the steps in the window,
so the window is also at least `min_steps` (20) steps long: at most 5%, recorded as
`error_bound_pct`.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfgate.record import EnergyWindow

RAPL_ROOT = "/sys/class/powercap"
_TICK_WAIT_S = 0.5  # the counter updates every 20-100 ms: no tick in half a second means it is stuck


class EnergyUnavailable(Exception):
    """No energy figure for this case; the message is the reason shown in `energy_skipped`."""


class NvmlEnergyCounter:
    """NVML's total-energy counter of one GPU, in joules."""

    source = "nvml"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle

    def read_j(self) -> float:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1e3

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


class RaplCounter:
    """The sum of the RAPL package domains' counters, in joules, unwrapped per domain."""

    source = "rapl"

    def __init__(self, domains: list[Path]) -> None:
        self.domains = domains
        self.ranges = [int((d / "max_energy_range_uj").read_text()) for d in domains]
        self.last = [self._uj(d) for d in domains]
        self.total_uj = 0

    @staticmethod
    def _uj(domain: Path) -> int:
        return int((domain / "energy_uj").read_text())

    def read_j(self) -> float:
        for i, d in enumerate(self.domains):
            now = self._uj(d)
            self.total_uj += (now - self.last[i]) % (self.ranges[i] + 1)  # a wrap restarts at 0
            self.last[i] = now
        return self.total_uj / 1e6

    def close(self) -> None:
        pass


def open_nvml_counter(cuda_index: int = 0, nvml: Any = None) -> NvmlEnergyCounter:
    """The GPU's energy counter, read once to check it works; EnergyUnavailable says why not."""
    from perfgate.measure.nvml import NvmlUnavailable, open_device

    try:
        dev = open_device(cuda_index, nvml)
    except NvmlUnavailable as exc:
        if exc.stage == "import":
            raise EnergyUnavailable(str(exc.error)) from None
        if exc.stage == "init":
            raise EnergyUnavailable(
                f"NVML unavailable ({exc.error}): no NVIDIA driver to read the energy counter"
            ) from None
        raise EnergyUnavailable(f"NVML energy counter unreadable: {exc.error}") from None
    nvml = dev.nvml
    try:
        counter = NvmlEnergyCounter(nvml, dev.handle)
        counter.read_j()
    except nvml.NVMLError as exc:
        dev.shutdown()
        if isinstance(exc, getattr(nvml, "NVMLError_NotSupported", ())):
            raise EnergyUnavailable(
                "this GPU has no total-energy counter (NVML: Not Supported; Volta and later have one)"
            ) from None
        raise EnergyUnavailable(f"NVML energy counter unreadable: {exc}") from None
    return counter


def open_rapl_counter(root: str | os.PathLike[str] = RAPL_ROOT) -> RaplCounter:
    """The CPU packages' RAPL counters (top-level intel-rapl:N domains, not their sub-domains)."""
    domains = sorted(Path(p) for p in glob.glob(os.path.join(root, "intel-rapl:*")) if p.count(":") == 1)
    if not domains:
        raise EnergyUnavailable(f"no RAPL energy counter on this CPU ({root}/intel-rapl:* absent, as in most VMs)")
    try:
        return RaplCounter(domains)
    except (OSError, ValueError) as exc:
        raise EnergyUnavailable(f"RAPL energy counter unreadable ({exc}; root only since Linux 5.10)") from None


def _wait_tick(counter: Any, start_j: float, clock: Callable[[], float], idle: Callable[[], None]) -> float:
    t0 = clock()
    while (now := counter.read_j()) == start_j:
        if clock() - t0 > _TICK_WAIT_S:
            raise EnergyUnavailable(f"the {counter.source} energy counter did not advance in {_TICK_WAIT_S:g} s")
        idle()
    return now


def measure_window(
    step: Callable[[], Any],
    counter: Any,
    *,
    sync: Callable[[], None] = lambda: None,
    min_window_s: float = 1.0,
    min_steps: int = 20,
    clock: Callable[[], float] = time.perf_counter,
    idle: Callable[[], None] = lambda: time.sleep(0.001),
) -> EnergyWindow:
    """Energy of `step` over an aligned window of at least `min_window_s` and `min_steps` steps."""
    step()
    sync()
    e0 = _wait_tick(counter, counter.read_j(), clock, idle)
    t0 = last_tick_t = clock()
    steps, last = 0, e0
    while True:
        step()
        sync()
        steps += 1
        now, t = counter.read_j(), clock()
        if now != last:
            if t - t0 >= min_window_s and steps >= min_steps:
                break
            last, last_tick_t = now, t
        elif t - last_tick_t > _TICK_WAIT_S:
            raise EnergyUnavailable(f"the {counter.source} energy counter stopped advancing")
    if now < e0:
        raise EnergyUnavailable(f"the {counter.source} energy counter went backwards (driver reloaded?)")
    return EnergyWindow(
        source=counter.source, joules=now - e0, window_s=clock() - t0, steps=steps, error_bound_pct=100.0 / steps
    )


def energy_fields(window: EnergyWindow, items_per_step: dict[str, float]) -> dict[str, Any]:
    """The record's energy figures: joules per step, per frame and frames per joule (when the
    model counts frames), and the window they come from."""
    out: dict[str, Any] = {"energy_j_per_step": window.j_per_step, "energy": window}
    frames = items_per_step.get("frames")
    if frames:
        out["energy_j_per_frame"] = window.j_per_step / frames
        out["frames_per_j"] = frames / window.j_per_step
    return out


def case_energy(
    step: Callable[[], Any],
    device: Any,
    items_per_step: dict[str, float],
    *,
    min_window_s: float = 1.0,
    nvml: Any = None,
    rapl_root: str | os.PathLike[str] = RAPL_ROOT,
    **window: Any,
) -> dict[str, Any]:
    """The record's energy fields for a case on `device` (a torch.device), or `energy_skipped`
    with the reason; run after the timed rounds, so timing never shares a round with it.
    `window`: measure_window's keywords (a test's simulated clock and synchronisation)."""
    import torch

    try:
        if device.type == "cuda":
            counter: Any = open_nvml_counter(device.index or 0, nvml)
        else:
            counter = open_rapl_counter(rapl_root)
    except EnergyUnavailable as exc:
        return {"energy_skipped": str(exc)}
    if device.type == "cuda":
        window.setdefault("sync", lambda: torch.cuda.synchronize(device))
    try:
        measured = measure_window(step, counter, min_window_s=min_window_s, **window)
    except EnergyUnavailable as exc:
        return {"energy_skipped": str(exc)}
    finally:
        counter.close()
    return energy_fields(measured, items_per_step)
