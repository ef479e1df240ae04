"""Progress per case while a benchmark run measures: which case of how many, and what it is doing
(building, the first call that compiles, warm-up, the timed rounds, a re-measurement).

Three modes (`mode`): on an interactive terminal a one-line rich display below pytest's own line,
erased when the case ends so pytest's output stays as it was ("live"); plain lines where -v asks
for them but no live display fits (a CI log, a pipe, `-s`) ("lines"); nothing under -q, in CI logs
and when stdout is not a terminal ("off").

Timing is not perturbed: the display is redrawn only when a phase begins or ends (the measurement
core says so before and after the timed rounds and has no per-round callback), and rich's
auto-refresh thread is off (`auto_refresh=False`): a thread waking ten times a second would take the
GIL, and on a 2-core machine a core, from the step being timed.

pytest captures stdout while a test runs, so every draw happens with its capture suspended (the
`suspend` context the plugin passes: pytest's own `global_and_fixture_disabled`, as its live
logging does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Note = Callable[[str], None]

LIVE, LINES, OFF = "live", "lines", "off"


def mode(*, isatty: bool, verbosity: int, capture: str, environ: Mapping[str, str]) -> str:
    """Which progress a run shows: LIVE on an interactive terminal, LINES with -v where the live
    display does not fit (not a terminal, CI, `-s` where the step's own prints would cut into it),
    OFF otherwise and always under -q."""
    if verbosity < 0:
        return OFF
    ci = any(environ.get(k) for k in ("CI", "GITHUB_ACTIONS"))
    interactive = isatty and not ci and environ.get("TERM") != "dumb" and capture != "no"
    if interactive:
        return LIVE
    return LINES if verbosity > 0 else OFF


class NoProgress:
    """Mode OFF: the pipeline's notes go nowhere."""

    @contextlib.contextmanager
    def case(self, case_id: str) -> Iterator[Note | None]:
        yield None

    def close(self) -> None:
        pass


class LineProgress:
    """Mode LINES: `  <case>: <phase>` lines through `write_line` (the terminal reporter's)."""

    def __init__(self, write_line: Callable[[str], None], suspend: Callable[[], Any]) -> None:
        self._write, self._suspend = write_line, suspend

    @contextlib.contextmanager
    def case(self, case_id: str) -> Iterator[Note]:
        def note(text: str) -> None:
            with self._suspend():
                self._write(f"  {case_id}: {text}")

        yield note

    def close(self) -> None:
        pass


class LiveProgress:
    """Mode LIVE: 'perfgate 3/106 ━━━━━━  owl-world-model-tiny-compile: first call: compiling' on
    the line below pytest's, drawn by rich; at the case's end the line is erased and the cursor goes
    back to where pytest left it (`column()`: the width of pytest's current line), so pytest's dots
    and PASSED words continue in place."""

    def __init__(
        self,
        *,
        total: int,
        suspend: Callable[[], Any],
        column: Callable[[], tuple[int, int]],
        flush: Callable[[], None] = lambda: None,
        color: bool = True,
        file: Any = None,
    ) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Column

        self._suspend, self._column, self._flush = suspend, column, flush
        # file=None: rich looks sys.stdout up at each write, which is the terminal again while
        # pytest's capture is suspended. force_terminal: `mode` decided that before capture began.
        self._console = Console(file=file, force_terminal=True, no_color=not color, highlight=False)
        self._progress = Progress(
            TextColumn("perfgate"),
            MofNCompleteColumn(),
            BarColumn(bar_width=16),
            TextColumn("{task.description}", markup=False, table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=self._console,
            auto_refresh=False,  # no refresh thread: see the module's docstring
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task("", total=total or None)
        self._case = ""
        self._started = False

    @contextlib.contextmanager
    def case(self, case_id: str) -> Iterator[Note]:
        self._flush()
        used, width = self._column()
        # pytest's line ends exactly at the terminal's edge: where the cursor then stands differs
        # between terminals, so this case shows no live line rather than risk writing over pytest's.
        show = not (used and width and used % width == 0)
        col = used % width if width else used
        self._case = case_id
        if show:
            self._progress.update(self._task, description=f"{case_id}: starting")
            with self._suspend():
                self._console.line()  # below pytest's line
                self._progress.start()  # draws it
                self._started = True
        try:
            yield self.note
        finally:
            self._progress.advance(self._task)
            if show:
                with self._suspend():
                    self._stop()
                    # rich leaves the cursor at the start of the erased line: up one, to pytest's column.
                    from rich.control import Control

                    self._console.control(Control.move_to_column(col, -1))

    def note(self, text: str) -> None:
        if self._started:
            with self._suspend():
                self._progress.update(self._task, description=f"{self._case}: {text}", refresh=True)

    def _stop(self) -> None:
        if self._started:
            self._started = False
            self._progress.stop()  # transient: the line is erased and the cursor shown again

    def close(self) -> None:
        """Erase a display an interrupted run left (and show the cursor rich hid)."""
        if self._started:
            with self._suspend():
                self._stop()
