"""The smoke run's last check (scripts/test): every measured case recorded what a baseline needs.
Driven on a committed baseline, a file the runner itself wrote, and on copies of it with one
realistic fault each."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from perfgate.gate import smoke_check
from perfgate.record import REQUIRED_KEYS

BASELINE = Path(__file__).parents[2] / "baselines" / "cpu-amd-epyc-f26m2-t2-6c90885578" / "0002_physicsnemo-block.json"


@pytest.fixture()
def run() -> dict:
    return json.loads(BASELINE.read_text())


def test_a_real_run_has_no_problem(run):
    assert smoke_check.problems(run) == []
    assert smoke_check.main([str(BASELINE)]) == 0


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_a_case_without_a_required_field_is_named(run, key):
    bad = copy.deepcopy(run)
    first = bad["benchmarks"][0]
    del first["extra_info"][key]
    assert smoke_check.problems(bad) == [f"{first['name']}: missing {key}"]


@pytest.mark.parametrize("sample", [0.0, -1.0, float("nan"), float("inf")])
def test_a_non_positive_or_non_finite_sample_is_named(run, sample):
    bad = copy.deepcopy(run)
    last = bad["benchmarks"][-1]
    last["extra_info"]["samples_ms"][1] = sample
    assert smoke_check.problems(bad) == [f"{last['name']}: non-positive or non-finite samples"]


def test_no_case_and_no_fingerprint_are_problems(run, tmp_path, capsys):
    assert smoke_check.problems({**run, "benchmarks": []}) == ["no benchmark was recorded"]
    no_block = {k: v for k, v in run.items() if k != "perfgate"}
    assert smoke_check.problems(no_block) == ["no perfgate block (fingerprint) in the JSON"]
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(no_block))
    assert smoke_check.main([str(path)]) == 1
    assert f"{path}: no perfgate block" in capsys.readouterr().err


def test_a_truncated_file_is_one_line_and_fails(run, tmp_path, capsys):
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(run)[:500])
    assert smoke_check.main([str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("smoke check:") and str(path) in err
