"""Change points: the detector on series with known steps, the accepted-changes table, and
`perfgate history --change-points` on real history files (tests/data/history-step, see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.history.changepoints import AcceptedChangeError, parse_accepted, segment_starts
from perfgate.history.runs import Run, load_run
from tests.helpers import empty_pyproject, needs_ruptures

pytestmark = needs_ruptures


def _noisy(n: int, cv: float, seed: int) -> np.ndarray:
    return 10.0 * np.exp(np.random.default_rng(seed).normal(0.0, cv, n))


def test_a_flat_series_has_no_change_point_and_a_step_is_found_where_it_is():
    x = _noisy(20, 0.02, 1)
    assert segment_starts(x) == []
    y = x.copy()
    y[12:] *= 1.15
    assert segment_starts(y) == [12]
    y[16:] /= 1.15 * 0.8  # and back down below the old level
    assert segment_starts(y) == [12, 16]


def test_steps_below_the_minimum_change_and_single_outliers_are_not_levels():
    x = _noisy(16, 0.005, 2)
    small = x.copy()
    small[8:] *= 1.03
    assert segment_starts(small) == []  # 3% < 5%
    assert segment_starts(small, min_change=0.02) == [8]
    spike = x.copy()
    spike[7] *= 2.0  # one slow run is no new level: a level needs two runs
    assert segment_starts(spike) == []
    last = x.copy()
    last[-1] *= 1.3  # a step in the newest run alone is not yet told from noise ...
    assert segment_starts(last) == []
    last[-2] *= 1.3  # ... two runs confirm it
    assert segment_starts(last) == [14]


def test_an_accepted_boundary_splits_the_search_and_is_kept_whatever_its_size():
    x = _noisy(12, 0.005, 3)
    assert segment_starts(x, fixed=[6]) == [6]  # kept although nothing changed there
    y = x.copy()
    y[6:] *= 1.2
    y[9:] *= 1.2
    assert segment_starts(y) == [6, 9] and segment_starts(y, fixed=[6]) == [6, 9]
    with pytest.raises(ValueError, match="positive finite"):
        segment_starts([1.0, 0.0, 1.0, 1.0])


def test_accepted_changes_are_checked_with_one_line_naming_the_entry():
    ok = parse_accepted([{"case": "*physicsnemo*", "commit": "1a2b3c4", "reason": "bigger model"}], "pyproject.toml")
    assert ok[0].metric == "*" and ok[0].at("1A2B3C4DEADBEEF") and not ok[0].at("1a2b3c5") and not ok[0].at(None)
    assert ok[0].matches(("test_step[physicsnemo-block-tiny-baseline]",), "median_ms")
    bad = [
        ({"case": "x", "commit": "abc", "reason": "r"}, "commit 'abc' is no commit hash; give at least its first 7"),
        ({"case": "x", "commit": "1a2b3c4"}, "#1: reason must be a non-empty string"),
        ({"case": "x", "commit": "1a2b3c4", "reason": "r", "why": 1}, "unknown key 'why'"),
    ]
    for entry, message in bad:
        with pytest.raises(AcceptedChangeError, match=message.replace("[", r"\[")) as exc:
            parse_accepted([entry], "pyproject.toml [tool.perfgate]")
        assert str(exc.value).startswith("pyproject.toml [tool.perfgate] accepted_changes #1")
    with pytest.raises(AcceptedChangeError, match="must be an array of tables"):
        parse_accepted({"case": "x"})


# --- real history files --------------------------------------------------------------------------
# tests/data/history-step: eight real runs of `pytest benchmarks` (physicsnemo-block, baseline, CPU),
# each recorded at its own commit, the last four with a model-local 20% slowdown injected
# (`-p perfgate.quality.inject`, PERFGATE_INJECT=local:20); its README says how they were made.

DATA = Path(__file__).parents[1] / "data" / "history-step"
FP_ID = next(p.name for p in DATA.iterdir() if p.is_dir())
CASE = "physicsnemo-block [tiny] baseline"


def _runs() -> list[Run]:
    return sorted((load_run(p) for p in (DATA / FP_ID).glob("*.json")), key=Run.order_key)


def _history(*extra: str, pyproject: Path) -> list[str]:
    argv = ["history", "--baselines", str(DATA), "--fingerprint", FP_ID, "--metric", "normalised_median"]
    return [*argv, "--change-points", "--pyproject", str(pyproject), *extra]


def test_the_injected_step_in_real_runs_is_found_at_the_first_slowed_run(tmp_path, capsys):
    runs = _runs()
    assert len(runs) == 8 and len({r.commit for r in runs}) == 8
    assert main(_history("--json", pyproject=empty_pyproject(tmp_path))) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    (step,) = series["change_points"]
    assert step["index"] == 4 and step["commit"] == runs[4].commit  # run 5: the first with the slowdown
    assert step["direction"] == "worse" and 10 < step["change_pct"] < 40  # 20% injected into the model's work
    assert main(_history(pyproject=empty_pyproject(tmp_path))) == 0
    out = capsys.readouterr().out
    assert f"{CASE}  #5     {runs[4].commit[:8]}" in out and "worse" in out
    assert "1 of 1 case(s) with at least 4 entries changed level" in out


def test_an_accepted_step_is_listed_with_its_reason_and_a_misplaced_one_is_reported(tmp_path, capsys):
    runs = _runs()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[tool.perfgate]\naccepted_changes = [\n"
        f'  {{ case = "*physicsnemo-block*", commit = "{runs[4].commit[:10]}", reason = "heavier block" }},\n'
        '  { case = "*physicsnemo-block*", commit = "abcdef1", reason = "typo" },\n]\n'
    )
    assert main(_history("--json", pyproject=pyproject)) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert [(c["index"], c["accepted"]) for c in series["change_points"]] == [(4, "heavier block")]
    assert main(_history(pyproject=pyproject)) == 0
    out = capsys.readouterr().out
    assert "accepted: heavier block" in out
    assert "accepted change '*physicsnemo-block*' at abcdef1 (typo): no entry of that case is at that commit" in out
    pyproject.write_text('[tool.perfgate]\naccepted_changes = [{ case = "x", commit = "nothex!", reason = "r" }]\n')
    assert main(_history(pyproject=pyproject)) == EXIT_BAD_INPUT
    assert "accepted_changes #1: commit 'nothex!' is no commit hash" in capsys.readouterr().err


def test_the_report_marks_the_step_of_the_real_history(tmp_path):
    from perfgate.output.html import benchmark_report
    from perfgate.output.report_data import change_point_block, history_for

    runs = _runs()
    history, unreadable = history_for(runs[-1:], baselines_root=DATA, storage_dirs=[])
    assert unreadable == []
    accepted = parse_accepted([{"case": "*physicsnemo*", "commit": runs[4].commit[:7], "reason": "heavier block"}])
    block = change_point_block(history, accepted, metric="normalised_median")
    (row,) = block["rows"]
    assert (row["case"], row["entry"], row["commit"], row["accepted"]) == (
        CASE,
        "5 of 8",
        runs[4].commit[:7],
        "heavier block",
    )
    page = benchmark_report(runs[-1:], None, history, accepted_changes=accepted)
    section = page[page.index('<section id="change-points">') :]
    assert runs[4].commit[:7] in section and "heavier block" in section and "1 step(s) in 1 case(s)" in section
    assert '<section id="change-points">' not in benchmark_report(runs[-1:], None, None)  # no history: no section
