"""pytest plugin: options and hooks only; the logic lives in perfgate's pure modules."""

from __future__ import annotations

import datetime as dt
import gc
import os
from pathlib import Path
from typing import Any

import pytest

from perfgate import files, gate
from perfgate.cases.runner import Case
from perfgate.counts import suite as counts_suite
from perfgate.gate import store as baseline_store
from perfgate.gate import verdict_file
from perfgate.measure.fingerprint import differences
from perfgate.output import markdown, progress, report_data, terminal
from perfgate.plugin import benchmark_adapter, configure, counting, timeout
from perfgate.plugin import progress as pytest_progress
from perfgate.plugin.session import Session
from perfgate.results import RunInfo

_KEY = pytest.StashKey[Session]()
_PROGRESS = pytest.StashKey[Any]()  # the run's perfgate.output.progress reporter


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from perfgate.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    from perfgate.plugin.options import add_options

    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Once per run, before collection and before pytest-benchmark (trylast) reads its options."""
    benchmark_adapter.check_installed()
    table = configure.project_table(config)
    run_config = configure.with_plugins_changes(config, configure.run_config(config, table))
    configure.prepare_process(config, run_config)
    session = Session(config=run_config, cases=configure.expand(config, run_config))
    config.hook.pytest_perfgate_configure_session(config=config, session=session)
    config.stash[_KEY] = session
    configure.check_baselines(session)
    newest = session.baselines.files[0] if run_config.gate_enabled and session.baselines.files else None
    benchmark_adapter.point_outputs(config, session.fingerprint_id, newest)


def session_of(config: pytest.Config) -> Session | None:
    """This run's perfgate session; None where perfgate's hooks did not configure (e.g. --help)."""
    return config.stash.get(_KEY, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    session = metafunc.config.stash[_KEY]
    params = []
    for case in session.cases:
        reason = case.skip_reason(session.env)
        marks = [pytest.mark.skip(reason=f"{case.variant}: {reason}")] if reason else []
        if reason:
            session.skips[case.id] = reason
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("case", params)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.stash.get(_KEY, None) is not None:
        counting.session_pass(config, config.stash[_KEY], session.items)  # before any case is timed
        config.stash[_PROGRESS] = pytest_progress.for_pytest(config, pytest_progress.count_cases(session.items))
        # What exists now (torch and its imports, the plugins, the registries, the collected items)
        # lives as long as the process: frozen out of the collector's sight, the gc.collect() calls
        # that isolate each case and precede its timed rounds cost next to nothing instead of
        # 0.15-0.4 s each (338k objects once torch and perfgate are imported).
        gc.collect()
        gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_benchmark_compare_machine_info(
    config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any], compared_benchmark: dict[str, Any]
) -> None:
    """perfgate's fingerprint decides what is comparable, not pytest-benchmark's machine_info
    (silenced); where the fingerprints differ, the run's summary says so in the line naming the
    compared file (`terminal.compare_line`)."""
    session = config.stash.get(_KEY, None)
    if session is None:
        return
    theirs = RunInfo.from_json(compared_benchmark).machine_fingerprint or {}
    diff = differences(session.fingerprint, theirs)
    if diff:
        session.compared_elsewhere.append(", ".join(f"{k} {b!r} there, {a!r} here" for k, (a, b) in diff.items()))
    benchmark_adapter.silence_machine_info_compare(machine_info, compared_benchmark)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(_KEY, None)
    if session is None:
        return
    # Clock readings change from run to run and would make every compare warn.
    for k in ("hz_actual", "hz_actual_friendly"):
        machine_info.get("cpu", {}).pop(k, None)
    machine_info["perfgate"] = {"fingerprint": session.fingerprint, "fingerprint_id": session.fingerprint_id}


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list[Any], output_json: dict[str, Any]) -> None:
    session = config.stash.get(_KEY, None)
    if session is not None:
        output_json["perfgate"] = perfgate_block(session, output_json)


def perfgate_block(session: Session, output_json: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": baseline_store.SCHEMA,
        "fingerprint": session.fingerprint,
        "fingerprint_id": session.fingerprint_id,
        "commit": RunInfo.from_json(output_json).commit,
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(),
        "device": session.config.device,
    }


def _record(config: pytest.Config, session: Session) -> Path | None:
    if not benchmark_adapter.has_results(config):
        return None
    return baseline_store.record(session.baseline_dir, benchmark_adapter.run_json(config), session.config.record_label)


def _judged_anything(s: Session) -> bool:
    """Whether the run measured a case or gave one a verdict (an error counts): else it wrote nothing."""
    return bool(s.results or s.verdicts)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    reporter = config.stash.get(_PROGRESS, None)
    if reporter is not None:
        reporter.close()
    s = config.stash.get(_KEY, None)
    if s is None or not s.results and not s.skips:
        return
    if s.config.record_label and s.results:
        if exitstatus == 0:
            s.recorded = _record(config, s)
            if s.recorded and s.counts is not None:
                records = {r.case.id: r.record for r in s.results.values()}
                s.recorded_counts = counts_suite.write_portable(s.counts, records)
        else:  # a failing run (accuracy, build error, ...) must not become the reference
            s.record_refused = (
                f"perfgate: not recording a baseline: the run failed (exit {int(exitstatus)}); fix it and record again"
            )
    unjudged = gate.unjudged_latency(s.verdicts) if s.config.gate_enabled else None
    if unjudged:
        counts = ", ".join(f"{n} {kind}" for kind, n in unjudged.items())
        s.unjudged = f"perfgate: no case's latency could be judged ({counts}): this run gated no latency"
        if s.config.fail_unjudged:
            s.unjudged += " (failing the run: --perfgate-fail-unjudged)"
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not _judged_anything(s):
        return  # --benchmark-skip, or every case skipped: the previous run's verdicts stay as they were
    verdicts = report_data.session_verdicts(s)
    if s.config.verdict_file is not None:
        files.write_json(s.config.verdict_file, verdict_file.verdicts_json(verdicts, s.fingerprint))
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        commit = config.hook.pytest_benchmark_generate_commit_info(config=config)
        with open(step_summary, "a", encoding="utf8") as fh:
            run = report_data.session_run(s, commit)
            fh.write(markdown.job_summary([run], verdicts, policy=s.config.policy) + "\n")


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's table, whichever loaded first: the verdicts end the run
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    s = config.stash.get(_KEY, None)
    if s is None or not s.results and not s.skips:
        return
    tr = terminalreporter
    show = config.getoption("perfgate_show_unchanged") or config.getoption("verbose") > 1
    for line in terminal.session_lines(s, show_unchanged=show):
        tr.write_line(line)
    if s.recorded:
        tr.write_line(f"perfgate: recorded baseline {s.recorded}")
    if s.record_refused:
        tr.write_line(s.record_refused)
    if s.recorded_counts:
        tr.write_line(f"perfgate: recorded instruction counts {s.recorded_counts} (keyed by what counts depend on)")
    verdict_file = s.config.verdict_file
    if verdict_file is not None and _judged_anything(s):
        tr.write_line(f"perfgate: verdicts written to {verdict_file}")
    elif verdict_file is not None:
        tr.write_line(f"perfgate: no case was measured; {verdict_file} left as it was")
    if s.unjudged:
        tr.write_line(s.unjudged)
    if s.baselines.skipped:
        names = ", ".join(str(p) for p in s.baselines.skipped)
        tr.write_line(
            f"perfgate: skipped {len(s.baselines.skipped)} entr(ies) named like baselines that are no regular "
            f"files: {names}"
        )
    sources = s.baseline_sources()
    if sources:
        tr.write_line(
            "perfgate: the gate judged each case against the newest baseline holding it: "
            + "; ".join(f"{n} case(s) against {path}" for path, n in sources.items())
        )
    compared = terminal.compare_line(benchmark_adapter.compared_files(config), s.compared_elsewhere)
    if compared:
        tr.write_line(compared)
    for name, r in s.results.items():
        ev = r.record.evidence
        if ev:
            tr.write_line(
                f"perfgate: evidence for {name.split('::')[-1]}: {ev['trace']}; reproduce: {ev['reproduce']['pytest']}"
            )
    recap = terminal.recap_line(s.verdicts)
    if recap:
        tr.write_line(recap)


def run_benchmark(case: Case, benchmark: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The body of a benchmark test: measure, feed pytest-benchmark, then assert accuracy and the gate."""
    import torch

    from perfgate.cases.conversions import VariantError

    session: Session = request.config.stash[_KEY]
    verbose = request.config.getoption("verbose") > 0
    reporter = request.config.stash.get(_PROGRESS, None) or progress.NoProgress()
    fullname = request.node.nodeid

    def error(message: str) -> None:
        """The case could not be measured: a verdict that says why (the verdict file and summary
        show it), then one line; the traceback only with -v."""
        session.verdicts.append(gate.Verdict(case=fullname, metric="run", verdict=gate.ERROR, message=message))
        # Marked used (as feeding it does): else pytest-benchmark adds a "fixture was not used
        # at all" warning, a warnings summary of four lines, to a failure already said in one.
        benchmark_adapter.mark_used(benchmark)
        pytest.fail(f"{case.id}: {message}", pytrace=verbose)

    try:
        with reporter.case(case.id) as note, timeout.limit(session.config.case_timeout_s):
            result, verdicts = session.measure_and_judge(case, fullname, note)
    except VariantError as exc:
        session.skips[case.id] = str(exc)
        pytest.skip(f"{case.variant}: {exc}")
    except baseline_store.BaselineError as exc:  # an older baseline file, read only now that a case needs it
        pytest.fail(f"{case.id}: {exc}", pytrace=False)
    except timeout.CaseTimeout as exc:
        error(f"{exc} (--perfgate-case-timeout-s / [tool.perfgate] case_timeout_s)")
    except torch.OutOfMemoryError as exc:
        error(f"out of memory on {case.device}: {str(exc).splitlines()[0]}")
    except Exception as exc:  # noqa: BLE001 - a model that fails to build or run is this case's failure, not the suite's
        error(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} (the traceback with -v)")
    benchmark_adapter.feed(benchmark, result.measurement.samples_ms, result.extra_info)
    problems = [f"{v.metric} {v.verdict}: {v.message}" for v in session.failing(verdicts, case)]
    if problems:
        pytest.fail(f"{case.id}: " + "; ".join(problems), pytrace=False)
    return result.extra_info
