"""The one NVML opener (perfgate/measure/nvml.py) on the stand-in pynvml: which stage fails, and
every nvmlInit it made is shut down again when it cannot hand out a device."""

from __future__ import annotations

import pynvml
import pytest

from perfgate.measure import energy, telemetry, throttle
from perfgate.measure.nvml import NvmlUnavailable, open_device
from tests.fake_nvml_sim import FakeNvml, SimClock, nvml_error


class NoHandle(FakeNvml):
    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)


def test_a_device_is_opened_and_shut_down_once() -> None:
    nvml = FakeNvml(SimClock())
    dev = open_device(1, nvml)
    assert (dev.handle, dev.index, nvml.inits) == ("gpu1", 1, 1)
    dev.shutdown()
    assert nvml.inits == 0
    dev.shutdown()  # a second shutdown's NVML error is swallowed: nothing more to release


@pytest.mark.parametrize(
    ("nvml", "stage"),
    [
        (FakeNvml(SimClock(), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "init"),
        (NoHandle(SimClock()), "handle"),
    ],
    ids=["no-driver", "no-device"],
)
def test_a_failure_names_its_stage_and_leaves_no_session_open(nvml: FakeNvml, stage: str) -> None:
    with pytest.raises(NvmlUnavailable) as info:
        open_device(0, nvml)
    assert info.value.stage == stage and isinstance(info.value.error, pynvml.NVMLError)
    assert nvml.inits == 0


def test_the_three_users_word_a_missing_device_their_own_way() -> None:
    reader, why = telemetry.open_nvml(0, NoHandle(SimClock()))
    assert reader is None and why.startswith("NVML has no device for cuda:0")
    probe, why = throttle.open_probe(0, NoHandle(SimClock()))
    assert probe is None and why.startswith("the GPU's clocks cannot be read")
    with pytest.raises(energy.EnergyUnavailable, match="NVML energy counter unreadable"):
        energy.open_nvml_counter(0, NoHandle(SimClock()))
