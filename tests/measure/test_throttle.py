"""Throttle-free samples: the per-round clock check through a stand-in NVML with nvidia-ml-py's
semantics (tests/fake_nvml_sim.py), the dropping inside perfgate.measure.core, and the gate's reading of it."""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest

from perfgate import gate
from perfgate.gate.decide import unreliable_reason
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.measure.core import measure
from perfgate.measure.stats import StopRule
from perfgate.measure.throttle import ClockProbe, ThrottleRule, open_probe
from perfgate.record import CaseRecord, MinMeanMax, Telemetry, TelemetryGpu, ThrottledRounds
from tests.fake_nvml_sim import FakeNvml, SimClock

FAST = ThrottleRule(recovery_delay_s=0.0)  # no real pause in tests; the default is nvbench's 50 ms


@pytest.fixture(autouse=True)
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _scripted(values: list[int], default: int):
    calls = iter(values)
    return lambda: next(calls, default)


def _probe(**kw) -> tuple[ClockProbe, FakeNvml]:
    nvml = FakeNvml(SimClock(), **kw)
    probe, why = open_probe(0, nvml, FAST)
    assert why is None
    return probe, nvml


def test_a_slow_clock_or_a_thermal_reason_is_throttled_the_power_cap_alone_is_not():
    probe, _ = _probe(sm_clock_mhz=_scripted([1980, 1400, 1980, 1980], 1980), reasons=_scripted([0, 0, 0x4, 0x40], 0))
    # open_probe read once to check the GPU answers: the script goes on from its second value.
    assert probe.throttled() == ["sm_clock_below_75%"]  # 1400 < 0.75 x 1980
    assert probe.throttled() == []  # sw_power_cap: normal under load
    assert probe.throttled() == ["hw_thermal_slowdown"]


def test_drivers_without_the_clocks_event_name_fall_back_to_the_throttle_reasons_name():
    probe, nvml = _probe(clocks_event_api=False, reasons=pynvml.nvmlClocksEventReasonHwSlowdown)
    assert probe.throttled() == ["hw_slowdown"] and nvml.calls["throttle_reasons"] == 2


def test_a_gpu_that_does_not_report_clocks_is_not_checked_and_says_why():
    nvml = FakeNvml(SimClock(), clock_error=pynvml.NVML_ERROR_NOT_SUPPORTED)
    probe, why = open_probe(0, nvml)
    assert probe is None and why == "the GPU's clocks cannot be read (Not Supported)" and nvml.inits == 0
    probe, why = open_probe(0, FakeNvml(SimClock(), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert probe is None and why == "NVML unavailable (Driver Not Loaded)"


def test_throttled_rounds_are_dropped_and_counted_the_rest_kept():
    # Rounds 3, 4 and 5 of the timed loop run with the clock at 1200 MHz.
    clocks = [1980] + [1980] * 2 + [1200] * 3 + [1980] * 500
    probe, nvml = _probe(sm_clock_mhz=_scripted(clocks, 1980))
    stop = StopRule(min_rounds=12, max_rounds=12, budget_s=60)
    m = measure(lambda: sum(range(200)), "cpu", stop=stop, probe=probe)
    assert len(m.samples_ms) == 12 and m.stop == "max_rounds"
    assert m.throttle == ThrottledRounds(
        dropped=3,
        kept=12,
        reasons={"sm_clock_below_75%": 3},
        too_few=False,
        clock_ratio_min=0.75,
        recovery_delay_s=0.0,
    )
    assert nvml.calls["clock"] == 1 + 15  # one read per round, after its sample
    rec = CaseRecord(device="cuda:0", samples_ms=m.samples_ms, throttle=m.throttle)
    assert unreliable_reason(rec, GateSettings()) is None  # dropped, not a reason to distrust the rest


def test_a_gpu_throttled_throughout_leaves_too_few_rounds_and_the_case_is_unreliable():
    probe, _ = _probe(sm_clock_mhz=900)
    stop = StopRule(min_rounds=5, max_rounds=8, budget_s=60)
    m = measure(lambda: sum(range(200)), "cpu", stop=stop, probe=probe)
    assert m.stop == "throttled" and m.throttle is not None and m.throttle.too_few and m.throttle.kept == 0
    assert len(m.samples_ms) == 8  # every round reported, as none was clean
    rec = CaseRecord(device="cuda:0", samples_ms=m.samples_ms, throttle=m.throttle)
    why = unreliable_reason(rec, GateSettings())
    assert why == (
        "8 of 8 rounds ran throttled (sm_clock_below_75% 8x); only 0 clean rounds remain: timings are not trustworthy"
    )
    rec = replace(rec, unreliable=why)
    verdicts = gate.compare("c", rec, None, Policy())
    assert [v.verdict for v in verdicts] == [gate.UNRELIABLE]


def _rounds(*, dropped: int, kept: int) -> ThrottledRounds:
    return ThrottledRounds(
        dropped=dropped, kept=kept, reasons={}, too_few=False, clock_ratio_min=0.75, recovery_delay_s=0.05
    )


def test_checked_rounds_make_the_samplers_clock_shares_moot_but_not_other_processes():
    telemetry = Telemetry(
        clock_events={"hw_slowdown": 0.5},
        gpu=TelemetryGpu(max_sm_clock_mhz=2000.0),
        busy_sm_clock_mhz=MinMeanMax(min=900.0, mean=1000.0, max=1100.0),
        gpu_other_processes_max=0,
    )
    unchecked = CaseRecord(device="cuda:0", samples_ms=[1.0], telemetry=telemetry)
    assert "GPU clocks were slowed" in unreliable_reason(unchecked, GateSettings())
    checked = CaseRecord(device="cuda:0", samples_ms=[1.0], telemetry=telemetry, throttle=_rounds(dropped=4, kept=30))
    assert unreliable_reason(checked, GateSettings()) is None
    checked = replace(checked, telemetry=replace(telemetry, gpu_other_processes_max=2))
    assert (
        unreliable_reason(checked, GateSettings())
        == "2 other process(es) computed on the GPU: timings are not trustworthy"
    )
