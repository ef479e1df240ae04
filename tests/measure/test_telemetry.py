"""The telemetry sampler: NVML logic with a stand-in module (no GPU here), the NVML-absent path,
the CPU side, and the reliability verdict."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfgate.gate.decide import telemetry_reason as unreliable_reason
from perfgate.measure import telemetry
from perfgate.measure.telemetry import TelemetrySampler, decode_clock_events
from perfgate.record import MinMeanMax, Telemetry

MIB = 1024 * 1024


class FakeNvml:
    """A stand-in for pynvml: the names perfgate calls, scripted values, call counts."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSwThermalSlowdown = 0x20

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's name
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801
        pass

    def __init__(
        self,
        *,
        util: list[int] | None = None,
        masks: list[int] | None = None,
        clocks: list[int] | None = None,
        init_error: Exception | None = None,
        no_temperature_v: bool = False,
        no_power: bool = False,
    ) -> None:
        self.util = util or [50]
        self.masks = masks or [0]
        self.clocks = clocks or [1500]
        self.init_error = init_error
        self.no_temperature_v = no_temperature_v
        self.no_power = no_power
        self.i = -1
        self.calls: dict[str, int] = {}
        self.index_asked: int | None = None

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self._count("init")

    def nvmlShutdown(self) -> None:
        self._count("shutdown")

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        self.index_asked = i
        return f"gpu{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"Fake GPU"

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return 2000

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        self.i += 1  # one utilisation read per sample: it advances the script
        return SimpleNamespace(gpu=self.util[self.i % len(self.util)], memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(used=1024 * MIB, total=80 * 1024 * MIB)

    def nvmlDeviceGetTemperatureV(self, h: str, sensor: int) -> int:
        self._count("temperature_v")
        if self.no_temperature_v:
            raise self.NVMLError("Function Not Found")
        return 70

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        self._count("temperature")
        return 71

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        self._count("power")
        if self.no_power:
            raise self.NVMLError_NotSupported("Not Supported")
        return 250_000  # mW

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return self.clocks[self.i % len(self.clocks)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return self.masks[self.i % len(self.masks)]

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        return []


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_NOTICES_GIVEN", set())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_stand_in_nvml_is_sampled_and_summarised() -> None:
    nvml = FakeNvml(util=[20, 60, 100], masks=[0, 0x4, 0x4], clocks=[1800, 1700, 1600])
    s = TelemetrySampler("cuda", nvml=nvml)
    for _ in range(3):
        s.sample()
    out = s.summary().to_json()  # as the record's JSON holds it
    assert out["source"] == "nvml+psutil" and out["gpu_unavailable"] is None
    m = out["metrics"]
    assert m["gpu_util_pct"] == {"min": 20.0, "mean": 60.0, "max": 100.0}
    assert m["gpu_power_w"]["mean"] == 250.0  # mW -> W
    assert m["gpu_mem_used_mib"]["max"] == 1024.0
    assert m["gpu_temp_c"]["mean"] == 70.0
    assert m["sm_clock_mhz"] == {"min": 1600.0, "mean": 1700.0, "max": 1800.0}
    assert out["clock_events"] == {"sw_power_cap": pytest.approx(2 / 3)}
    assert out["gpu"]["name"] == "Fake GPU" and out["gpu"]["max_sm_clock_mhz"] == 2000.0
    assert "rss_mib" in m and m["rss_mib"]["min"] > 0
    assert s.timeline()[0]["gpu_util_pct"] == 20


def test_each_sampler_releases_its_nvml_init() -> None:
    nvml = FakeNvml()
    with TelemetrySampler("cuda", nvml=nvml, interval_s=0.01):
        pass
    assert nvml.calls["init"] == nvml.calls["shutdown"] == 1


def test_cuda_visible_devices_maps_to_the_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    nvml = FakeNvml()
    TelemetrySampler("cuda:1", nvml=nvml)
    assert nvml.index_asked == 1
    nvml = FakeNvml()
    TelemetrySampler("cuda:0", nvml=nvml)
    assert nvml.index_asked == 3


def test_old_driver_temperature_falls_back_and_unsupported_fields_are_dropped_once() -> None:
    nvml = FakeNvml(no_temperature_v=True, no_power=True)
    s = TelemetrySampler("cuda", nvml=nvml)
    for _ in range(4):
        s.sample()
    out = s.summary().to_json()  # as the record's JSON holds it
    assert out["metrics"]["gpu_temp_c"]["mean"] == 71.0  # the deprecated call stood in
    assert "gpu_power_w" not in out["metrics"]
    assert nvml.calls["power"] == 1  # not retried every sample
    assert "power" in out["gpu"]["unsupported"]


def test_without_nvml_it_samples_the_cpu_only_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(init_error=FakeNvml.NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    with caplog.at_level(logging.WARNING, logger="perfgate.measure.telemetry"):
        a = TelemetrySampler("cuda", nvml=nvml)
        b = TelemetrySampler("cuda", nvml=nvml)
    a.sample()
    out = a.summary().to_json()
    assert out["source"] == "psutil" and out["gpu"] is None
    assert "no NVIDIA driver" in out["gpu_unavailable"]
    assert "gpu_util_pct" not in out["metrics"] and "rss_mib" in out["metrics"]
    assert b.gpu is None
    notices = [r for r in caplog.records if "sampling the CPU only" in r.getMessage()]
    assert len(notices) == 1


def test_the_real_nvml_module_without_a_driver_takes_the_cpu_path() -> None:
    reader, reason = telemetry.open_nvml(0)
    if reader is not None:
        pytest.skip("NVML works on this machine")
    s = TelemetrySampler("cuda")
    assert s.gpu is None and s.gpu_unavailable == reason
    assert "NVML" in reason or "nvidia-ml-py" in reason


def test_a_cpu_device_never_asks_nvml() -> None:
    nvml = FakeNvml(init_error=AssertionError("NVML must not be touched for a CPU run"))
    s = TelemetrySampler("cpu", nvml=nvml)
    s.sample()
    assert "gpu" not in s.summary().to_json() and s.summary().source == "psutil"


def test_background_thread_samples_until_stopped() -> None:
    with TelemetrySampler("cpu", interval_s=0.01) as s:
        deadline = time.monotonic() + 10
        while len(s.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    n = len(s.samples)
    assert n >= 4  # three ticks plus the tail sample at stop
    time.sleep(0.05)
    assert len(s.samples) == n  # stopped means stopped
    assert s.summary().n_samples == n


def test_thinning_the_timeline_keeps_summaries_exact() -> None:
    nvml = FakeNvml(util=[5, 1, 9, 3, 7, 2, 8, 4, 6, 0])
    s = TelemetrySampler("cuda", nvml=nvml, max_samples=4)
    for _ in range(10):
        s.sample()
    assert len(s.samples) <= 4
    assert s.summary().metric("gpu_util_pct") == MinMeanMax(min=0.0, mean=4.5, max=9.0)
    assert s.summary().n_samples == 10


def test_clock_event_masks_decode() -> None:
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x1 | 0x20) == ["gpu_idle", "sw_thermal_slowdown"]
    assert decode_clock_events(0x4 | 0x8 | 0x40 | 0x80) == [
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ]


def _summary(**kw: Any) -> Telemetry:
    """A summary as a file holds it (busy_sm_clock_mhz: its min / mean / max)."""
    return Telemetry.from_json({"metrics": {}, "gpu": {"max_sm_clock_mhz": 2000.0}, **kw})


def _clock(mean: float) -> dict[str, float]:
    return {"min": mean - 100.0, "mean": mean, "max": mean + 100.0}


def test_thermal_slowdown_makes_the_case_unreliable_power_cap_alone_does_not() -> None:
    assert unreliable_reason(_summary(clock_events={"sw_power_cap": 1.0}, busy_sm_clock_mhz=_clock(1900.0))) is None
    msg = unreliable_reason(_summary(clock_events={"hw_thermal_slowdown": 0.5}))
    assert msg and "hw_thermal_slowdown in 50% of samples" in msg
    assert unreliable_reason(_summary(clock_events={"hw_slowdown": 0.04})) is None  # below 5%


def test_low_busy_clock_and_gpu_neighbours_are_unreliable() -> None:
    msg = unreliable_reason(_summary(busy_sm_clock_mhz=_clock(1000.0)))
    assert msg and "50% of the maximum" in msg
    assert "1 other process" in (unreliable_reason(_summary(gpu_other_processes_max=1)) or "")
    cpu = {"metrics": {"other_cpu_cores": {"min": 0.5, "mean": 0.9, "max": 1.0}}}
    assert (
        unreliable_reason(Telemetry.from_json(cpu)) is None
    )  # CPU contention is the measurement's own figure (gate.unreliable_reason)


def test_samples_from_the_stand_in_feed_the_verdict() -> None:
    nvml = FakeNvml(masks=[0x20, 0x20, 0], clocks=[1200, 1200, 1900])
    s = TelemetrySampler("cuda", nvml=nvml)
    for _ in range(3):
        s.sample()
    msg = unreliable_reason(s.summary())
    assert msg and "sw_thermal_slowdown in 67% of samples" in msg
    assert "of the maximum 2000 MHz" in msg  # busy mean (1200+1200+1900)/3 = 1433 MHz < 75%


# --- busy samples through the real nvidia-ml-py over tests/fake_nvml.py ----------------------------

H100_PROF = Path(__file__).resolve().parents[3] / "shared" / "evidence" / "2026-11-23-h100" / "prof"


def _fake_driver_sampler(monkeypatch: pytest.MonkeyPatch, gpu: Any) -> TelemetrySampler:
    from tests.fake_nvml import install

    install(monkeypatch, gpu)
    return TelemetrySampler("cuda:0")


def test_the_kept_h100_timeline_is_busy_where_nvml_saw_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 14 NVML readings kept in the H100 profile of V-JEPA 2 large (report.json's
    telemetry_timeline), replayed through the fake driver with the run's context open: two readings
    at 0% utilisation are not busy, though NVML set no GpuIdle in any (the record counted 14 of 14);
    the clock-event shares stay what the record has (none)."""
    from tests.fake_nvml import GIB, FakeGpu

    reports = sorted(H100_PROF.glob("*/report.json"))
    if not reports:
        pytest.skip(f"the H100 evidence is not at {H100_PROF}")
    point = json.loads(reports[0].read_text())["points"][0]
    kept, recorded = point["telemetry_timeline"], point["telemetry"]
    assert recorded["busy_samples"] == recorded["n_samples"] == len(kept) == 14 and recorded["clock_events"] == {}
    gpu = FakeGpu(compute=[(os.getpid(), GIB)])
    s = _fake_driver_sampler(monkeypatch, gpu)
    for reading in kept:
        assert reading["clock_event_mask"] == 0
        gpu.util_pct, gpu.sm_mhz = int(reading["gpu_util_pct"]), int(reading["sm_clock_mhz"])
        s.sample()
    s.stop()
    got = s.summary()
    assert [r.gpu_util_pct for r in s.samples] == [r["gpu_util_pct"] for r in kept]
    assert got.busy_samples == sum(r["gpu_util_pct"] > 0 for r in kept) == 12
    assert got.clock_events == recorded["clock_events"] and got.busy_sm_clock_mhz == MinMeanMax(
        min=1980.0, mean=1980.0, max=1980.0
    )


def test_the_fake_driver_reads_idle_without_a_context_and_busy_only_with_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """GpuIdle as the kept runs show it: set before any context (the health checks' gpu_idle), never
    with this process's context open. A reading is busy when NVML saw work and does not call the
    GPU idle: an idle GPU's utilisation left over from its last sample period is not work."""
    from tests.fake_nvml import GIB, FakeGpu

    gpu = FakeGpu(util_pct=40)  # no context: the work just stopped, the clocks drop
    s = _fake_driver_sampler(monkeypatch, gpu)
    assert decode_clock_events(s.sample().clock_event_mask or 0) == ["gpu_idle"]
    gpu.compute = [(os.getpid(), GIB)]
    gpu.util_pct = 0  # our context open, nothing running
    assert s.sample().clock_event_mask == 0
    gpu.util_pct = 97
    s.sample()
    s.stop()
    got = s.summary()
    assert got.busy_samples == 1 and got.clock_events == {"gpu_idle": pytest.approx(1 / 3)}
    assert got.gpu_other_processes_max == 0  # our own context is not another process
