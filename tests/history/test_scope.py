"""History on any machine: `perfgate history` and `perfgate report` without arguments on a machine
whose fingerprint recorded nothing show every recorded fingerprint, grouped, with one line naming
the closest; on a recorded machine only its own. Built from the committed baselines/ (two real
fingerprints) with a third machine's fingerprint (the development VM's real one, family 25)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.commands import history as history_cmd
from perfgate.history import scope as history_scope
from perfgate.measure.fingerprint import fingerprint_id
from tests.helpers import empty_pyproject

ROOT = Path(__file__).resolve().parents[2]
NEW = "cpu-amd-epyc-f26m2-t2-6c90885578"  # family 26 (Zen 5), with vendor and family in its block
OLD = "cpu-amd-epyc-t2-2d58c0e708"  # recorded before the fingerprint had the CPU's family


def _block(fp_id: str) -> dict:
    path = sorted((ROOT / "baselines" / fp_id).glob("*.json"))[0]
    return json.loads(path.read_text())["perfgate"]["fingerprint"]


def third_machine() -> dict:
    """An AMD EPYC of family 25 (Zen 3), as py-cpuinfo reads the development VM."""
    fp = copy.deepcopy(_block(NEW))
    fp.update(cpu_family=25, cpu_model_number=17, cpu_stepping=1, cpu_flags=["avx2"], cpu_cache_kib={"l1d": 32})
    return fp


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "baselines", tmp_path / "baselines")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def small_project(tmp_path, monkeypatch):
    """The committed baselines cut to one model's entries (drawing 100 cases' charts takes a minute)."""
    for path in (ROOT / "baselines").glob("*/0*.json"):  # numbered runs (baselines/counts/ holds instruction counts)
        data = json.loads(path.read_text())
        data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"]["model"] == "physicsnemo-block"]
        target = tmp_path / "baselines" / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _as(monkeypatch, fp: dict) -> str:
    monkeypatch.setattr(history_cmd, "current_fingerprint", lambda device: fp)
    return fingerprint_id(fp)


def test_the_closest_machine_shares_vendor_and_family_first():
    mine = third_machine()
    recorded = {NEW: _block(NEW), OLD: _block(OLD)}
    assert history_scope.closest(mine, recorded) == NEW  # same vendor; the old block has none
    intel = {**mine, "cpu_vendor": "GenuineIntel", "cpu_model": "Intel Xeon", "cpu_family": 6}
    same_family = {**_block(NEW), "cpu_model_number": 17, "cpu_family": 6, "cpu_vendor": "GenuineIntel"}
    assert history_scope.closest(intel, {**recorded, "cpu-intel-x": same_family}) == "cpu-intel-x"
    gpu = {**mine, "device_type": "cuda", "gpu_name": "NVIDIA H100"}
    h100 = {**gpu, "driver": "580"}
    assert history_scope.closest(gpu, {**recorded, "cuda-h100": h100}) == "cuda-h100"


def test_history_on_a_new_machine_shows_every_fingerprint_with_one_line_naming_the_closest(
    project, monkeypatch, capsys
):
    mine_id = _as(monkeypatch, third_machine())
    assert main(["history", "--brief"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "is this machine's" in line]
    assert len(notes) == 1, out[:2000]
    assert f"none of the 2 recorded fingerprint(s) is this machine's ({mine_id}" in notes[0]
    assert f"closest: {NEW}" in notes[0] and "differs in family (26 vs 25)" in notes[0]
    assert f"fingerprint {NEW}" in out and f"fingerprint {OLD}" in out  # both groups shown


def test_history_on_a_recorded_machine_shows_only_its_own(project, monkeypatch, capsys):
    _as(monkeypatch, _block(NEW))
    assert main(["history", "--brief"]) == 0
    out = capsys.readouterr().out
    assert "is this machine's" not in out
    assert f"fingerprint {NEW}" in out and f"fingerprint {OLD}" not in out


def test_report_without_runs_uses_the_newest_of_each_recorded_fingerprint(small_project, monkeypatch, capsys):
    project = small_project
    _as(monkeypatch, third_machine())
    assert main(["report", "-o", "r.html", "--pyproject", str(empty_pyproject(project))]) == 0
    err = capsys.readouterr().err
    assert sum("is this machine's" in line for line in err.splitlines()) == 1
    assert "the newest saved run of 2 fingerprint(s)" in err
    page = (project / "r.html").read_text()
    assert NEW in page and OLD in page
    _as(monkeypatch, _block(NEW))
    assert main(["report", "-o", "own.html", "--pyproject", str(empty_pyproject(project))]) == 0
    err = capsys.readouterr().err
    assert "is this machine's" not in err and "of 1 fingerprint(s)" in err and "0002_physicsnemo-block.json" in err


def test_no_saved_run_anywhere_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _as(monkeypatch, third_machine())
    assert main(["report"]) == 4
    assert "no saved run in baselines" in capsys.readouterr().err
