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


def test_a_limit_that_passes_inside_an_import_waits_for_the_import(tmp_path, monkeypatch):
    """The alarm falls while a package's `__init__` runs (here it sleeps past the limit, as a slow
    `import scipy.ndimage` did on a busy VM): the import completes, the package whole in
    sys.modules, and the case times out right after. Raised inside, it left the package half
    imported and every later case failed with a NameError."""
    import sys

    pkg = tmp_path / "slowpkg"
    pkg.mkdir()
    (pkg / "_api.py").write_text("VALUE = 1\n")
    (pkg / "__init__.py").write_text("import time\nfrom ._api import *\ntime.sleep(0.5)\nDONE = True\ndel _api\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(timeout.CaseTimeout):
            with timeout.limit(0.1):
                import slowpkg  # noqa: F401

                time.sleep(5)
        assert sys.modules["slowpkg"].DONE and sys.modules["slowpkg"].VALUE == 1
    finally:
        for name in ("slowpkg", "slowpkg._api"):
            sys.modules.pop(name, None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


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


def test_an_import_that_outlasts_the_grace_is_interrupted_all_the_same(tmp_path, monkeypatch):
    """An import that hangs must not hang the run: past the grace the case times out inside it,
    and says so."""
    import sys

    (tmp_path / "hangpkg.py").write_text("import time\ntime.sleep(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(timeout, "IMPORT_GRACE_MAX_S", 0.2)
    try:
        with pytest.raises(timeout.CaseTimeout, match="inside an import that did not end"):
            with timeout.limit(0.05):
                import hangpkg  # noqa: F401
        assert "hangpkg" not in sys.modules
    finally:
        sys.modules.pop("hangpkg", None)
