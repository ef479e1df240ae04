import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.gate import store
from tests.helpers import FP, bench, run_json


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_record_appends_numbered_history_and_latest_reads_newest(tmp_path):
    d = tmp_path / "fp"
    p1 = store.record(d, run_json([bench("a", [1, 2, 3])], commit="c1"), "first")
    p2 = store.record(d, run_json([bench("a", [2, 3, 4])], commit="c2"), "second run")
    assert [p1.name, p2.name] == ["0001_first.json", "0002_second-run.json"]
    path, data = store.latest(d, FP)
    assert path == p2 and data["perfgate"]["commit"] == "c2"
    assert json.loads(p1.read_text())["perfgate"]["commit"] == "c1"  # never overwritten


def test_no_baseline_is_none_not_an_error(tmp_path):
    assert store.latest(tmp_path / "missing", FP) is None


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"benchmarks": [', "truncated JSON"),
        ('{"benchmarks": [}', "corrupt JSON"),
        ("[1, 2]", "not a pytest-benchmark file"),
        ('{"benchmarks": []}', "no 'perfgate' block"),
    ],
    ids=["truncated", "corrupt", "not-benchmark", "no-block"],
)
def test_bad_files_give_one_line_naming_file_problem_and_fix(tmp_path, content, problem):
    p = tmp_path / "0001_x.json"
    p.write_text(content)
    with pytest.raises(store.BaselineError) as e:
        store.load(p, FP)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and problem in msg and "record one with" in msg


def test_wrong_schema_and_missing_samples(tmp_path):
    data = run_json([bench("a", [1, 2, 3])])
    data["perfgate"]["schema"] = 99
    with pytest.raises(store.BaselineError, match="schema 99"):
        store.load(_write(tmp_path / "0001_a.json", data), FP)
    data = run_json([bench("a", [1, 2, 3])])
    data["benchmarks"][0]["extra_info"].pop("samples_ms")
    with pytest.raises(store.BaselineError, match="no raw samples"):
        store.load(_write(tmp_path / "0002_a.json", data), FP)
    for i, ref in enumerate(([1, 1], [1, 0, 1], [1, "x", 1])):
        data = run_json([bench("a", [1, 2, 3], reference_ms=ref)])
        with pytest.raises(store.BaselineError, match="reference_ms must be positive finite milliseconds pairing"):
            store.load(_write(tmp_path / f"000{3 + i}_a.json", data), FP)


def test_other_fingerprint_is_refused_with_the_differing_fields(tmp_path):
    other = dict(FP, cpu_model="Other CPU", threads=8)
    p = _write(tmp_path / "0001_a.json", run_json([bench("a", [1, 2])], fp=other))
    with pytest.raises(store.BaselineError) as e:
        store.load(p, FP)
    assert "another machine" in str(e.value) and "cpu_model" in str(e.value) and "threads" in str(e.value)


def test_broken_newest_is_an_error_not_a_silent_fallback(tmp_path):
    store.record(tmp_path, run_json([bench("a", [1, 2])]), "ok")
    (tmp_path / "0002_broken.json").write_text("{")
    with pytest.raises(store.BaselineError, match="0002_broken"):
        store.latest(tmp_path, FP)


def test_interrupted_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    target = tmp_path / "b.json"
    store.atomic_write_json(target, {"v": 1})

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        store.atomic_write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert list(tmp_path.iterdir()) == [target]  # the temporary file was removed


