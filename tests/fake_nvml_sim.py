"""A stand-in for nvidia-ml-py's `pynvml` with the real module's semantics where perfgate relies on
them: its constants and error classes are pynvml's own (an `NVMLError(NVML_ERROR_NOT_SUPPORTED)`
is an `NVMLError_NotSupported`, printed "Not Supported"), the energy counter is an integer of
millijoules since the "driver loaded" that advances only at discrete updates (every `update_s`,
as NVML's does every 20-100 ms), clocks are integers of MHz and clock-event reasons an integer
bitmask. Time is a `SimClock` the test advances, so nothing here waits or depends on the machine.

A module-level stand-in, passed to perfgate.measure.energy / perfgate.measure.throttle as their `nvml`: it models the
counter's timing, which tests/fake_nvml.py (a fake libnvidia-ml under the real nvidia-ml-py
wrappers, for `perfgate health`) does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pynvml


class SimClock:
    """Simulated seconds: the fake GPU's time and the code under test's clock."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass, as the real calls raise


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    nvmlClocksEventReasonGpuIdle = pynvml.nvmlClocksEventReasonGpuIdle
    nvmlClocksEventReasonSwPowerCap = pynvml.nvmlClocksEventReasonSwPowerCap
    nvmlClocksEventReasonHwSlowdown = pynvml.nvmlClocksEventReasonHwSlowdown
    nvmlClocksEventReasonSwThermalSlowdown = pynvml.nvmlClocksEventReasonSwThermalSlowdown
    nvmlClocksEventReasonHwThermalSlowdown = pynvml.nvmlClocksEventReasonHwThermalSlowdown

    def __init__(
        self,
        clock: SimClock,
        *,
        power_w: Callable[[float], float] | float = 300.0,
        update_s: float = 0.05,
        energy_error: int | None = None,
        init_error: int | None = None,
        sm_clock_mhz: Callable[[], int] | int = 1980,
        reasons: Callable[[], int] | int = 0,
        max_sm_clock_mhz: int = 1980,
        clocks_event_api: bool = True,
        clock_error: int | None = None,
    ) -> None:
        self.clock = clock
        self.power_w = power_w if callable(power_w) else (lambda t, p=power_w: p)
        self.update_s = update_s
        self.energy_error = energy_error
        self.init_error = init_error
        self.sm_clock = sm_clock_mhz if callable(sm_clock_mhz) else (lambda c=sm_clock_mhz: c)
        self.reasons = reasons if callable(reasons) else (lambda r=reasons: r)
        self.max_sm_clock_mhz = max_sm_clock_mhz
        self.clocks_event_api = clocks_event_api
        self.clock_error = clock_error
        self.inits = 0
        self.calls: dict[str, int] = {}
        self._energy_mj = 123_456_789.0  # energy since the driver loaded: never starts at zero
        self._integrated_to = 0.0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # -- lifecycle and handles --

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        if self.inits == 0:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self._count("handle")
        return f"gpu{index}"

    # -- energy: integrated power, published at discrete updates --

    def _published_mj(self) -> int:
        last_update = math.floor(self.clock() / self.update_s) * self.update_s
        steps = 1000
        t0, t1 = self._integrated_to, max(last_update, self._integrated_to)
        for i in range(steps):
            a, b = t0 + (t1 - t0) * i / steps, t0 + (t1 - t0) * (i + 1) / steps
            self._energy_mj += self.power_w((a + b) / 2) * (b - a) * 1e3
        self._integrated_to = t1
        return int(self._energy_mj)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        self._count("energy")
        if self.energy_error is not None:
            raise nvml_error(self.energy_error)
        return self._published_mj()

    # -- clocks --

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock_type: int) -> int:
        assert clock_type == pynvml.NVML_CLOCK_SM
        return self.max_sm_clock_mhz

    def nvmlDeviceGetClockInfo(self, handle: str, clock_type: int) -> int:
        assert clock_type == pynvml.NVML_CLOCK_SM
        if self.clock_error is not None:
            raise nvml_error(self.clock_error)
        self._count("clock")
        return int(self.sm_clock())

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        if not self.clocks_event_api:  # a driver older than the name: the symbol is missing
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        self._count("reasons")
        return int(self.reasons())

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        self._count("throttle_reasons")
        return int(self.reasons())
