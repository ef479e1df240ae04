"""The typed profile report (perfgate.profile.report) against report.json files `perfgate profile` wrote
before the report was typed (tests/profile/data, made by data/capture.py with the nested-dict producer):
each reads back with every key known to a field and is written again byte for byte by
`run.write_report`; a fresh run of the same configuration writes the same keys in the same order."""

from __future__ import annotations

import io
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.profile import run
from perfgate.profile.config import ProfileConfig
from perfgate.profile.report import LayerBreakdown, PointReport, PrecisionRow, ProfileReport
from perfgate.record import RecordBlock
from tests.profile.data.capture import CONFIGS

DATA = Path(__file__).parent / "data"


# The test ids end in ".json": a bare perfgate case id ("physicsnemo-block-tiny-baseline") as a test id
# makes the xdist plugin take `pytest tests -n 2 --dist loadfile` for a benchmark run and refuse it.
JSON_IDS = [f"{name}.json" for name in sorted(CONFIGS)]


def unknown_keys(block: RecordBlock, where: str = "report") -> list[str]:
    """Keys of the file no field took (kept in a block's `extra`), anywhere in the report."""
    out = [f"{where}.{k}" for k in block.extra]
    for f in fields(block):
        value = getattr(block, f.name)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        for k, v in [(None, value), *items]:
            if isinstance(v, RecordBlock):
                out += unknown_keys(v, f"{where}.{f.name}" + ("" if k is None else f"[{k}]"))
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS), ids=JSON_IDS)
def test_a_report_json_reads_back_typed_and_writes_back_byte_for_byte(name: str, tmp_path: Path) -> None:
    text = (DATA / f"{name}.json").read_text()
    report = ProfileReport.from_json(json.loads(text))
    assert unknown_keys(report) == []
    assert all(isinstance(p, PointReport) for p in report.points) and report.points
    run.write_report(tmp_path, report)
    assert (tmp_path / "report.json").read_text() == text  # keys, order and values
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")


def test_the_typed_report_reads_what_the_dicts_held() -> None:
    data = json.loads((DATA / "vjepa2-encoder-tiny-autocast-bf16-sweep-batch.json").read_text())
    report = ProfileReport.from_json(data)
    p, d = report.points[1], data["points"][1]
    assert report.sweep is not None and report.sweep.values == [1, 2] and p.batch == 2
    assert p.benchmark.fps == d["benchmark"]["fps"] and p.memory.available_mib == d["memory"]["available_mib"]
    assert isinstance(p.layers, LayerBreakdown) and p.layers.main_blocks == d["layers"]["main_blocks"]
    main = p.layers.main_group()
    assert main is not None and main.path == main.per_block[0].name.rsplit(".", 1)[0]
    assert main.class_name == d["layers"]["blocks"][0]["class"]
    assert p.precision is not None and isinstance(p.precision.rows["fp16"], PrecisionRow)
    assert p.precision.rows["bf16"].speedup == d["precision"]["rows"]["bf16"]["speedup"]
    assert p.nvtx is not None and p.nvtx.skipped and p.nvtx.steps is None
    assert p.telemetry is not None and p.telemetry.metric("cpu_util_pct") is not None
    assert [s.rule for s in p.suggestions] == [s["rule"] for s in d["suggestions"]]


def test_a_field_set_later_is_written_and_a_note_keeps_its_place() -> None:
    data = json.loads((DATA / "physicsnemo-block-tiny-baseline.json").read_text())
    report = ProfileReport.from_json(data)
    (p,) = report.points
    assert p.layers is not None
    noted = replace(p.layers, note="the eager module")
    assert list(noted.to_json())[-1] == "note" and list(noted.to_json())[:-1] == list(data["points"][0]["layers"])


# Keys a second run may write differently: the share of the measured peak, or the note saying the
# step ran above that peak (a peak timed beside a busy neighbour), and the sampler's fields per sample.
VARIES = {"peak_tflops", "peak_dtype", "peak_share", "peak_note", "telemetry_timeline"}


def keys(value: Any) -> Any:
    """A JSON value's keys, in order, all the way down (a list: its items' distinct shapes), no values."""
    if isinstance(value, dict):
        return [(k, keys(v)) for k, v in value.items() if k not in VARIES]
    if isinstance(value, list):
        return list(dict.fromkeys(json.dumps(keys(v)) for v in value))
    return None


@pytest.mark.parametrize("name", sorted(CONFIGS), ids=JSON_IDS)
def test_a_fresh_run_writes_the_keys_the_old_producer_wrote(name: str, tmp_path: Path) -> None:
    run_dir, report = run.run_profile(ProfileConfig(**CONFIGS[name], out_dir=tmp_path), stream=io.StringIO())
    fresh = json.loads((run_dir / "report.json").read_text())
    assert keys(fresh) == keys(json.loads((DATA / f"{name}.json").read_text()))
    assert fresh == json.loads(json.dumps(report.to_json(), default=str))  # the returned report is the one written
