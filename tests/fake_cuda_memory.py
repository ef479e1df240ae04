"""torch.cuda's caching-allocator statistics on the CPU, driven by fake tensors' allocations.

The semantics the memory figures rely on are kept: a `Block` is allocated while it lives;
reserved memory grows in 2 MiB segments when the allocations outgrow it and keeps freed blocks
cached (`empty_cache` hands back the unused ones); a graph's private pool (`pool`) is reserved and
not allocated; the peaks follow both, and `reset_peak_memory_stats` resets them to the current
allocation and reservation. No kernel runs: `synchronize` returns at once."""

from __future__ import annotations

import math

import pytest
import torch

MIB = 2**20
SEGMENT = 2 * MIB


class FakeAllocator:
    def __init__(self) -> None:
        self.allocated = self.peak_allocated = 0
        self.pools = 0  # reserved by graphs' private pools, outside the segments of allocations
        self.segments = self.peak_reserved = 0

    @property
    def reserved(self) -> int:
        return self.segments + self.pools

    def _peaks(self) -> None:
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def malloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        if self.allocated > self.segments:  # the cache cannot hold it: a new segment from the driver
            self.segments = math.ceil(self.allocated / SEGMENT) * SEGMENT
        self._peaks()

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes  # its segment stays reserved, cached

    def pool(self, nbytes: int) -> None:
        self.pools += nbytes
        self._peaks()

    def empty_cache(self) -> None:
        self.segments = math.ceil(self.allocated / SEGMENT) * SEGMENT

    def reset_peak_memory_stats(self, device: object = None) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


class Block:
    """A fake tensor of `mib` MiB on the fake device: allocated from creation until it is freed."""

    def __init__(self, alloc: FakeAllocator, mib: float) -> None:
        self.alloc, self.nbytes = alloc, round(mib * MIB)
        alloc.malloc(self.nbytes)

    def __del__(self) -> None:
        self.alloc.free(self.nbytes)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeAllocator:
    a = FakeAllocator()
    for name, fn in {
        "synchronize": lambda device=None: None,
        "empty_cache": a.empty_cache,
        "reset_peak_memory_stats": a.reset_peak_memory_stats,
        "memory_allocated": lambda device=None: a.allocated,
        "max_memory_allocated": lambda device=None: a.peak_allocated,
        "memory_reserved": lambda device=None: a.reserved,
        "max_memory_reserved": lambda device=None: a.peak_reserved,
    }.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    return a
