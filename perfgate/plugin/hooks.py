"""pytest plugin: options and hooks only; the logic lives in perfgate's pure modules."""

from __future__ import annotations

import datetime as dt
import gc
import os
from pathlib import Path
from typing import Any

import pytest

from perfgate import files
from perfgate.cases.runner import Case
from perfgate.counts import suite as counts_suite
from perfgate.gate import store as baseline_store
from perfgate.gate import verdict_file
from perfgate.measure.fingerprint import differences
from perfgate.output import markdown, progress, report_data, terminal
from perfgate.plugin import benchmark_adapter, configure, counting
from perfgate.plugin import progress as pytest_progress
from perfgate.plugin.session import Session
from perfgate.results import Benchmark, RunInfo, benchmarks, raw_entries
from perfgate.run.outcome import RunOutcome, run_outcome
from perfgate.run.runner import Host, Runner

_KEY = pytest.StashKey[Session]()
_OUTCOME = pytest.StashKey[RunOutcome]()  # the run's outcome, built once at session finish
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
    host = Host.detect(run_config)
    session = Session(config=run_config, host=host, cases=configure.expand(config, run_config))
    config.hook.pytest_perfgate_configure_session(config=config, session=session)
    config.stash[_KEY] = session
    configure.check_baselines(run_config, host)
    configure.check_recording(config, host)
    configure.check_earlier_passes(run_config)
    newest = host.baselines.files[0] if run_config.gate_enabled and host.baselines.files else None
    benchmark_adapter.point_outputs(config, host.fingerprint_id, newest)


def pytest_sessionstart(session: pytest.Session) -> None:
    """pytest-benchmark's session exists now (its trylast configure): its writers become atomic."""
    if session.config.stash.get(_KEY, None) is not None:
        benchmark_adapter.write_atomically(session.config)


def session_of(config: pytest.Config) -> Session | None:
    """This run's perfgate session; None where perfgate's hooks did not configure (e.g. --help)."""
    return config.stash.get(_KEY, None)


