import pytest
import torch

from perfgate.measure.memory import MemoryTracker, _read_status_kib, reset_hwm


def _touch(mib: int) -> torch.Tensor:
    t = torch.empty(mib * 1024 * 1024, dtype=torch.uint8)
    t.fill_(1)  # touched pages count in RSS; untouched ones would not
    return t


@pytest.mark.skipif(not reset_hwm(), reason="/proc/self/clear_refs not writable here")
def test_vmhwm_measures_a_known_allocation_within_a_few_percent():
    with MemoryTracker("cpu") as m:
        t = _touch(256)
        del t
    assert m.result.method == "vmhwm"
    assert m.result.peak_mem_mib == pytest.approx(256, rel=0.03)
    assert m.result.reserved_mem_mib is None


def test_rss_sampler_fallback_sees_a_held_allocation():
    import time

    with MemoryTracker("cpu", force_sampler=True) as m:
        t = _touch(128)
        time.sleep(0.05)  # the sampler polls every 5 ms
        del t
    assert m.result.method == "rss_sampler"
    assert m.result.peak_mem_mib == pytest.approx(128, rel=0.1)


def test_status_parsing():
    assert _read_status_kib("VmHWM", "Name:\tpython\nVmHWM:\t  12345 kB\n") == 12345
    with pytest.raises(OSError):
        _read_status_kib("VmHWM", "Name:\tpython\n")


@pytest.mark.skipif(not reset_hwm(), reason="/proc/self/clear_refs not writable here")
def test_memory_freed_before_the_region_is_counted_again_when_reused():
    # Small allocations come from the heap, which glibc keeps after free(): without handing it back
    # the high-water mark would not move when the timed steps re-use those pages.
    def step():
        parts = [torch.ones(64 * 1024) for _ in range(256)]  # 256 x 256 KiB = 64 MiB in heap-sized chunks
        return sum(p.numel() for p in parts)

    step()  # a warm-up leaves the pages with the allocator
    with MemoryTracker("cpu") as m:
        step()
    assert m.result.peak_mem_mib == pytest.approx(64, rel=0.15)
