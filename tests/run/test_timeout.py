"""The per-case time limit: SIGALRM in the main thread, configured per device type."""

from __future__ import annotations

import threading
import time

import pytest

from perfgate.run import timeout


def test_a_limit_interrupts_python_code_and_is_cleared_after():
    with pytest.raises(timeout.CaseTimeout, match="timed out after 0.2 s"):
        with timeout.limit(0.2) as active:
            assert active
            time.sleep(5)
    time.sleep(0.3)  # the alarm is off: nothing fires here


def test_no_limit_and_other_threads_run_unlimited():
    with timeout.limit(0) as active:
        assert not active
    seen = []
    t = threading.Thread(target=lambda: seen.append(timeout.available()))
    t.start()
    t.join()
    assert seen == [False]


@pytest.mark.parametrize(
    ("value", "device", "expected"),
    [
        (None, "cpu", 300.0),
        (None, "cuda", 900.0),
        (60, "cpu", 60.0),
        ({"cuda": 1200}, "cuda", 1200.0),
        ({"cuda": 1200}, "cpu", 300.0),
        (0, "cpu", 0.0),
    ],
)
def test_configured_limits(value, device, expected):
    assert timeout.configured_limit(value, device) == expected


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "10", True, {"tpu": 5}])
def test_bad_limits_are_one_line_errors(value):
    with pytest.raises(ValueError, match=r"case_timeout_s"):
        timeout.configured_limit(value, "cpu")
