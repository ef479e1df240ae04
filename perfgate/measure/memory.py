"""Peak memory of a measured region, per device.

CUDA: the caching allocator's own peak statistics after a reset (allocated and reserved).
CPU: the process's high-water mark (VmHWM) after resetting it through /proc/self/clear_refs;
where that is not possible (not Linux, a kernel that refuses the write) an RSS sampler thread
stands in. The CPU build of torch returns 0 from torch.cuda.max_memory_allocated() silently,
so CUDA figures are only ever read on a CUDA device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

MIB = 1024 * 1024
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True, kw_only=True)
class PeakMemory:
    """Peak memory of a region, MiB. `method` says how it was obtained."""

    peak_mem_mib: float  # allocated (CUDA) or RSS high-water delta (CPU)
    reserved_mem_mib: float | None  # CUDA caching allocator reserve; None on the CPU
    method: str  # "cuda_allocator", "vmhwm", "rss_sampler"
    entry_mem_mib: float | None = None  # CUDA: allocated on entry (the peaks above include it); None on the CPU
    entry_reserved_mib: float | None = None  # CUDA: reserved on entry

    def gated(self, graphs: bool) -> float | None:
        """The figure the memory gate judges. A CUDA graph's pool is reserved at capture and not
        allocated during replay: the reserved peak is the honest figure for graph variants."""
        return self.reserved_mem_mib if graphs else self.peak_mem_mib

    def alone(self, resident: Resident) -> PeakMemory:
        """This region's peak as a process holding only `resident`'s code would read it, in a process
        holding more (perfgate ab's interleaved worker builds both revisions' models): on CUDA what that
        code keeps resident plus the region's peak over what was allocated (reserved) on entry, which
        is what the absolute peak of a process of its own is made of. The CPU figure is kept: the
        growth of the RSS high-water mark during the region, which never held the weights built
        before it, so the other side's are not in it either (nor the side's own, unlike on CUDA)."""
        if self.entry_mem_mib is None or self.entry_reserved_mib is None or self.reserved_mem_mib is None:
            return self
        return replace(
            self,
            peak_mem_mib=resident.allocated_mib + self.peak_mem_mib - self.entry_mem_mib,
            reserved_mem_mib=resident.reserved_mib + self.reserved_mem_mib - self.entry_reserved_mib,
            method=f"{self.method} (resident + peak over entry)",
        )


@dataclass(kw_only=True)
class Resident:
    """What the code run inside `adding()` left allocated and reserved on a CUDA device, MiB: one
    side's share of a process that holds two (its build, its first calls). Zero off CUDA."""

    device: torch.device
    allocated_mib: float = 0.0
    reserved_mib: float = 0.0

    @contextmanager
    def adding(self) -> Iterator[None]:
        if self.device.type != "cuda":
            yield
            return
        alloc, res = torch.cuda.memory_allocated(self.device), torch.cuda.memory_reserved(self.device)
        yield
        self.allocated_mib += (torch.cuda.memory_allocated(self.device) - alloc) / MIB
        self.reserved_mib += (torch.cuda.memory_reserved(self.device) - res) / MIB


def _read_status_kib(field: str, status: str | None = None) -> int:
    text = status if status is not None else _STATUS.read_text()
    m = re.search(rf"^{field}:\s+(\d+)\s+kB", text, re.MULTILINE)
    if not m:
        raise OSError(f"{field} not found in /proc/self/status")
    return int(m.group(1))


def release_free_heap() -> None:
    """Hand memory the allocator keeps after free() back to the OS (glibc's malloc_trim).

    Without it the RSS stays at the warm-up's peak and the timed steps re-use those pages, so the
    high-water mark would not move and every CPU case would report a peak of ~0 MiB.
    """
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the sampler/HWM figures include retained pages
        pass


def reset_hwm() -> bool:
    """Reset the process's RSS high-water mark to the current RSS; False where unsupported."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


class _RssSampler:
    """Fallback peak tracker: psutil RSS every `interval_s` on a daemon thread."""

    def __init__(self, interval_s: float = 0.005) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.start_rss = self._proc.memory_info().rss
        self.peak_rss = self.start_rss
        self._thread = threading.Thread(target=self._run, daemon=True, name="perfgate-rss")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.peak_rss = max(self.peak_rss, self._proc.memory_info().rss)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak_rss = max(self.peak_rss, self._proc.memory_info().rss)
        return (self.peak_rss - self.start_rss) / MIB


class MemoryTracker:
    """Context manager measuring the peak memory of the code inside it on `device`."""

    def __init__(self, device: torch.device | str, *, force_sampler: bool = False) -> None:
        self.device = torch.device(device)
        self._force_sampler = force_sampler
        self.result: PeakMemory | None = None

    def __enter__(self) -> MemoryTracker:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._entry = (torch.cuda.memory_allocated(self.device), torch.cuda.memory_reserved(self.device))
            self._sampler = None
        else:
            gc.collect()
            release_free_heap()
            if not self._force_sampler and reset_hwm():
                self._base_kib = _read_status_kib("VmRSS")
                self._sampler = None
            else:
                self._sampler = _RssSampler()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            # Absolute peaks: weights and caches count, as in the seeds' "2291 MB" figures.
            self.result = PeakMemory(
                peak_mem_mib=torch.cuda.max_memory_allocated(self.device) / MIB,
                reserved_mem_mib=torch.cuda.max_memory_reserved(self.device) / MIB,
                method="cuda_allocator",
                entry_mem_mib=self._entry[0] / MIB,
                entry_reserved_mib=self._entry[1] / MIB,
            )
        elif self._sampler is None:
            peak_kib = _read_status_kib("VmHWM") - self._base_kib
            self.result = PeakMemory(peak_mem_mib=max(peak_kib, 0) / 1024, reserved_mem_mib=None, method="vmhwm")
        else:
            self.result = PeakMemory(
                peak_mem_mib=max(self._sampler.stop(), 0.0), reserved_mem_mib=None, method="rss_sampler"
            )
