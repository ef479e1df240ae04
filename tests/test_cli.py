"""The `perfgate` console script's own promises: an output path that cannot be written is bad input
(exit 4) said in one line that names the path the user gave, its reason and the fix, never a
traceback with exit 1 (which reads as a regression); a broken input file's fix fits its role."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfgate.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parents[1]
BASELINE = sorted(ROOT.glob("baselines/cpu-*/0*_baseline.json"))[-1]  # a real recorded run
STORED_RUN = sorted(ROOT.glob("tests/data/history-step/*/*.json"))[0]  # a real main run, as the store adds it


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"perfgate {command}: "), err
    assert "Traceback" not in err and ".tmp" not in err  # the target, never the temporary file
    return err


def _commit(run: Path) -> str:
    return json.loads(run.read_text())["commit_info"]["id"]


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("compare", lambda d: ["compare", str(BASELINE), str(BASELINE), "--json", str(d)]),
        ("report", lambda d: ["report", str(BASELINE), "--no-history", "-o", str(d)]),
        (
            "report",
            lambda d: ["report", str(BASELINE), "--no-history", "-o", str(d.parent / "r.html"), "--markdown", str(d)],
        ),
    ],
    ids=["compare-json", "report-output", "report-markdown"],
)
def test_an_output_path_that_is_a_folder_is_one_line_naming_it(tmp_path, capsys, command, argv) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    assert main(argv(folder)) == EXIT_BAD_INPUT
    err = _one_line(capsys, command)
    assert err.endswith(f"{folder}: cannot write it (it is a folder); choose a writable file path"), err
    assert list(folder.iterdir()) == [] and not list(tmp_path.glob(".*.tmp"))


def test_aggregate_into_a_folder_and_store_add_under_a_file_say_so_in_one_line(tmp_path, capsys) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        shutil.copy(BASELINE, ranks / f"rank{r}.json")
    (tmp_path / "out").mkdir()
    assert main(["aggregate", str(ranks), "-o", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    assert _one_line(capsys, "aggregate").endswith(
        f"{tmp_path / 'out'}: cannot write it (it is a folder); choose a writable file path"
    )

    not_a_folder = tmp_path / "store"
    not_a_folder.write_text("a file, not the store's worktree\n")
    argv = ["store", "add", str(not_a_folder), "--results", str(STORED_RUN), "--commit", _commit(STORED_RUN)]
    assert main([*argv, "--tier", "pr"]) == EXIT_BAD_INPUT
    err = _one_line(capsys, "store")
    assert f"{not_a_folder}/" in err and f"({not_a_folder} is a file, not a folder); choose a writable file path" in err
    assert not_a_folder.read_text() == "a file, not the store's worktree\n"


def test_a_broken_file_gets_the_fix_of_its_role(tmp_path, capsys) -> None:
    """compare's CURRENT and aggregate's rank files are read as baselines are, but are no recorded
    baseline: their fix is how to write them again, not `git checkout` or --perfgate-record."""
    broken = tmp_path / "current.json"
    broken.write_text(BASELINE.read_text()[:500])  # a run cut short
    assert main(["compare", str(BASELINE), str(broken)]) == EXIT_BAD_INPUT
    err = _one_line(capsys, "compare")
    assert err.startswith(f"perfgate compare: {broken}: truncated JSON")
    assert err.endswith(f"; write it again with: pytest benchmarks --benchmark-json {broken}")
    assert main(["compare", str(broken), str(BASELINE)]) == EXIT_BAD_INPUT  # as the baseline: a baseline's fix
    assert _one_line(capsys, "compare").endswith(
        f"restore it (git checkout -- {broken}) or delete it and record one with: pytest benchmarks --perfgate-record"
    )
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(BASELINE, ranks / "rank0.json")
    shutil.copy(broken, ranks / "rank1.json")
    assert main(["aggregate", str(ranks)]) == EXIT_BAD_INPUT
    err = _one_line(capsys, "aggregate")
    assert err.startswith(f"perfgate aggregate: {ranks / 'rank1.json'}: truncated JSON") and "git checkout" not in err
    assert err.endswith(
        "; run the torchrun job again (`-p perfgate.plugin.torchrun`: each rank writes its rank<R>.json to "
        "--perfgate-dist-dir)"
    )