def outcome_of(config: pytest.Config) -> RunOutcome | None:
    """This run's outcome, once built at session finish; None before, or where nothing ran."""
    return config.stash.get(_OUTCOME, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    session = metafunc.config.stash[_KEY]
    params = []
    for case in session.cases:
        reason = case.skip_reason(session.env)
        marks = [pytest.mark.skip(reason=f"{case.variant}: {reason}")] if reason else []
        if reason:
            session.unrunnable[case.id] = reason
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("case", params)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    s = config.stash.get(_KEY, None)
    if s is not None:
        counts = counting.session_pass(config, s.config, s.host, session.items)  # before any case is timed
        s.runner = Runner(config=s.config, host=s.host, counts=counts)
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


def _recorded(s: Session, data: dict[str, Any] | None, why_not: str | None, kept_dir: Path) -> dict[str, Any]:
    """Record the run as a baseline (and its counts) when asked to and it passed; else say why not.
    `data`: the run's result file content (None: pytest-benchmark kept no results). A baseline that
    cannot be written (a folder gone read-only or full since the start) loses nothing: the run is
    kept in `kept_dir` and `record_failed` says where and how to finish the recording."""
    label = s.config.record_label
    if not label:
        return {}
    if why_not:  # a failing run (accuracy, build error, ...) must not become the reference
        return {
            "record_refused": f"perfgate: not recording a baseline: the run failed ({why_not}); fix it and record again"
        }
    if data is None or not (entries := benchmarks(data)):
        return {}
    data, not_recorded = _without_unrecordable(s, data)
    said = {"not_recorded": not_recorded} if not_recorded else {}
    if not benchmarks(data):  # every case's passes disagreed: no file, each one's older baseline stays
        return said
    folder = s.host.baseline_dir
    recorded, failed = baseline_store.record_or_keep(folder, data, label, kept_dir)
    if recorded is None:
        return {"record_failed": failed} | said
    counts = s.runner.counts if s.runner is not None else None
    if counts is None:
        return {"recorded": recorded} | said
    records = {b.case_id: b.record for b in entries}  # a slow phase moves no instruction count
    written, failed = counts_suite.write_portable_or_keep(counts, records, kept_dir)
    return {"recorded": recorded, "recorded_counts": written} | ({"record_failed": failed} if failed else {}) | said


def _without_unrecordable(s: Session, data: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The run's data less the cases whose recording passes still disagree (`CaseRecord.not_recorded`,
    perfgate.gate.detectable), and one line per such case. Stored flagged, such a record would hide
    the case's older baseline (each case is judged against the newest file holding it) and silence
    its latency gate; left out, the older one keeps gating it."""
    kept, lines = [], []
    for raw in raw_entries(data):
        b = Benchmark.from_json(raw) if isinstance(raw, dict) else None
        why = b.record.not_recorded if b is not None and b.has_record else None
        if b is None or not why:
            kept.append(raw)
            continue
        try:
            found = s.host.baseline_record(b.fullname)
            still = (
                f"the previous baseline {found[1]} still gates it"
                if found
                else "it has no baseline on this runner (record it again on a quiet machine)"
            )
        except baseline_store.BaselineError as exc:
            still = f"its previous baseline could not be read ({exc})"
        lines.append(f"perfgate: not recorded: {b.fullname}: {why.removesuffix('; re-record it')}; {still}")
    return {**data, "benchmarks": kept}, tuple(lines)


def build_outcome(config: pytest.Config, s: Session, exitstatus: int) -> RunOutcome:
    """The run's outcome, once: from this process's cases, or from the run other processes measured
    (`pytest_perfgate_merged_run`: xdist workers); recorded as a baseline if asked to."""
    merged = config.hook.pytest_perfgate_merged_run(config=config)
    failed = f"exit {int(exitstatus)}" if exitstatus else None
    if merged is not None:
        records = {b.fullname: b.record for b in benchmarks(merged.data)}
        verdicts, skips = merged.verdicts.verdicts, merged.verdicts.skipped
        data: dict[str, Any] | None = merged.data
        failed = failed or merged.not_recordable
    else:
        records = {o.fullname: o.record for o in s.outcomes if o.record is not None}
        verdicts = [v for o in s.outcomes for v in o.verdicts]
        skips = s.skips()
        data = benchmark_adapter.run_json(config) if benchmark_adapter.has_results(config) else None
    gated = s.config.gate_enabled and bool(records)
    return run_outcome(
        fingerprint=s.host.fingerprint,
        fingerprint_id=s.host.fingerprint_id,
        records=records,
        verdicts=verdicts,
        skips=skips,
        gate_enabled=s.config.gate_enabled,
        fail_on_improvement=s.config.fail_on_improvement,
        fail_unjudged=s.config.fail_unjudged,
        no_baseline_notice=s.host.missing_baseline_notice() if gated else None,
        compared_elsewhere=tuple(s.compared_elsewhere),
        skipped_files=tuple(s.host.baselines.skipped),
        **(
            _recorded(s, data, failed, Path(config.rootpath) / ".perfgate" / "unrecorded" / s.fingerprint_id)
            if records
            else {}
        ),
    )


def _ran(outcome: RunOutcome | None) -> bool:
    """Whether the run measured or skipped a case: else it has nothing to say."""
    return outcome is not None and bool(outcome.records or outcome.verdicts.skipped or outcome.verdicts.verdicts)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    reporter = config.stash.get(_PROGRESS, None)
    if reporter is not None:
        reporter.close()
    s = config.stash.get(_KEY, None)
    if s is None:
        return
    outcome = build_outcome(config, s, int(exitstatus))
    config.stash[_OUTCOME] = outcome
    if outcome.unjudged_fails:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if outcome.record_failed:  # asked to record, and it was not (or not wholly): never a passing run
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    config.hook.pytest_perfgate_run_outcome(config=config, outcome=outcome)
    if not outcome.measured:
        return  # --benchmark-skip, or every case skipped: the previous run's verdicts stay as they were
    if s.config.verdict_file is not None:
        files.write_json(s.config.verdict_file, verdict_file.verdicts_json(outcome.verdicts, outcome.fingerprint))
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        commit = config.hook.pytest_benchmark_generate_commit_info(config=config)
        with open(step_summary, "a", encoding="utf8") as fh:
            run = report_data.records_run(outcome.records, outcome.fingerprint, outcome.fingerprint_id, commit)
            fh.write(markdown.job_summary([run], outcome.verdicts, policy=s.config.policy) + "\n")


# Said the moment pytest takes a Ctrl-C, before the session writes its files (pytest's own notice
# comes after them): a driver that cuts a run (scripts/gpu-check --stage-limit-s) sends SIGINT again
# until it reads this, since one can be lost, and never interrupts the writing.
INTERRUPTED_LINE = "perfgate: KeyboardInterrupt: writing what was measured"


@pytest.hookimpl(trylast=True)  # after pytest's capture plugin has stopped capturing
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    print(INTERRUPTED_LINE, flush=True)


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's table, whichever loaded first: the verdicts end the run
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    s, outcome = config.stash.get(_KEY, None), outcome_of(config)
    if s is None or outcome is None or not _ran(outcome):
        return
    tr = terminalreporter
    show = config.getoption("perfgate_show_unchanged") or config.getoption("verbose") > 1
    for line in terminal.run_lines(
        outcome.records, outcome.verdicts, no_baseline=outcome.no_baseline, show_unchanged=show
    ):
        tr.write_line(line)
    if outcome.recorded:
        tr.write_line(f"perfgate: recorded baseline {outcome.recorded}")
    if outcome.record_refused:
        tr.write_line(outcome.record_refused)
    if outcome.record_failed:
        tr.write_line(outcome.record_failed)
    for line in outcome.not_recorded:
        tr.write_line(line)
    if outcome.recorded_counts:
        tr.write_line(
            f"perfgate: recorded instruction counts {outcome.recorded_counts} (keyed by what counts depend on)"
        )
    verdicts_path = s.config.verdict_file
    if verdicts_path is not None and outcome.measured:
        tr.write_line(f"perfgate: verdicts written to {verdicts_path}")
    elif verdicts_path is not None:
        tr.write_line(f"perfgate: no case was measured; {verdicts_path} left as it was")
    if outcome.unjudged:
        tr.write_line(outcome.unjudged)
    if outcome.skipped_files:
        names = ", ".join(str(p) for p in outcome.skipped_files)
        tr.write_line(
            f"perfgate: skipped {len(outcome.skipped_files)} entr(ies) named like baselines that are no regular "
            f"files: {names}"
        )
    sources = outcome.baseline_sources()
    if sources:
        tr.write_line(
            "perfgate: the gate judged each case against the newest baseline holding it: "
            + "; ".join(f"{n} case(s) against {path}" for path, n in sources.items())
        )
    compared = terminal.compare_line(benchmark_adapter.compared_files(config), outcome.compared_elsewhere)
    if compared:
        tr.write_line(compared)
    for name, ev in outcome.evidence.items():
        again = f"; reproduce: {ev.reproduce.pytest}" if ev.reproduce else ""
        tr.write_line(f"perfgate: evidence for {name.split('::')[-1]}: {ev.trace}{again}")
    recap = terminal.recap_line(outcome.verdicts.verdicts)
    if recap:
        tr.write_line(recap)


def run_benchmark(case: Case, benchmark: Any, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The body of a benchmark test: the runner measures and judges the case; its outcome feeds
    pytest-benchmark, then becomes pytest's skip, failure or pass."""
    session: Session = request.config.stash[_KEY]
    assert session.runner is not None, "perfgate: the runner is built at the end of collection"
    verbose = request.config.getoption("verbose") > 0
    reporter = request.config.stash.get(_PROGRESS, None) or progress.NoProgress()
    try:
        with reporter.case(case.id) as note:
            outcome = session.runner.run(case, request.node.nodeid, note)
    except baseline_store.BaselineError as exc:  # an older baseline file, read only now that a case needs it
        pytest.fail(f"{case.id}: {exc}", pytrace=False)
    session.outcomes.append(outcome)
    if outcome.skipped is not None:
        pytest.skip(f"{case.variant}: {outcome.skipped}")
    if outcome.error is not None or outcome.record is None:
        # Marked used (as feeding it does): else pytest-benchmark adds a "fixture was not used
        # at all" warning, a warnings summary of four lines, to a failure already said in one.
        benchmark_adapter.mark_used(benchmark)
        trace = f"\n{outcome.traceback}" if verbose and outcome.traceback else ""
        pytest.fail(f"{case.id}: {outcome.error}{trace}", pytrace=False)
    extra_info = outcome.record.to_extra_info()
    benchmark_adapter.feed(benchmark, outcome.record.samples_ms, extra_info)
    if outcome.failing:
        problems = [f"{v.metric} {v.verdict}: {v.message}" for v in outcome.failing]
        pytest.fail(f"{case.id}: " + "; ".join(problems), pytrace=False)
    return extra_info
