"""Energy per step: NVML's total-energy counter through a stand-in with nvidia-ml-py's semantics
(tests/fake_nvml_sim.py, simulated time), RAPL through a sysfs tree laid out as the kernel's, the
skipped cases with their reasons (never a zero), and the gate's energy verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pynvml
import pytest
import torch

from perfgate.gate.metrics import judge_energy
from perfgate.gate.settings import GateSettings
from perfgate.measure import energy
from perfgate.measure.energy import EnergyUnavailable, case_energy, energy_fields, measure_window, open_rapl_counter
from perfgate.record import CaseRecord, ThrottledRounds
from tests.fake_nvml_sim import FakeNvml, SimClock


@pytest.fixture(autouse=True)
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _window(step_s: float, *, power_w: float = 300.0, update_s: float = 0.05, **kw):
    clock = SimClock()
    nvml = FakeNvml(clock, power_w=power_w, update_s=update_s)
    nvml.nvmlInit()
    counter = energy.NvmlEnergyCounter(nvml, nvml.nvmlDeviceGetHandleByIndex(0))
    w = measure_window(lambda: clock.advance(step_s), counter, clock=clock, idle=lambda: clock.advance(0.001), **kw)
    return w, clock


@pytest.mark.parametrize("step_s,update_s", [(0.010, 0.05), (0.003, 0.1), (0.037, 0.02), (0.2, 0.1)])
def test_joules_per_step_come_from_counter_ticks_within_the_stated_bound(step_s, update_s):
    w, _ = _window(step_s, update_s=update_s)
    true_j = 300.0 * step_s
    assert w.source == "nvml" and w.window_s >= 1.0 and w.steps >= 20
    assert w.error_bound_pct == pytest.approx(100.0 / w.steps) and w.error_bound_pct <= 5.0
    assert abs(w.j_per_step / true_j - 1) * 100 <= w.error_bound_pct
    assert w.j_per_step > 0


def test_a_long_step_gets_a_window_of_at_least_twenty_steps():
    w, clock = _window(0.25)
    assert w.steps >= 20 and w.window_s >= 20 * 0.25 and clock() >= 5.0


def test_a_counter_that_never_advances_is_a_reason_not_a_zero():
    with pytest.raises(EnergyUnavailable, match="did not advance"):
        _window(0.01, power_w=0.0)
    # It stops advancing part-way (power drops to nothing after 0.3 s): said, not looped on.
    clock = SimClock()
    nvml = FakeNvml(clock, power_w=lambda t: 300.0 if t < 0.3 else 0.0)
    counter = energy.NvmlEnergyCounter(nvml, "gpu0")
    with pytest.raises(EnergyUnavailable, match="stopped advancing"):
        measure_window(lambda: clock.advance(0.01), counter, clock=clock, idle=lambda: clock.advance(0.001))


def test_the_record_gets_joules_per_frame_and_frames_per_joule_from_a_counted_window():
    w, _ = _window(0.010)
    f = energy_fields(w, {"frames": 2.0, "tokens": 64.0})
    assert f["energy_j_per_step"] == w.j_per_step
    assert f["energy_j_per_frame"] == pytest.approx(w.j_per_step / 2)
    assert f["frames_per_j"] == pytest.approx(2 / w.j_per_step)
    assert f["energy"] is w and w.to_json()["steps"] == w.steps  # the record's block, as the file holds it
    assert set(energy_fields(w, {"examples": 4.0})) == {"energy_j_per_step", "energy"}  # no frames, no per-frame
    rec = CaseRecord.from_extra_info({**f, "samples_ms": [1.0]})
    assert rec.frames_per_j == f["frames_per_j"] and not rec.extra  # every key is a record field


def test_case_energy_on_a_gpu_with_the_counter_and_nvml_released_after(monkeypatch):
    clock = SimClock()
    nvml = FakeNvml(clock, power_w=250.0)
    syncs = []
    out = case_energy(
        lambda: clock.advance(0.02),
        torch.device("cuda", 0),
        {"frames": 1.0},
        nvml=nvml,
        clock=clock,
        idle=lambda: clock.advance(0.001),
        sync=lambda: syncs.append(1),
    )
    assert out["energy_j_per_frame"] == pytest.approx(250.0 * 0.02, rel=out["energy"].error_bound_pct / 100)
    assert syncs and nvml.inits == 0  # every step synchronised; nvmlInit balanced by nvmlShutdown


@pytest.mark.parametrize(
    "kw,reason",
    [
        ({"energy_error": pynvml.NVML_ERROR_NOT_SUPPORTED}, "no total-energy counter (NVML: Not Supported"),
        ({"init_error": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}, "NVML unavailable (NVML Shared Library Not Found)"),
        ({"energy_error": pynvml.NVML_ERROR_NO_PERMISSION}, "NVML energy counter unreadable: Insufficient Permissions"),
    ],
)
def test_an_unsupported_gpu_counter_is_skipped_with_its_reason(kw, reason):
    nvml = FakeNvml(SimClock(), **kw)
    out = case_energy(lambda: None, torch.device("cuda", 0), {"frames": 1.0}, nvml=nvml)
    assert list(out) == ["energy_skipped"] and reason in out["energy_skipped"] and nvml.inits == 0


def _rapl(root: Path, domain: str, uj: int, max_uj: int = 262_143_328_850) -> Path:
    d = root / domain
    d.mkdir(parents=True)
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def test_rapl_sums_the_packages_unwraps_each_and_ignores_their_sub_domains(tmp_path):
    p0 = _rapl(tmp_path, "intel-rapl:0", 1_000_000, max_uj=9_999_999)
    p1 = _rapl(tmp_path, "intel-rapl:1", 5_000_000)
    _rapl(tmp_path, "intel-rapl:0:0", 42)  # the core sub-domain is part of package 0: not added again
    counter = open_rapl_counter(tmp_path)
    assert [d.name for d in counter.domains] == ["intel-rapl:0", "intel-rapl:1"]
    assert counter.read_j() == 0.0
    (p0 / "energy_uj").write_text("9000000\n")  # +8 J
    (p1 / "energy_uj").write_text("5500000\n")  # +0.5 J
    assert counter.read_j() == pytest.approx(8.5)
    (p0 / "energy_uj").write_text("500000\n")  # wrapped past 9_999_999: +1_000_000 + 500_000 uJ
    assert counter.read_j() == pytest.approx(8.5 + 1.5)


def test_rapl_absent_or_unreadable_is_a_reason(tmp_path):
    with pytest.raises(EnergyUnavailable, match="no RAPL energy counter on this CPU"):
        open_rapl_counter(tmp_path)
    (tmp_path / "intel-rapl:0").mkdir()  # the domain without its files (as when energy_uj is root-only)
    with pytest.raises(EnergyUnavailable, match="RAPL energy counter unreadable"):
        open_rapl_counter(tmp_path)
    out = case_energy(lambda: None, torch.device("cpu"), {"frames": 1.0}, rapl_root=tmp_path / "none")
    assert list(out) == ["energy_skipped"] and "no RAPL" in out["energy_skipped"]


def test_this_machines_cpu_energy_is_measured_or_skipped_with_a_reason_never_zero():
    out = case_energy(lambda: sum(range(1000)), torch.device("cpu"), {"frames": 1.0}, min_window_s=0.05)
    assert ("energy_skipped" in out) != ("energy_j_per_step" in out)
    assert out.get("energy_j_per_step", 1.0) > 0


def test_cpu_energy_per_step_from_a_rapl_counter_that_advances_with_time(tmp_path):
    # Most VMs (this one included) have no RAPL: the tree is laid out as the kernel's, and the
    # package counter advances as a 50 W package would, so the measured branch runs everywhere.
    pkg = _rapl(tmp_path, "intel-rapl:0", 0)
    clock = SimClock()

    def advance(s: float) -> None:
        clock.advance(s)
        (pkg / "energy_uj").write_text(f"{round(50.0 * clock() * 1e6)}\n")

    out = case_energy(
        lambda: advance(0.01),
        torch.device("cpu"),
        {"frames": 2.0},
        rapl_root=tmp_path,
        clock=clock,
        idle=lambda: advance(0.001),
    )
    assert out["energy"].source == "rapl" and out["energy"].steps >= 20
    assert out["energy_j_per_step"] == pytest.approx(50.0 * 0.01, rel=out["energy"].error_bound_pct / 100)
    assert out["energy_j_per_frame"] == pytest.approx(out["energy_j_per_step"] / 2)


def test_energy_is_gated_by_its_tolerance_like_memory():
    s = GateSettings()
    base = CaseRecord(energy_j_per_step=3.0)
    verdict = lambda j: judge_energy("c", CaseRecord(energy_j_per_step=j), base, s).verdict  # noqa: E731
    assert (verdict(3.2), verdict(3.4), verdict(2.6)) == ("unchanged", "regression", "improvement")
    assert judge_energy("c", CaseRecord(energy_skipped="no counter"), base, s) is None
    assert judge_energy("c", CaseRecord(energy_j_per_step=3.0), CaseRecord(), s) is None


def test_the_report_notes_energy_with_its_bound_a_skip_with_its_reason_and_dropped_rounds():
    from perfgate.output.html import _energy_notes, _throttle_notes

    w, _ = _window(0.010)
    measured = CaseRecord.from_extra_info({**energy_fields(w, {"frames": 2.0}), "samples_ms": [1.0]})
    (note,) = _energy_notes(measured)
    assert note["text"] == f"{measured.frames_per_j:.3g} frames/J (±{w.error_bound_pct:.1f}%)"
    skipped = CaseRecord(energy_skipped="no RAPL energy counter on this CPU")
    assert _energy_notes(skipped) == [{"text": "energy -", "title": skipped.energy_skipped, "badge": "muted"}]
    none_dropped = ThrottledRounds(
        dropped=0, kept=30, reasons={}, too_few=False, clock_ratio_min=0.75, recovery_delay_s=0.05
    )
    assert _energy_notes(CaseRecord()) == [] and _throttle_notes(CaseRecord(throttle=none_dropped)) == []
    three = replace(none_dropped, dropped=3, reasons={"hw_thermal_slowdown": 3})
    (dropped,) = _throttle_notes(CaseRecord(throttle=three))
    assert dropped["text"] == "3 throttled round(s) dropped" and dropped["title"] == "hw_thermal_slowdown 3x"


def test_the_real_nvidia_ml_py_wrappers_over_a_fake_driver_give_the_counter_or_the_reason(monkeypatch):
    # nvidia-ml-py's own wrappers (ctypes out-parameters, return codes to NVMLError subclasses) over
    # tests/fake_nvml.py's stand-in for libnvidia-ml: what perfgate.measure.energy and perfgate.measure.throttle call.
    from perfgate.measure.throttle import open_probe
    from tests.fake_nvml import FakeGpu, install

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # handles by index, as without torch's UUIDs
    lib = install(monkeypatch, FakeGpu(energy_mj=987_654_321, sm_mhz=1200))
    counter = energy.open_nvml_counter(0, pynvml)
    assert counter.read_j() == pytest.approx(987_654.321)
    counter.close()
    probe, why = open_probe(0, pynvml)
    assert why is None and probe.throttled() == ["sm_clock_below_75%"]  # 1200 < 0.75 x 1980 MHz
    probe.close()
    assert lib.inits == lib.shutdowns == 2
    install(monkeypatch, FakeGpu(energy_mj=None))
    out = case_energy(lambda: None, torch.device("cuda", 0), {"frames": 1.0}, nvml=pynvml)
    assert out == {
        "energy_skipped": "this GPU has no total-energy counter (NVML: Not Supported; Volta and later have one)"
    }
