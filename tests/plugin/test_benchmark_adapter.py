"""perfgate.plugin.benchmark_adapter against the installed pytest-benchmark: each private use it
makes still does what it relies on (a renamed attribute would be set silently and do nothing)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from perfgate.plugin import benchmark_adapter

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from perfgate.plugin import benchmark_adapter

def test_fed(benchmark):
    benchmark_adapter.feed(benchmark, [1.0, 2.0, 4.0], {"case": "probe"})

def test_failed_before_feeding(benchmark):
    benchmark_adapter.mark_used(benchmark)  # as perfgate does before failing a case it could not measure
"""

CONFTEST = """
import json
from pathlib import Path
from perfgate.plugin import benchmark_adapter

def pytest_sessionfinish(session):
    config = session.config
    Path("probe.json").write_text(json.dumps(
        {"has_results": benchmark_adapter.has_results(config), "run": benchmark_adapter.run_json(config)}, default=str
    ))
"""


def test_fed_samples_are_pytest_benchmarks_own_results(pytester):
    pytester.makepyfile(test_probe=PROBE)
    pytester.makeconftest(CONFTEST)
    r = pytester.runpytest_subprocess("--benchmark-json", "out.json", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=2)
    r.stdout.no_fnmatch_line("*not used at all*")  # mark_used: no warning for the fixture fed nothing
    written = json.loads(pytester.path.joinpath("out.json").read_text())
    (bench,) = written["benchmarks"]  # the fixture fed nothing makes no entry
    assert bench["name"] == "test_fed" and bench["extra_info"] == {"case": "probe"}
    assert bench["stats"]["rounds"] == 3 and bench["stats"]["median"] == pytest.approx(0.002)
    assert bench["stats"]["data"] == pytest.approx([0.001, 0.002, 0.004])
    probe = json.loads(pytester.path.joinpath("probe.json").read_text())
    # run_json builds what pytest-benchmark writes (what a baseline or an xdist worker's shipment is).
    assert probe["has_results"] is True
    assert [b["fullname"] for b in probe["run"]["benchmarks"]] == [b["fullname"] for b in written["benchmarks"]]
    assert probe["run"]["benchmarks"][0]["stats"]["data"] == bench["stats"]["data"]
    assert probe["run"]["machine_info"].keys() == written["machine_info"].keys()


@pytest.mark.filterwarnings("ignore:Can't compare")  # an empty storage: compare stays asked for, with nothing to read
def test_the_session_attributes_the_adapter_sets_exist_and_take_effect(pytester):
    pytester.makepyfile(test_probe="def test_nothing():\n    pass\n")
    config = pytester.parseconfigure("--benchmark-compare", "--benchmark-json", "x.json", "--benchmark-autosave")
    try:
        bs = benchmark_adapter.benchmark_session(config)
        assert bs is not None
        written = ("disabled", "xdist_warning", "json", "save", "autosave", "compare", "compared_mapping", "histogram")
        missing = [a for a in (*written, "storage", "benchmarks") if not hasattr(bs, a)]
        assert not missing, f"pytest-benchmark's BenchmarkSession lacks {missing}: update benchmark_adapter"
        assert benchmark_adapter.drop_compare(config) is True
        assert (bs.compare, config.option.benchmark_compare) == (None, None)
        assert benchmark_adapter.drop_compare(config) is False
        benchmark_adapter.enable_in_worker(config)
        assert (bs.disabled, bs.json, bs.save, bs.autosave, bs.compared_mapping) == (False, None, None, None, {})
        assert benchmark_adapter.compared_files(config) == [] and not benchmark_adapter.has_results(config)
    finally:
        config._ensure_unconfigure()


def test_a_merged_run_goes_where_the_user_asked_pytest_benchmark_to_write(pytester, tmp_path):
    pytester.makepyfile(test_probe="def test_nothing():\n    pass\n")
    storage = tmp_path / "storage"
    config = pytester.parseconfigure(
        "--benchmark-json",
        str(tmp_path / "merged.json"),
        "--benchmark-save",
        "merged",
        "--benchmark-storage",
        str(storage),
    )
    try:
        run = {"benchmarks": [], "machine_info": {}, "commit_info": {}, "datetime": "x", "version": "5.3.1"}
        assert benchmark_adapter.write_requested(config, run) == tmp_path / "merged.json"
        assert json.loads((tmp_path / "merged.json").read_text()) == run
        (saved,) = storage.rglob("*_merged.json")
        assert json.loads(saved.read_text()) == run
    finally:
        config._ensure_unconfigure()


ATOMIC_CONFTEST = """
from perfgate.plugin import benchmark_adapter

def pytest_sessionstart(session):
    benchmark_adapter.write_atomically(session.config)  # as perfgate's own pytest_sessionstart does
"""


