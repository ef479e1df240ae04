"""`perfgate health`, the runner check before a gated run: each check against a fake driver under the
real nvidia-ml-py (tests/fake_nvml.py), the command's exit codes and files, and scripts/ci-benchmark
stopping a run on a GPU that failed it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pynvml
import pytest
import torch
from markdown_it import MarkdownIt

from perfgate import cli
from perfgate.measure import health
from perfgate.measure.telemetry import open_nvml
from perfgate.output.health import text_lines
from tests.ci.helpers import SCRIPTS, SMALLEST, run, script_env
from tests.fake_nvml import GIB, FakeGpu, install

ROOT = Path(__file__).resolve().parents[2]


def checks(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu, **kw) -> dict[str, health.Check]:
    install(monkeypatch, gpu)
    reader, why = open_nvml(0)
    assert reader is not None, why
    try:
        return {c.name: c for c in health.run_checks(reader, **kw)}
    finally:
        reader.close()


@pytest.fixture(autouse=True)
def _nvml_index_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_a_healthy_h100_passes_every_check(monkeypatch):
    result = checks(monkeypatch, FakeGpu())
    assert list(result) == ["persistence", "clocks", "clock events", "processes", "ecc", "memory"]
    assert {c.status for c in result.values()} == {health.OK}
    assert result["clocks"].detail == "SM application clock 1980 MHz of the maximum 1980 MHz"
    assert result["clock events"].detail == "no slowdown (gpu_idle active)"
    assert result["memory"].detail == "81408 of 81920 MiB free (99%)"


def test_each_check_fails_with_its_fix(monkeypatch):
    gpu = FakeGpu(
        persistence=pynvml.NVML_FEATURE_DISABLED,
        app_sm_mhz=1000,  # nvidia-smi -ac set far below the maximum
        clock_events=pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        compute=[(os.getpid(), GIB), (4242, 2 * GIB), (4243, None)],
        graphics=[(1999, 64 * 1024**2)],
        process_names={4242: b"/usr/bin/python3", 1999: b"/usr/lib/xorg/Xorg"},
        ecc_uncorrected_volatile=2,
        remapped_rows=(0, 1, 1, 0),
        used_bytes=40 * GIB,
    )
    result = checks(monkeypatch, gpu)
    assert {name: c.status for name, c in result.items()} == dict.fromkeys(result, health.FAIL)
    assert "nvidia-persistenced" in result["persistence"].fix
    assert result["clocks"].detail.startswith("the SM application clock is 1000 MHz, 51% of the maximum 1980 MHz")
    assert "nvidia-smi -rac" in result["clocks"].fix
    assert result["clock events"].detail == "the clocks are slowed while the GPU is idle (hw_thermal_slowdown)"
    # This process is not "another"; a process NVML cannot name or size is still listed.
    assert result["processes"].detail == (
        "3 other process(es) on the GPU: pid 1999 Xorg (64 MiB), pid 4242 python3 (2048 MiB), pid 4243 ?"
    )
    assert result["ecc"].detail == (
        "2 uncorrected ECC error(s) since the driver loaded; remapped memory rows wait for a GPU reset"
    )
    assert "nvidia-smi -r" in result["ecc"].fix
    assert result["memory"].detail.startswith("40960 of 81920 MiB free (50%), less than 90%")
    assert all(c.fix for c in result.values())


def test_thresholds_are_the_callers(monkeypatch):
    gpu = FakeGpu(app_sm_mhz=1400, used_bytes=40 * GIB)
    strict = checks(monkeypatch, gpu)
    assert strict["clocks"].status == strict["memory"].status == health.FAIL
    lenient = checks(monkeypatch, gpu, min_free_share=0.4, clock_ratio_min=0.7)
    assert lenient["clocks"].status == lenient["memory"].status == health.OK


def test_a_default_application_clock_below_the_ratio_is_no_failure_a_lowered_one_is(monkeypatch):
    """A T4's default application clock is 585 of 1590 MHz: its factory setting, which the GPU boosts
    past under load (the run's telemetry watches that); only a clock set below the default fails."""
    t4 = dict(name=b"Tesla T4", max_sm_mhz=1590, default_app_sm_mhz=585)
    assert checks(monkeypatch, FakeGpu(**t4, app_sm_mhz=585))["clocks"].status == health.OK
    lowered = checks(monkeypatch, FakeGpu(**t4, app_sm_mhz=300))["clocks"]
    assert lowered.status == health.FAIL
    assert lowered.detail.startswith(
        "the SM application clock is 300 MHz, 19% of the maximum 1590 MHz (< 75%, default 585 MHz)"
    )


def test_a_consumer_gpu_without_ecc_or_application_clocks_passes(monkeypatch):
    gpu = FakeGpu(
        name=b"NVIDIA GeForce RTX 4090",
        ecc=None,
        app_sm_mhz=None,
        default_app_sm_mhz=None,
        remapped_rows=None,
        graphics=None,
    )
    result = checks(monkeypatch, gpu)
    assert result["ecc"].status == result["clocks"].status == health.NA
    assert result["ecc"].detail == "not supported on this GPU"
    assert result["processes"].status == health.OK  # the graphics list is not supported: compute alone
    assert all(c.status != health.FAIL for c in result.values())


def test_a_pre_ampere_gpu_reports_pending_page_retirement(monkeypatch):
    gpu = FakeGpu(name=b"Tesla V100", retired_pages_pending=pynvml.NVML_FEATURE_ENABLED, remapped_rows=None)
    assert checks(monkeypatch, gpu)["ecc"].detail == "retired memory pages wait for a GPU reset"
    ecc_change = checks(monkeypatch, FakeGpu(ecc=(pynvml.NVML_FEATURE_DISABLED, pynvml.NVML_FEATURE_ENABLED)))
    assert ecc_change["ecc"].detail == "an ECC mode change waits for a reboot"


def test_a_refused_or_missing_query_is_unknown_not_a_failure(monkeypatch):
    lib = install(monkeypatch, FakeGpu())
    lib.refuse["nvmlDeviceGetComputeRunningProcesses_v3"] = pynvml.NVML_ERROR_NO_PERMISSION
    lib.missing |= {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}
    result = health.check_device("cuda:0")
    by_name = {c.name: c for c in result.checks}
    assert by_name["processes"].status == health.UNKNOWN
    assert by_name["processes"].detail == "NVML could not read it: Insufficient Permissions"
    assert by_name["clock events"].status == health.UNKNOWN
    assert by_name["clock events"].detail == "NVML could not read it: Function Not Found"
    assert result.ok and result.gpu == "NVIDIA H100 80GB HBM3" and result.nvml_index == 0
    assert lib.inits == lib.shutdowns == 1  # the NVML session is released


def test_the_device_index_picks_the_nvml_device(monkeypatch):
    install(monkeypatch, FakeGpu(), FakeGpu(name=b"NVIDIA L40S", persistence=pynvml.NVML_FEATURE_DISABLED))
    assert health.check_device("cuda:0").ok
    second = health.check_device("cuda:1")
    assert second.gpu == "NVIDIA L40S" and not second.ok
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert health.check_device("cuda:0").gpu == "NVIDIA L40S"


def test_a_cpu_has_nothing_to_check_and_no_driver_fails(monkeypatch):
    cpu = health.check_device("cpu")
    assert cpu.checks == [] and cpu.ok
    assert text_lines(cpu) == ["health: cpu: does not apply (the checks are for a CUDA GPU); passed"]
    # No driver: the real nvidia-ml-py cannot load libnvidia-ml (made so on a GPU machine too, where
    # the library is there: its loader's CDLL fails as it does without a driver).
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed: pip install -e '.[gpu]'")

    def no_library(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    no_driver = health.check_device("cuda:0")
    assert [(c.name, c.status) for c in no_driver.checks] == [("nvml", health.FAIL)]
    assert "no NVIDIA driver" in no_driver.checks[0].detail


# --- the command ---------------------------------------------------------------------------------


@pytest.fixture
def one_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch sees one CUDA device (as tests/fake_cuda does); NVML answers from the fake driver."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_the_command_exits_5_with_the_reasons_and_writes_json_and_markdown(
    monkeypatch, tmp_path, capsys, one_cuda_device
):
    hostile = b"<img src=x onerror=alert(1)>|@octocat"
    install(monkeypatch, FakeGpu(compute=[(4242, GIB)], process_names={4242: hostile}))
    out_json, out_md = tmp_path / "health.json", tmp_path / "health.md"
    rc = cli.main(["health", "--json", str(out_json), "--markdown", str(out_md), "--", "--perfgate-device", "cuda:0"])
    assert rc == 5
    err = capsys.readouterr().err
    assert "FAIL    processes: 1 other process(es) on the GPU: pid 4242 " in err
    assert "fix: stop them" in err and "cannot run here" in err
    data = json.loads(out_json.read_text())
    assert data["ok"] is False and data["device"] == "cuda:0"
    assert {c["name"]: c["status"] for c in data["checks"]}["processes"] == "FAIL"
    md = out_md.read_text()
    assert md.startswith("### perfgate: cannot run here: the runner's GPU failed 1 health check(s)")
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", html, re.DOTALL) if "processes" in r)
    assert row.count("<td>") == 4  # the pipe in the name did not split the row

    # --warn: the same report, exit 0.
    assert cli.main(["health", "--warn", "--device", "cuda:0"]) == 0
    assert "going on anyway (--warn)" in capsys.readouterr().err


def test_the_command_passes_a_healthy_gpu_and_checks_its_arguments(monkeypatch, tmp_path, capsys, one_cuda_device):
    install(monkeypatch, FakeGpu())
    out_md = tmp_path / "health.md"
    assert cli.main(["health", "--device", "cuda", "--markdown", str(out_md)]) == 0
    assert not out_md.exists()  # a summary is written only for a failed check
    assert "ok      persistence: persistence mode is on" in capsys.readouterr().err
    assert cli.main(["health", "--device", "cpu"]) == 0  # a CPU run: nothing to check, passes
    assert "health: cpu: does not apply" in capsys.readouterr().err
    assert cli.main(["health", "--device", "tpu"]) == 4
    with pytest.raises(SystemExit) as exc:
        cli.main(["health", "--min-free-pct", "120"])
    assert exc.value.code == 4


# --- scripts/ci-benchmark ------------------------------------------------------------------------


def test_ci_benchmark_stops_before_measuring_on_an_unfit_gpu(tmp_path):
    """tests/fake_cuda makes torch see a GPU; nvidia-ml-py finds no driver, so the health check fails."""
    out = tmp_path / "out"
    step_summary = tmp_path / "step-summary.md"
    env = script_env(tmp_path, PYTHONPATH=str(ROOT / "tests" / "fake_cuda"), GITHUB_STEP_SUMMARY=str(step_summary))
    cuda = [a if a != "cpu" else "cuda:0" for a in SMALLEST]
    r = run([str(SCRIPTS / "ci-benchmark"), "--out", str(out), *cuda], env)
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL    nvml: NVML library not found" in r.stderr
    assert not (out / "pytest.log").exists()  # nothing was measured
    summary = (out / "summary.md").read_text()
    assert summary.startswith("### perfgate: cannot run here: the runner's GPU failed 1 health check(s)")
    assert step_summary.read_text() == summary
    assert json.loads((out / "health.json").read_text())["ok"] is False

    # PERFGATE_HEALTH=warn goes on (here only to collect: torch's CUDA is fake; the stored gate named,
    # as the pr default on a GPU would run `perfgate ab` first); a bad value is bad input.
    r = run(
        [str(SCRIPTS / "ci-benchmark"), "--out", str(out), *cuda, "--collect-only"],
        {**env, "PERFGATE_HEALTH": "warn", "PERFGATE_MODE": "stored"},
    )
    assert "going on anyway (--warn)" in r.stderr and (out / "pytest.log").exists(), r.stderr[-3000:]
    r = run([str(SCRIPTS / "ci-benchmark"), *cuda], {**env, "PERFGATE_HEALTH": "maybe"})
    assert r.returncode == 4
    assert r.stderr.strip() == "ci-benchmark: PERFGATE_HEALTH=maybe is not a setting; use fail (default), warn or off"


def test_record_baselines_records_nothing_on_an_unfit_gpu(tmp_path):
    out, baselines = tmp_path / "record", tmp_path / "baselines"
    env = script_env(tmp_path, PYTHONPATH=str(ROOT / "tests" / "fake_cuda"))
    cuda = [a if a != "cpu" else "cuda:0" for a in SMALLEST]
    cmd = [str(SCRIPTS / "record-baselines"), "--out", str(out), "--baselines", str(baselines), *cuda]
    r = run(cmd, env)
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL    nvml: NVML library not found" in r.stderr
    assert not list(baselines.rglob("*.json")) and not (out / "pytest.log").exists()
    assert (out / "summary.md").read_text().startswith("### perfgate: cannot run here")
    r = run(cmd, {**env, "PERFGATE_HEALTH": "later"})
    assert r.returncode == 4 and "record-baselines: PERFGATE_HEALTH=later is not a setting" in r.stderr
