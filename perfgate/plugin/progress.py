"""The progress display wired to pytest: the cases a run will measure, and the reporter its options and
its terminal ask for (perfgate.output.progress draws it; this module only reads pytest's objects)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

import pytest

from perfgate.output.progress import LINES, LIVE, LineProgress, LiveProgress, NoProgress, mode


def count_cases(items: Sequence[pytest.Item]) -> int:
    """The parametrised cases a run will measure: items with a `case` parameter not marked skip."""
    return sum(
        1
        for item in items
        if "case" in getattr(getattr(item, "callspec", None), "params", {}) and not item.get_closest_marker("skip")
    )


def for_pytest(config: pytest.Config, total: int) -> LiveProgress | LineProgress | NoProgress:
    """The reporter for a pytest run of `total` cases, from its options and its terminal."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    suspend = capman.global_and_fixture_disabled if capman is not None else contextlib.nullcontext
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return NoProgress()
    with suspend():
        isatty = sys.stdout.isatty()
    kind = mode(
        isatty=isatty, verbosity=config.getoption("verbose"), capture=config.getoption("capture"), environ=os.environ
    )
    if kind == LIVE:
        tw = config.get_terminal_writer()
        return LiveProgress(
            total=total,
            suspend=suspend,
            column=lambda: (tw.width_of_current_line, tw.fullwidth),
            flush=tw.flush,
            color=tw.hasmarkup,
        )
    if kind == LINES:
        return LineProgress(tr.write_line, suspend)
    return NoProgress()