def test_pytest_benchmarks_writes_go_through_perfgate_and_its_loader_reads_them(pytester):
    from pytest_benchmark.storage.file import FileStorage

    pytester.makepyfile(test_probe=PROBE)
    pytester.makeconftest(ATOMIC_CONFTEST)
    args = (
        "--benchmark-json",
        "out.json",
        "--benchmark-save",
        "run",
        "--benchmark-storage",
        "st",
        "-p",
        "no:cacheprovider",
    )
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    r = pytester.runpytest_subprocess(*args, "--benchmark-compare")
    r.assert_outcomes(passed=2)
    r.stderr.fnmatch_lines(["*Comparing against benchmarks from: *0001_run.json"])  # its numbering, found by compare
    storage = FileStorage(pytester.path / "st", logger=None)
    loaded = list(storage.load())
    assert [p.name for p, _ in loaded] == ["0001_run.json", "0002_run.json"]
    assert all(data["benchmarks"][0]["extra_info"] == {"case": "probe"} for _, data in loaded)
    written = pytester.path / "out.json"
    assert json.loads(written.read_text())["benchmarks"][0]["stats"]["rounds"] == 3
    for path in (written, *(p for p, _ in loaded)):  # perfgate.files' indent, not pytest-benchmark's 4
        assert (pytester.path / "st" / path if not path.is_absolute() else path).read_text().startswith('{\n  "')
    assert not list(pytester.path.rglob("*.tmp"))


def test_a_write_cut_short_leaves_the_earlier_files_intact(pytester, tmp_path, monkeypatch):
    import os

    pytester.makepyfile(test_probe="def test_nothing():\n    pass\n")
    config = pytester.parseconfigure(
        "--benchmark-json", str(tmp_path / "out.json"), "--benchmark-storage", str(tmp_path / "st")
    )
    try:
        benchmark_adapter.write_atomically(config)
        bs = benchmark_adapter.benchmark_session(config)
        old = {"benchmarks": [], "version": "old"}
        bs.save_json(old)
        first = bs.storage.save(old, "run")
        assert first is not None and first.name == "0001_run.json"

        def crash(fd):
            raise OSError(5, "Input/output error (simulated crash)")

        monkeypatch.setattr(os, "fsync", crash)
        new = {"benchmarks": [], "version": "new"}
        with pytest.raises(OSError, match="simulated"):
            bs.save_json(new)
        with pytest.raises(OSError, match="simulated"):
            bs.storage.save(new, "run")
        assert json.loads((tmp_path / "out.json").read_text()) == old
        assert [p.name for p in (tmp_path / "st").rglob("*")] == [first.parent.name, "0001_run.json"]
        assert json.loads(first.read_text()) == old
    finally:
        config._ensure_unconfigure()


def test_a_number_taken_meanwhile_moves_the_save_to_the_next(pytester, tmp_path, monkeypatch):
    from pytest_benchmark.storage.file import FileStorage

    storage = FileStorage(tmp_path / "st", logger=type("L", (), {"info": lambda self, *a, **k: None})())
    taken = storage.get("0001_other.json")
    taken.write_text("{}")
    real = FileStorage._next_num
    calls = iter(["0001"])  # a stale look at the folder: the number another process has just used
    monkeypatch.setattr(FileStorage, "_next_num", property(lambda s: next(calls, None) or real.fget(s)))
    path = benchmark_adapter.save_to_storage(storage, {"benchmarks": []}, "other")
    assert path is not None and path.name == "0002_other.json" and taken.read_text() == "{}"


def test_the_adapter_is_written_against_the_installed_release():
    from importlib.metadata import version

    installed, written = (v.split(".")[:2] for v in (version("pytest-benchmark"), benchmark_adapter.WRITTEN_AGAINST))
    assert installed == written, (
        "a new pytest-benchmark release: check each private use the adapter's docstring lists, then update "
        "WRITTEN_AGAINST"
    )


# What counts as pytest-benchmark's private API: its BenchmarkSession (config._benchmarksession and
# what is read through it), underscored fixture members, its internal modules.
PRIVATE = r"_benchmarksession|pytest_benchmark\.|benchmark\._|\bbs\.[a-z_]+"


def test_only_the_adapter_touches_pytest_benchmarks_internals():
    out = subprocess.run(
        ["grep", "-rnE", PRIVATE, "perfgate", "--include=*.py"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    outside = [line for line in out.splitlines() if not line.startswith("perfgate/plugin/benchmark_adapter.py:")]
    assert not outside, "go through perfgate.plugin.benchmark_adapter:\n" + "\n".join(outside)
    assert re.search(PRIVATE, (ROOT / "perfgate" / "plugin" / "benchmark_adapter.py").read_text())


def test_a_pytest_benchmark_below_the_floor_is_one_usage_line(monkeypatch) -> None:
    """The GPU image of 2026-11-27 carried pytest-benchmark 5.2.3, whose --benchmark-json is an open
    file: a run under it ended in a TypeError. Below the floor perfgate stops first, naming the fix."""
    import importlib.metadata

    assert benchmark_adapter.version_problem(importlib.metadata.version("pytest-benchmark")) is None  # this one
    for ok in ("5.3", "5.3.1", "6.0.0rc1"):
        assert benchmark_adapter.version_problem(ok) is None, ok
    assert benchmark_adapter.version_problem("5.2.3") == (
        "perfgate: pytest-benchmark 5.2.3 is installed; perfgate needs 5.3 or later: "
        "pip install 'pytest-benchmark>=5.3'"
    )
    assert benchmark_adapter.version_problem("5.3.0.dev1") is not None  # a pre-release of the floor is below it
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: {"pytest-benchmark": "5.2.3"}[dist])
    with pytest.raises(pytest.UsageError, match=r"^perfgate: pytest-benchmark 5\.2\.3 is installed;"):
        benchmark_adapter.check_installed()