def test_killed_writer_leaves_the_old_baseline_intact(tmp_path):
    """SIGKILL a process in the middle of recording (the new file written but not yet linked to its
    name): the earlier baseline still loads and the new number was never taken."""
    d = tmp_path / "fp"
    first = store.record(d, run_json([bench("a", [1, 2, 3])]), "old")
    code = f"""
import os, sys, time
sys.path.insert(0, {os.getcwd()!r})
from pathlib import Path
from perfgate.gate import store
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from tests.helpers import bench, run_json

def fsync(fd):  # the temporary file is complete on disk; the link to its final name comes next
    print("writing", flush=True)
    time.sleep(30)

os.fsync = fsync
store.record(Path({str(d)!r}), run_json([bench("b", [4, 5, 6])]), "new")
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    assert [p.name for p in d.iterdir() if p.name.startswith(".0002_new.json.")]  # the write was under way
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    path, data = store.latest(d, FP)
    assert path == first and data["benchmarks"][0]["fullname"].endswith("[a]")
    assert [p.name for p in store.numbered_files(d)] == ["0001_old.json"]


def _record_many(folder: str, label: str, n: int) -> list[str]:
    return [
        store.record(__import__("pathlib").Path(folder), run_json([bench("a", [1.0, 2.0])]), f"{label}{i}").name
        for i in range(n)
    ]


def test_concurrent_recordings_with_different_labels_take_different_numbers(tmp_path):
    """The stress test that found 48 of 120 numbers reused: 4 processes x 15 recordings at once."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(4) as pool:
        names = [n for names in pool.map(_record_many, [str(tmp_path)] * 4, "abcd", [15] * 4) for n in names]
    numbers = sorted(int(n[:4]) for n in names)
    assert numbers == list(range(1, 61))


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("samples_ms", [1.0, float("nan")], "samples_ms must be a non-empty list of positive finite milliseconds"),
        ("samples_ms", [1.0, float("inf")], "samples_ms must be"),
        ("samples_ms", [0.0, 1.0], "samples_ms must be"),
        ("samples_ms", [-1.0, 1.0], "samples_ms must be"),
        ("samples_ms", ["1.0"], "samples_ms must be"),
        ("peak_mem_mib", float("nan"), "peak_mem_mib must be a finite number >= 0"),
        ("speedup", 0, "speedup must be a positive finite number"),
        ("accuracy", {"rel_l2": float("nan")}, "accuracy.rel_l2 must be a finite number"),
    ],
    ids=["nan", "inf", "zero", "negative", "string", "memory-nan", "speedup-zero", "accuracy-nan"],
)
def test_bad_values_in_a_baseline_are_one_line_errors(tmp_path, field, value, problem):
    entry = bench("a", [1.0, 2.0])
    entry["extra_info"][field] = value
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps(run_json([entry])))
    with pytest.raises(store.BaselineError, match=problem) as err:
        store.load(path)
    assert str(path) in str(err.value) and "record one with" in str(err.value)


def test_non_utf8_and_special_files(tmp_path):
    (tmp_path / "0001_x.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(store.BaselineError, match="not UTF-8 text"):
        store.load(tmp_path / "0001_x.json")
    os.mkfifo(tmp_path / "0002_fifo.json")  # reading it would hang
    assert [p.name for p in store.numbered_files(tmp_path)] == ["0001_x.json"]
    assert [p.name for p in store.special_files(tmp_path)] == ["0002_fifo.json"]


def test_each_case_is_judged_against_the_newest_baseline_that_holds_it(tmp_path):
    """Recording a subset never un-gates the other cases."""
    store.record(tmp_path, run_json([bench("a", [1.0]), bench("b", [2.0])]), "all")
    store.record(tmp_path, run_json([bench("a", [3.0])]), "only-a")
    b = store.Baselines(tmp_path)
    a_file, a = b.entry("benchmarks/test_models.py::test_step[a]")
    b_file, bb = b.entry("benchmarks/test_models.py::test_step[b]")
    assert (a_file.name, a.record.samples_ms) == ("0002_only-a.json", [3.0])
    assert (b_file.name, bb.record.samples_ms) == ("0001_all.json", [2.0])
    assert b.entry("benchmarks/test_models.py::test_step[c]") is None


def test_a_baseline_that_cannot_be_written_is_kept_elsewhere_and_said_in_one_line(tmp_path):
    folder = tmp_path / "bl"
    folder.write_text("")  # the baselines folder turned into a file (as a full or read-only disk fails)
    data = run_json([bench("a", [1, 2, 3])], commit="c1")
    recorded, line = store.record_or_keep(folder, data, "main run", tmp_path / "kept")
    assert recorded is None and "\n" not in line
    kept = tmp_path / "kept" / "0001_main-run.json"
    assert line == (
        f"perfgate: the baseline could not be recorded in {folder} ({line.split('(', 1)[1].split(')')[0]}); "
        f"the run is kept in {kept}: once the folder is writable, copy it there as the next NNNN_main-run.json, "
        "or record again with --perfgate-baselines DIR"
    )
    assert [b.fullname for b in store.by_name(store.load(kept)).values()] == [data["benchmarks"][0]["fullname"]]
    recorded, line = store.record_or_keep(folder, data, "main", folder / "kept")  # nowhere to keep it either
    assert recorded is None and line.endswith(
        "; make the folder writable, or record again with --perfgate-baselines DIR"
    )
    recorded, line = store.record_or_keep(tmp_path / "ok", data, "main", tmp_path / "kept")
    assert recorded == tmp_path / "ok" / "0001_main.json" and line is None
