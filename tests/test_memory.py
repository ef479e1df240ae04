import pytest
import torch

from perfgate.memory import MemoryTracker, _read_status_kib, reset_hwm


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
