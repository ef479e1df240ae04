"""The typed record end to end: result files load as CaseRecords and write back as they were read
(its JSON blocks too), and one rule makes every speedup."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from perfgate.record import (
    CaseRecord,
    EnergyWindow,
    Evidence,
    InstructionCount,
    MinMeanMax,
    PassNoise,
    PeakBasis,
    Pooled,
    Reproduce,
    Telemetry,
    TelemetryGpu,
    ThrottledRounds,
    speedup,
    speedup_basis,
)
from perfgate.results import ResultFileError, benchmarks, case_id, is_result_file, load_records, read_benchmark_json

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


# Every committed pytest-benchmark file: the gate's baselines, the documented GPU runs, the tests' runs.
RESULT_FILES = sorted(
    p
    for folder in ("baselines", "docs/data", "tests/data")
    for p in (ROOT / folder).rglob("*.json")
    if is_result_file(json.loads(p.read_text()))
)
_KEY_ORDER = {key: i for i, key in enumerate(f.metadata.get("key", f.name) for f in fields(CaseRecord))}


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_result_file_round_trips_through_the_record(path: Path) -> None:
    """Each entry's extra_info, read into a CaseRecord and written again, is the same JSON: every
    block inside (energy, throttle, peak_basis, instructions, telemetry) key for key in the file's
    order. The top level comes out in the record's field order, unknown keys last, as it always
    has (older files wrote a few keys elsewhere)."""
    entries = [b for b in benchmarks(read_benchmark_json(path)) if b.has_record]
    assert entries
    for b in entries:
        info, out = b.raw["extra_info"], b.record.to_extra_info()
        assert out == info, b.name
        in_field_order = sorted(info, key=lambda k: _KEY_ORDER.get(k, len(_KEY_ORDER)))
        assert json.dumps(out) == json.dumps({k: info[k] for k in in_field_order}), b.name


def test_the_committed_files_read_as_typed_blocks() -> None:
    records = [b.record for path in RESULT_FILES for b in benchmarks(read_benchmark_json(path))]
    assert any(isinstance(r.energy, EnergyWindow) and r.energy.error_bound_pct > 0 for r in records)
    assert any(isinstance(r.throttle, ThrottledRounds) and r.throttle.kept > 0 for r in records)
    assert any(r.peak_basis and all(isinstance(p, PeakBasis) for p in r.peak_basis.values()) for r in records)
    tel = [r.telemetry for r in records if r.telemetry is not None]
    assert tel and all(isinstance(t, Telemetry) and not t.extra for t in tel)
    assert any(t.gpu is not None and t.gpu.max_sm_clock_mhz for t in tel)
    assert all(isinstance(m, MinMeanMax) for t in tel for m in (t.metrics or {}).values())
    assert not any(k in r.extra for r in records for k in ("energy", "throttle", "peak_basis", "telemetry"))


@pytest.mark.parametrize("path", sorted((ROOT / "baselines" / "counts").glob("*.json")), ids=lambda p: p.name)
def test_the_portable_count_baselines_round_trip_through_the_record(path: Path) -> None:
    """baselines/counts/<key>.json keeps each case's count fields as the record writes them."""
    for entry in json.loads(path.read_text())["cases"].values():
        rec = CaseRecord.from_extra_info(entry)
        assert isinstance(rec.instructions, InstructionCount) and rec.instructions.key and not rec.extra
        assert json.dumps({k: v for k, v in rec.to_extra_info().items() if k in entry}) == json.dumps(entry)


def test_a_block_keeps_what_it_was_read_with() -> None:
    """Keys a block does not know stay (in `extra`), keys a file left out stay out, nulls stay null,
    the file's order stays; a field set since is written after them."""
    obj = {"key": "vg-x", "later_key": [1, 2], "total": 500, "valgrind": None}
    block = InstructionCount.from_json(obj)
    assert (block.key, block.total, block.steps, block.extra) == ("vg-x", 500, None, {"later_key": [1, 2]})
    assert json.dumps(block.to_json()) == json.dumps(obj)
    assert block == InstructionCount(key="vg-x", total=500, extra={"later_key": [1, 2]})  # `written` is not compared
    again = replace(block, spread_pct=0.5)
    assert list(again.to_json()) == [*obj, "spread_pct"]
    old = {"gflop": 1.0, "tflops": 2.0, "dtype": "fp32", "op": "conv", "shape": "s", "seconds": 0.1, "device": "cpu"}
    assert PeakBasis.from_json(old).to_json() == old  # no tf32 key before it was written: none added


