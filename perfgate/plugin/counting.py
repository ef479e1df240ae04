"""The count pass in a pytest session: before the first case is timed, count the selected CPU cases'
instructions under callgrind (perfgate.counts.suite.run_pass), through this run's own pytest session
(the valgrind process runs PLUGIN_WORKER, perfgate.plugin.count_worker, with the run's arguments)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perfgate.counts import launcher as instr
from perfgate.counts.suite import NO_COUNTS_ENV, CountsConfigError, SessionCounts, run_pass, selected

if TYPE_CHECKING:
    from perfgate.cases.runner import Case
    from perfgate.run.config import RunConfig
    from perfgate.run.runner import Host

PLUGIN_WORKER = "perfgate.plugin.count_worker"  # the valgrind process's module: pytest.main on the run's items


def session_pass(
    config: pytest.Config, run_config: RunConfig, host: Host, items: Sequence[pytest.Item]
) -> SessionCounts | None:
    """Before the first case is timed: count the selected CPU cases' instructions, once. None: this
    run counts nothing."""
    counts_config = run_config.counts_config
    if counts_config is None or config.getoption("perfgate_no_counts", False):
        return None
    if config.getoption("collectonly", False):
        return None  # --collect-only measures nothing: no valgrind process (it took 51 s and a recount)
    if not str(run_config.device).startswith("cpu") or hasattr(config, "workerinput") or os.environ.get(NO_COUNTS_ENV):
        why = None  # a GPU run: its cases are never counted under valgrind, nothing to explain
        if hasattr(config, "workerinput"):
            why = "not counted in an xdist worker (each would start valgrind); run without -n to count"
        elif os.environ.get(NO_COUNTS_ENV):
            why = f"not counted: {NO_COUNTS_ENV} is set (perfgate ab sets it after a side's first process)"
        # ops and kernels only: a GPU run, an xdist worker (each would start valgrind), ab's later pairs
        return SessionCounts(
            config=counts_config, fields={}, skipped={}, portable=None, portable_path=None, not_counted=why
        )
    cases, nodeids = [], {}
    for item in items:
        case = getattr(getattr(item, "callspec", None), "params", {}).get("case")
        if case is None or item.get_closest_marker("skip") is not None:
            continue
        cases.append(case)
        nodeids[case.id] = item.nodeid
    smoke = bool(config.getoption("perfgate_smoke", False))
    chosen = set(selected([c.id for c in cases], counts_config, smoke=smoke))
    todo = [c for c in cases if c.id in chosen]
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    def baseline_of(case_id: str) -> float | None:
        if not run_config.gate_enabled or case_id not in nodeids:
            return None
        found = host.baseline_record(nodeids[case_id])
        return found[0].instructions_per_step if found else None

    def tolerance_of(case: Case) -> float:
        return run_config.policy.settings(case.model, case.variant, "instructions", case.device).instructions_tolerance

    registries, model_files = run_config.counts_registries
    if not todo:
        return SessionCounts(config=counts_config, fields={}, skipped={}, portable=None, portable_path=None)
    try:
        counts = run_pass(
            todo,
            counts_config,
            baseline_of=baseline_of,
            tolerance_of=tolerance_of,
            baselines_root=run_config.baselines_root,
            root=Path(config.rootpath),
            registries=registries,
            model_files=model_files,
            out_dir=Path(config.rootpath) / ".perfgate" / "callgrind",
            say=say,
            run=instr.RunContext(
                cwd=str(config.invocation_params.dir),
                sys_path=tuple(sys.path),
                pytest_args=tuple(config.invocation_params.args),
                worker=PLUGIN_WORKER,
            ),
        )
    except CountsConfigError as exc:  # a broken portable count baseline: the file, in one line
        raise pytest.UsageError(f"perfgate: {exc}") from None
    if smoke:
        for c in cases:
            if c.id not in chosen and str(c.device).startswith("cpu"):
                counts.skipped.setdefault(c.id, "not counted in a smoke run ([tool.perfgate.counts] smoke)")
    return counts
