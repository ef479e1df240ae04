"""Change points: the detector on series with known steps, the accepted-changes table, and
`perfgate history --change-points` on real history files (tests/data/history-step, see its README)."""

from __future__ import annotations

import numpy as np
import pytest

from perfgate.changepoints import AcceptedChangeError, parse_accepted, segment_starts


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
