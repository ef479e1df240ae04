"""Per-case progress: a live rich line on an interactive terminal that leaves pytest's own output as
it was, plain lines with -v where no live line fits, nothing under -q, in CI or into a pipe.

What a terminal shows is checked on a terminal emulator (pyte) fed the bytes really written: by
rich into a buffer, and by a real pytest run on a pseudo-terminal."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pyte
import pytest

from perfgate.output import progress
from tests.plugin.test_plugin import ARGS, suite  # noqa: F401  (suite: the fixture)

pytest_plugins = ("pytester",)

TTY = dict(isatty=True, verbosity=0, capture="fd", environ={"TERM": "xterm"})


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, progress.LIVE),
        ({"verbosity": -1}, progress.OFF),  # -q
        ({"isatty": False}, progress.OFF),  # a pipe, a log file
        ({"isatty": False, "verbosity": 1}, progress.LINES),  # -v into a pipe: plain lines
        ({"environ": {"TERM": "xterm", "CI": "true"}}, progress.OFF),  # a CI log, even on a pty
        ({"environ": {"TERM": "xterm", "GITHUB_ACTIONS": "true"}, "verbosity": 1}, progress.LINES),
        ({"environ": {"TERM": "dumb"}}, progress.OFF),
        ({"capture": "no"}, progress.OFF),  # -s: the step's own prints would cut into a live line
        ({"capture": "no", "verbosity": 1}, progress.LINES),
    ],
)
def test_mode(change, expected):
    assert progress.mode(**{**TTY, **change}) == expected


def _screen(cols: int = 80, rows: int = 60) -> tuple[pyte.Screen, pyte.Stream]:
    screen = pyte.Screen(cols, rows)
    screen.set_mode(pyte.modes.LNM)  # a terminal's line discipline: a newline also returns the carriage
    return screen, pyte.Stream(screen)


def test_the_live_line_shows_the_phase_below_pytests_line_and_leaves_it_as_it_was():
    screen, stream = _screen()
    pytest_line = "benchmarks/test_models.py ."
    stream.feed(pytest_line)
    buf = io.StringIO()

    def drain() -> None:
        stream.feed(buf.getvalue())
        buf.seek(0), buf.truncate()

    live = progress.LiveProgress(
        total=2, suspend=contextlib.nullcontext, column=lambda: (len(pytest_line), 80), color=False, file=buf
    )
    with live.case("m-tiny-compile") as note:
        note("first call: compiling")
        drain()
        assert screen.display[0].rstrip() == pytest_line
        shown = screen.display[1]
        assert shown.startswith("perfgate 0/2") and shown.rstrip().endswith("m-tiny-compile: first call: compiling")
        note("timing rounds (15 rounds)")
        drain()
        assert screen.display[1].rstrip().endswith("m-tiny-compile: timing rounds (15 rounds)")
    drain()
    # Erased, and the cursor back where pytest left it: its next dot continues its line.
    assert screen.display[1].strip() == "" and (screen.cursor.y, screen.cursor.x) == (0, len(pytest_line))
    stream.feed(".")
    assert screen.display[0].rstrip() == pytest_line + "."
    with live.case("m-tiny-bf16") as note:
        note("warming up")
        drain()
        assert screen.display[1].startswith("perfgate 1/2")
    live.close()


def test_no_live_line_when_pytests_line_ends_at_the_terminals_edge():
    buf = io.StringIO()
    live = progress.LiveProgress(
        total=1, suspend=contextlib.nullcontext, column=lambda: (80, 80), color=False, file=buf
    )
    with live.case("m-tiny-compile") as note:
        note("first call: compiling")
    live.close()
    assert "compiling" not in buf.getvalue()


def test_the_measurement_core_reports_phases_only_outside_the_timed_rounds():
    from perfgate.measure.core import StopRule, WarmupRule, measure

    heard: list[str] = []
    m = measure(
        lambda: sum(range(100)),
        "cpu",
        stop=StopRule(min_rounds=7, max_rounds=7),
        warmup=WarmupRule(min_rounds=1, max_rounds=2),
        progress=heard.append,
        first_call="first call: compiling",
    )
    assert len(m.samples_ms) == 7
    assert heard[0] == "first call: compiling" and heard[1].startswith("warming up (first call ")
    assert heard[2].startswith("timing rounds (7 rounds") and heard[3].startswith("timed 7 rounds in ")
    assert len(heard) == 4  # nothing per round: a redraw between samples is work the next one would pay for


def _run_on_a_terminal(cwd, args: list[str], env: dict[str, str], cols: int = 120) -> str:
    """A pytest run with its stdout and stderr on a pseudo-terminal: what it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args], cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 900  # a hang guard, not a speed check
    while time.monotonic() < deadline:
        if select.select([master], [], [], 1.0)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the run ended and closed the terminal
                break
            if not data:
                break
            out += data
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    os.close(master)
    return out.decode(errors="replace")


def test_a_real_run_on_a_terminal_shows_progress_and_leaves_pytests_lines_intact(suite, monkeypatch):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")}
    env["TERM"] = "xterm"
    written = _run_on_a_terminal(suite.path, ARGS, env)
    assert "sleepy-tiny-baseline: timing rounds (15 rounds" in written  # it was shown ...
    screen, stream = _screen(120, 200)
    stream.feed(written)
    shown = [line.rstrip() for line in screen.display]
    # ... and erased: the screen holds pytest's lines as pytest wrote them.
    assert not any("timing rounds" in line or line.startswith("perfgate 0/1") for line in shown)
    (row,) = [line for line in shown if line.startswith("test_models.py ")]
    assert row.startswith("test_models.py .") and row.endswith("[100%]") and " perfgate" not in row
    assert any(line.startswith("gate verdicts:") or "no baseline recorded" in line for line in shown)

    env["CI"] = "true"  # a CI job's log on a terminal: no live line
    written = _run_on_a_terminal(suite.path, ARGS, env)
    assert "test_models.py ." in written and "timing rounds" not in written and "perfgate 0/1" not in written


def test_plain_lines_with_v_into_a_pipe_and_nothing_without(suite):  # noqa: F811
    r = suite.runpytest_subprocess(*ARGS, "-v")
    r.stdout.fnmatch_lines(
        [
            "  sleepy-tiny-baseline: building the model and its fp32 eager reference output",
            "  sleepy-tiny-baseline: first call",
            "  sleepy-tiny-baseline: timing rounds (15 rounds*",
            "  sleepy-tiny-baseline: timed 15 rounds in *",
        ]
    )
    r = suite.runpytest_subprocess(*ARGS)
    assert not any("timing rounds" in line for line in r.outlines)
