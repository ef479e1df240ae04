"""The instruction count's worker as a pytest session: valgrind runs this module's `main`, which
runs pytest with the counted run's own arguments, in its folder, with its `sys.path` and
environment (perfgate.counts.launcher.count_env), so the `-p` plugins, conftest.py fixtures,
ini options and `PYTEST_ADDOPTS` that wrap the timed step wrap the counted one.

Only the job's cases run, in the job's order (a case's count depends on the cases before it in the
process); each is counted in place of its test body, its fixtures set up around it
(perfgate.counts.worker.count_case). Nothing of the run's is written: no instruction pass of its own
(PERFGATE_NO_COUNTS), no xdist workers, its own basetemp, and the process ends at sessionfinish,
before pytest's cache, junitxml, pytest-benchmark's files or perfgate's records are written.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from perfgate.counts import worker
from perfgate.counts.suite import NO_COUNTS_ENV


class CountWorker:
    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.order = {raw_id: i for i, raw_id in enumerate(job["case_ids"])}
        self.dump = 0
        self.out: Any = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_cmdline_main(self, config: pytest.Config) -> None:
        if hasattr(config.option, "numprocesses"):  # xdist: count in this process
            config.option.numprocesses = None
            config.option.dist = "no"
        if hasattr(config.option, "timeout"):
            # pytest-timeout: its option wins over PYTEST_TIMEOUT and the ini file, and 0 sets no timer. A
            # case runs 20-50x slower under valgrind than timed: the run's per-test limit would stop its count.
            config.option.timeout = 0

    def pytest_configure(self, config: pytest.Config) -> None:
        worker.prepare(self.job)
        self.out = open(self.job["manifest"], "a", encoding="utf8")  # noqa: SIM115 - open until os._exit
        worker.header(self.out)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep = {}
        for item in items:
            case = _case(item)
            if case is not None and case.id in self.order and case.id not in keep:
                keep[case.id] = item
        dropped = [i for i in items if i not in keep.values()]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = sorted(keep.values(), key=lambda i: self.order[_case(i).id])

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        case = _case(pyfuncitem)
        if case is None or case.id not in self.order:
            return None
        bench = pyfuncitem.funcargs.get("benchmark")
        if bench is not None:
            from perfgate.plugin import benchmark_adapter

            benchmark_adapter.mark_used(bench)
        self.dump = worker.count_case(case, self.job, self.out, self.dump)
        return True

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A case whose fixtures failed or skipped it is that case's reason, not a silent gap in the
        manifest (which reads as the worker having stopped)."""
        case_id = report.nodeid.rsplit("[", 1)[-1].rstrip("]")
        if report.when != "setup" or case_id not in self.order:
            return
        if report.skipped:  # pytest.skip() in a fixture: longrepr is (path, line, "Skipped: why")
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            worker.write_line(self.out, {"case": case_id, "skipped": why})
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)  # the exception's own line
            reason = crash.message if crash else str(report.longrepr).strip().splitlines()[-1]
            worker.write_line(self.out, {"case": case_id, "error": f"its fixtures failed in setup: {reason}"})

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        worker.exit_now()  # before any plugin writes the run's files


def _case(item: pytest.Item) -> Any:
    return getattr(getattr(item, "callspec", None), "params", {}).get("case")


def main() -> None:
    try:
        job = worker.read_job()
        os.environ[NO_COUNTS_ENV] = "1"  # set after start: the environment on the stack stays the run's
        args = [*job["pytest_args"], f"--basetemp={job['out']}/basetemp", "-o", f"cache_dir={job['out']}/cache"]
        # Its own inductor cache: a graph compiled under valgrind is never loaded by the timed run
        # (where both had the same cache key it was; with kernels built for another CPU it aborted).
        args.append(f"--perfgate-inductor-cache={job['out']}/inductor-cache")
        pytest.main(args, plugins=[CountWorker(job)])
    finally:
        worker.exit_now()
