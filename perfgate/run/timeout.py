"""A per-case time limit: a hanging case fails with "timed out after N s" and the suite goes on.

SIGALRM through `signal.setitimer`, as pytest-timeout's signal method does; written here because
that plugin either fails the test from inside its handler (so perfgate could record no verdict for
it) or, in its thread method, kills the whole process and the verdict file with it. The alarm
interrupts Python code and any C call that returns to the interpreter (a kernel that never
returns cannot be interrupted in-process by anyone). Only the main thread receives signals:
elsewhere, and where SIGALRM does not exist, the limit is off and `limit` says so.

An alarm that lands inside an import waits until the import is done: raised there, it leaves the
interpreter with a half-imported package. Python drops the package from `sys.modules` but keeps the
submodules it had loaded, so importing it again does not bind them on the new package. On a busy
2-core VM (2026-11-29) a case timed out inside `import scipy.ndimage`, and every later case of the
run failed with `NameError: name '_ndimage_api' is not defined` (scipy's `__init__` deletes the
name of a submodule it imported).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class CaseTimeout(Exception):
    """Raised in the case's own code when its time limit passes."""


def available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def limit(seconds: float | None) -> Iterator[bool]:
    """Raise CaseTimeout in this thread after `seconds` (None or 0: no limit). Yields whether a
    limit is in force."""
    if not seconds or not available():
        yield False
        return

    deferred_s = 0.0

    def alarm(signum: int, frame: FrameType | None) -> None:
        nonlocal deferred_s
        if _importing(frame) and deferred_s < IMPORT_GRACE_MAX_S:
            deferred_s += IMPORT_GRACE_S
            signal.setitimer(signal.ITIMER_REAL, IMPORT_GRACE_S)  # again once the import is done
            return
        inside = " (inside an import that did not end: later cases may fail to import it)" if deferred_s else ""
        raise CaseTimeout(f"timed out after {seconds:g} s{inside}")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


IMPORT_GRACE_S = 0.05  # how often an alarm that fell inside an import looks again
IMPORT_GRACE_MAX_S = 60.0  # an import that hangs longer than this is interrupted all the same


def _importing(frame: FrameType | None) -> bool:
    """Whether the interrupted code is inside an import (importlib's bootstrap on its stack)."""
    while frame is not None:
        # by file name, or by module name where frozen modules are off (-X frozen_modules=off)
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap") or frame.f_globals.get(
            "__name__", ""
        ).startswith("importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


DEFAULT_LIMIT_S = {"cpu": 300.0, "cuda": 900.0}  # generous: a cold compile of the largest model takes minutes


def configured_limit(value: object, device_type: str, source: str = "[tool.perfgate] case_timeout_s") -> float:
    """The time limit of one case on `device_type`: `case_timeout_s = 600` or
    `case_timeout_s = { cpu = 300, cuda = 900 }` (0 switches it off); ValueError names the key."""
    if value is None:
        return DEFAULT_LIMIT_S.get(device_type, DEFAULT_LIMIT_S["cuda"])
    if isinstance(value, dict):
        unknown = set(value) - set(DEFAULT_LIMIT_S)
        if unknown:
            raise ValueError(f"{source}: device type {sorted(unknown)[0]!r} is neither cpu nor cuda")
        value = value.get(device_type, DEFAULT_LIMIT_S.get(device_type))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise ValueError(
            f"{source}: must be a number of seconds >= 0 (0: no limit) or a table per device type, got {value!r}"
        )
    return float(value)
