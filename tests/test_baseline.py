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
        ('[1, 2]', "not a pytest-benchmark file"),
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
        with pytest.raises(store.BaselineError, match="reference_ms that are not positive times pairing"):
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
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
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
