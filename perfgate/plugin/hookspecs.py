"""Hooks perfgate.plugin.hooks declares for plugins that adapt a benchmark run (perfgate.plugin.torchrun
and perfgate.plugin.xdist implement them). Implement them in a plugin or conftest.py; mark the
implementations `@pytest.hookimpl(optionalhook=True)` when perfgate.plugin.hooks may not be loaded.

The run's configuration (`RunConfig`) is frozen and built once, in pytest_configure: a plugin changes
it in `pytest_perfgate_run_config`, before it is built, and adjusts the run's state (the selected
cases) in `pytest_perfgate_configure_session`. At the end, a plugin whose processes measured the
cases hands the merged run over in `pytest_perfgate_merged_run`; the run's outcome, built once,
is handed to every plugin in `pytest_perfgate_run_outcome`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from perfgate.dist.workers import MergedRun
    from perfgate.plugin.session import Session
    from perfgate.run.config import RunConfig
    from perfgate.run.outcome import RunOutcome


@pytest.hookspec(firstresult=True)
def pytest_perfgate_device(config: pytest.Config) -> str | None:
    """The device this process measures on, e.g. a torchrun rank's "cuda:<LOCAL_RANK>"; None
    leaves it to --perfgate-device, else CUDA when available, else the CPU. The first non-None
    answer wins. Called once, in pytest_configure, before the run's configuration is built."""


@pytest.hookspec
def pytest_perfgate_run_config(config: pytest.Config, run_config: RunConfig) -> RunConfig | None:
    """Called once, in pytest_configure, with the configuration built from the options and
    [tool.perfgate]; return a changed copy (`dataclasses.replace(run_config, ...)`) or None. E.g.
    `run_options` (stop and warm-up rules), `policy`, `record_label` (None: do not record a baseline),
    `verdict_file` (None: write no verdicts file), `fail_unjudged`. Every implementation is handed the
    same configuration and their changes are combined; two that set one field differently are a
    usage error."""


@pytest.hookspec
def pytest_perfgate_configure_session(config: pytest.Config, session: Session) -> None:
    """Called once the Session is built from the final configuration (`session.config`, frozen), before
    collection. An implementation may narrow the run's selection (`session.cases`) or read what the
    session derived (`session.fingerprint`, `session.baselines`)."""


@pytest.hookspec(firstresult=True)
def pytest_perfgate_merged_run(config: pytest.Config) -> MergedRun | None:
    """At session finish: the run measured by other processes (xdist workers), merged; the run's
    outcome is built from it instead of this process's cases. None: this process measured them."""


@pytest.hookspec
def pytest_perfgate_run_outcome(config: pytest.Config, outcome: RunOutcome) -> None:
    """At session finish, once the run's outcome is built (after recording, before the terminal
    summary): e.g. a worker ships it, a shard writes its files."""
