"""The per-case time limit: SIGALRM in the main thread, configured per device type."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from perfgate.run import timeout


def test_a_limit_interrupts_python_code_and_puts_the_handler_back():
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(timeout.CaseTimeout, match="timed out after 0.2 s"):
        with timeout.limit(0.2) as active:
            assert active
            time.sleep(5)
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_case_that_ends_in_time_leaves_no_alarm_armed():
    # The realistic mistake: a case finishes before its limit and the timer stays armed, so
    # SIGALRM fires later in whatever runs next (another case, the gate, the verdict write).
    before = signal.getsignal(signal.SIGALRM)
    with timeout.limit(0.2) as active:
        assert active
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


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
