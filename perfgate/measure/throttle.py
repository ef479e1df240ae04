"""Throttle-free samples on a GPU: the SM clock and clock-event reasons read after every timed
round, throttled rounds dropped, as nvbench does.

After each round's end event has synchronised (outside the timed region: the CUDA events have
already fixed the sample) `ClockProbe.throttled` reads, through NVML, the SM clock
(`nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)`) and the current clock-event reasons
(`nvmlDeviceGetCurrentClocksEventReasons`, the non-deprecated name in nvidia-ml-py 13; the old
`...ThrottleReasons` is the fallback for drivers before it). A round is throttled when the clock is
below `clock_ratio_min` (75%, nvbench's `--throttle-threshold` default) of the GPU's maximum SM
clock (nvbench compares with the default clock; NVML's default-clock query is deprecated, and the
maximum is what perfgate's telemetry rule uses too), or when a thermal / hardware slowdown reason
is set (the power cap alone is normal under load and counts only through the clock). Such a
sample is dropped, and the next round waits `recovery_delay_s` (50 ms, nvbench's
`--throttle-recovery-delay` default) for the clocks to come back.

The record says how many rounds were dropped and why (`throttle`); the case is unreliable only
when fewer than the stop rule's minimum rounds remain. The cost of the two NVML calls per round
is not measured here (no GPU on the development machine); it is paid between rounds, never
inside a timed one. NVML reports the clock at the moment of the read, just after the round, not
an average over it: a dip that recovered within a round goes unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfgate.measure.telemetry import SLOWDOWN_REASONS, decode_clock_events
from perfgate.record import ThrottledRounds


@dataclass(frozen=True, kw_only=True)
class ThrottleRule:
    clock_ratio_min: float = 0.75  # of the maximum SM clock (nvbench --throttle-threshold 75)
    recovery_delay_s: float = 0.05  # pause after a throttled round (nvbench --throttle-recovery-delay)


class ClockProbe:
    """One GPU's SM clock and clock-event reasons through NVML (its own nvmlInit)."""

    def __init__(self, nvml: Any, handle: Any, rule: ThrottleRule = ThrottleRule()) -> None:
        self.nvml, self.handle, self.rule = nvml, handle, rule
        self.max_sm_clock_mhz = float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))

    def _reasons(self) -> int:
        n = self.nvml
        try:
            return int(n.nvmlDeviceGetCurrentClocksEventReasons(self.handle))
        except (getattr(n, "NVMLError_FunctionNotFound", n.NVMLError), AttributeError):  # drivers before the name
            return int(n.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle))

    def throttled(self) -> list[str]:
        """Why the GPU is throttled now (empty when it is not)."""
        n = self.nvml
        clock = float(n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM))
        out = [r for r in decode_clock_events(self._reasons(), n) if r in SLOWDOWN_REASONS]
        if self.max_sm_clock_mhz and clock < self.rule.clock_ratio_min * self.max_sm_clock_mhz:
            out.append(f"sm_clock_below_{self.rule.clock_ratio_min:.0%}")
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_probe(cuda_index: int = 0, nvml: Any = None, rule: ThrottleRule = ThrottleRule()) -> tuple[Any, str | None]:
    """(probe, None), or (None, why no sample can be checked): no NVML, or a GPU that does not
    report its clocks (NVMLError_NotSupported, as on some virtual GPUs)."""
    from perfgate.measure.nvml import NvmlUnavailable, open_device

    try:
        dev = open_device(cuda_index, nvml)
    except NvmlUnavailable as exc:
        if exc.stage == "import":
            return None, str(exc.error)
        if exc.stage == "init":
            return None, f"NVML unavailable ({exc.error})"
        return None, f"the GPU's clocks cannot be read ({exc.error})"
    try:
        probe = ClockProbe(dev.nvml, dev.handle, rule)
        probe.throttled()
    except dev.nvml.NVMLError as exc:
        dev.shutdown()
        return None, f"the GPU's clocks cannot be read ({exc})"
    return probe, None


def throttle_block(
    dropped: dict[str, int], n_dropped: int, kept: int, min_rounds: int, rule: ThrottleRule
) -> ThrottledRounds:
    """What the record keeps (`throttle`): rounds dropped, why, how many remain, and whether too few do."""
    return ThrottledRounds(
        dropped=n_dropped,
        kept=kept,
        reasons=dict(dropped),
        too_few=kept < min_rounds,
        clock_ratio_min=rule.clock_ratio_min,
        recovery_delay_s=rule.recovery_delay_s,
    )
