"""The typed record end to end: result files load as CaseRecords, and one rule makes every speedup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.record import CaseRecord, speedup, speedup_basis
from perfgate.results import ResultFileError, case_id, load_records

ROOT = Path(__file__).resolve().parents[1]
BASELINE = sorted((ROOT / "baselines").glob("cpu-*/0001_baseline.json"))[0]  # a real run's file


def test_a_result_file_loads_as_one_typed_record_per_case() -> None:
    raw = json.loads(BASELINE.read_text())["benchmarks"]
    records = load_records(BASELINE)
    assert len(records) == len(raw) and all(isinstance(r, CaseRecord) for r in records.values())
    first = raw[0]
    rec = records[case_id(first["name"])]
    assert (rec.model, rec.variant, rec.median_ms) == (
        first["extra_info"]["model"],
        first["extra_info"]["variant"],
        first["extra_info"]["median_ms"],
    )
    assert rec.samples_ms == first["extra_info"]["samples_ms"]
    # The step kind is `step_kind` in code and `step` in the files (every committed baseline has it).
    assert rec.step_kind == first["extra_info"]["step"] and "step_kind" not in rec.extra
    assert rec.to_extra_info()["step"] == rec.step_kind and "step_kind" not in rec.to_extra_info()


def test_a_truncated_result_file_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(BASELINE.read_text()[:500])
    with pytest.raises(ResultFileError, match="results.json"):
        load_records(bad)


def test_one_speedup_rule_prefers_the_normalised_medians() -> None:
    eager = CaseRecord.from_extra_info({"median_ms": 10.0, "normalised_median": 4.0})
    cpu_case = CaseRecord.from_extra_info({"median_ms": 8.0, "normalised_median": 2.0})
    gpu_case = CaseRecord.from_extra_info({"median_ms": 5.0})
    assert speedup_basis(cpu_case) == "normalised_median" and speedup(eager, cpu_case) == 2.0
    assert speedup_basis(gpu_case) == "median_ms" and speedup(eager, gpu_case) is None  # eager's basis differs
    assert speedup(CaseRecord.from_extra_info({"median_ms": 10.0}), gpu_case) == 2.0
    assert speedup(eager, cpu_case, "median_ms") == 1.25  # an explicit basis
    assert speedup(gpu_case, cpu_case) is None  # eager has no normalised median: no speedup, not a wrong one
    assert speedup(eager, CaseRecord.from_extra_info({"median_ms": 0.0})) is None