def test_a_block_built_here_writes_what_its_producer_always_wrote() -> None:
    peak = PeakBasis(gflop=1.0, tflops=2.0, dtype="fp32", op="conv", shape="s", seconds=0.1, device="cpu")
    assert list(peak.to_json())[-1] == "tf32" and peak.to_json()["tf32"] is None  # CPU: null, as always
    cpu = Telemetry(interval_s=0.1, n_samples=3, source="psutil", metrics={"rss_mib": MinMeanMax(min=1, mean=2, max=3)})
    assert cpu.to_json() == {
        "interval_s": 0.1,
        "n_samples": 3,
        "source": "psutil",
        "metrics": {"rss_mib": {"min": 1, "mean": 2, "max": 3}},
    }
    no_nvml = replace(cpu, gpu_unavailable="NVML not found")  # CUDA without NVML: both keys, the GPU null
    assert no_nvml.to_json() == {**cpu.to_json(), "gpu": None, "gpu_unavailable": "NVML not found"}
    gpu = TelemetryGpu(index=0, name="H100", max_sm_clock_mhz=1980.0, total_mem_mib=None, unsupported={}, n_samples=3)
    assert replace(cpu, gpu=gpu).to_json()["gpu_unavailable"] is None
    assert Telemetry.from_json(no_nvml.to_json()) == no_nvml


def test_a_value_of_the_wrong_shape_is_kept_as_read_and_not_typed() -> None:
    odd = {"interval_s": 0.1, "metrics": {"rss_mib": 12.0}, "busy_sm_clock_mhz": {"mean": 1.0}}
    tel = Telemetry.from_json(odd)
    assert tel.metrics is None and tel.busy_sm_clock_mhz is None
    assert tel.extra == {"metrics": {"rss_mib": 12.0}, "busy_sm_clock_mhz": {"mean": 1.0}}
    assert json.dumps(tel.to_json()) == json.dumps(odd)


def test_the_producers_blocks_round_trip_through_the_record(tmp_path: Path) -> None:
    """pass_noise, pooled and evidence are in no committed file: the blocks their producers build
    (the recording passes' noise with a slow pass left out, a re-measured case's pooled runs, a
    failing case's trace and reproduce commands) are written, read back as the same typed blocks
    and written again as the same JSON, key for key."""
    import torch

    from perfgate.cases.runner import Case
    from perfgate.gate import detectable
    from perfgate.gate.decide import pooled_block
    from perfgate.profile.evidence import capture_evidence, reproduce_commands

    passes = [
        CaseRecord(median_ms=m, samples_ms=[m] * 5, device_ms_per_step=d)
        for m, d in ((11.0, 4.0), (10.0, 4.02), (10.05, 4.01))
    ]
    kept, dropped = detectable.without_slow_pass(passes)  # the first pass caught a slow phase
    noise = detectable.noise_block(detectable.noise_of(kept), dropped=dropped)
    case = Case(model="physicsnemo-block", size="tiny", variant="baseline", device="cpu")
    ev = capture_evidence(lambda: torch.ones(8).add_(1), "cpu", tmp_path, steps=1, memory_snapshot=False)
    ev = replace(ev, reproduce=reproduce_commands(case))
    rec = CaseRecord(samples_ms=[10.05] * 5, pass_noise=noise, pooled=pooled_block(passes), evidence=ev)

    info = json.loads(json.dumps(rec.to_extra_info()))
    back = CaseRecord.from_extra_info(info)
    assert back == rec and not back.extra
    assert json.dumps(back.to_extra_info()) == json.dumps(info)
    assert back.pass_noise and all(isinstance(b, PassNoise) for b in back.pass_noise.values())
    assert back.pass_noise["latency"].dropped_pass == 1 and back.pass_noise["device_time"].dropped_pass is None
    assert "dropped_pass" not in info["pass_noise"]["device_time"]  # omitted stays omitted
    assert isinstance(back.pooled, Pooled) and back.pooled.runs == 3 and len(back.pooled.samples_ms) == 15
    assert "reference_ms" in info["pooled"] and back.pooled.reference_ms is None  # written as null, as always
    assert isinstance(back.evidence, Evidence) and isinstance(back.evidence.reproduce, Reproduce)
    assert back.evidence.memory_snapshot is None and "memory_snapshot" not in info["evidence"]  # CUDA only
