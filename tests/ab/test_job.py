"""The interleaved worker's results file (perfgate.ab.job): written whole or not at all, and a file
that cannot be read back is one line naming it, in the driver too (perfgate.ab.run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfgate.ab import run as ab_run
from perfgate.ab.job import Job, NotMeasured, ResultsError, read_results, write_results
from perfgate.gate.policy import Policy

ROWS = [
    NotMeasured(case="a-tiny-baseline", error="not run here"),
    NotMeasured(case="b-tiny-baseline", skipped="needs CUDA"),
]


def test_a_write_cut_short_leaves_the_earlier_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "interleaved.json"
    write_results(out, ROWS)
    assert read_results(out) == ROWS

    def crash(*args: object) -> None:
        raise OSError(5, "Input/output error (simulated crash)")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        write_results(out, ROWS[:1])
    assert read_results(out) == ROWS and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_truncated_results_file_is_one_line_in_the_reader_and_the_driver(tmp_path: Path, monkeypatch) -> None:
    whole = tmp_path / "whole.json"
    write_results(whole, ROWS)
    cut = whole.read_bytes()[: len(whole.read_bytes()) // 2]  # what a worker killed mid-write used to leave
    bad = tmp_path / "bad.json"
    bad.write_bytes(cut)
    with pytest.raises(ResultsError) as err:
        read_results(bad)
    assert str(err.value).startswith(f"{bad}: not an A/B worker's results file (JSONDecodeError: ")
    assert "\n" not in str(err.value)

    def worker(cmd, **kw):  # the worker process as the driver sees it: a job read, a cut file left
        Job.read(Path(cmd[-1])).out.write_bytes(cut)
        return subprocess.CompletedProcess(cmd, -9, "", "")

    monkeypatch.setattr(ab_run.subprocess, "run", worker)
    head = ab_run.Side(name="head", label="h", sha="1" * 40, root=tmp_path, cache=tmp_path / "head-cache")
    base = ab_run.Side(name="base", label="b", sha="2" * 40, root=tmp_path / "b", cache=tmp_path / "base-cache")
    with pytest.raises(ab_run.ABError, match=r"^the interleaved measurement failed: .*interleaved\.json: not an A/B"):
        ab_run.run_interleaved(base, head, ["a-tiny-baseline"], Policy(), max_processes=1)
