"""Hooks perfgate.plugin.hooks declares for plugins that adapt a benchmark run (perfgate.plugin.torchrun
implements both for torchrun). Implement them in a plugin or conftest.py; mark the
implementations `@pytest.hookimpl(optionalhook=True)` when perfgate.plugin.hooks may not be loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from perfgate.plugin.session import Session


@pytest.hookspec(firstresult=True)
def pytest_perfgate_device(config: pytest.Config) -> str | None:
    """The device this process measures on, e.g. a torchrun rank's "cuda:<LOCAL_RANK>"; None
    leaves it to --perfgate-device, else CUDA when available, else the CPU. The first non-None
    answer wins. Called once, in pytest_configure, before the Session is built."""


@pytest.hookspec
def pytest_perfgate_configure_session(config: pytest.Config, session: Session) -> None:
    """Called once the Session is built (device, policy, run options, selection, outputs), before
    collection. An implementation may adjust its settings: `session.run_options` (stop and warm-up
    rules), `session.policy`, `session.record_label` (None: do not record a baseline) and
    `session.verdict_file` (None: write no verdicts file)."""
