"""pytest plugin: options and hooks only; the logic lives in perfgate's pure modules."""

from __future__ import annotations

import datetime as dt
import importlib.util
import math
import os
from pathlib import Path
from typing import Any

import pytest

from perfgate import extras, files, gate
from perfgate.cases import tiers
from perfgate.cases.runner import Case, RunOptions
from perfgate.cases.selection import _split, expand_cases
from perfgate.cases.variants import set_inductor_cache
from perfgate.cases.workload import RegistryError, load_registries
from perfgate.counts import suite as counts_suite
from perfgate.gate import policy as policy_mod
from perfgate.gate import store as baseline_store
from perfgate.gate import verdict_file
from perfgate.measure.core import StopRule
from perfgate.measure.device import default_device, device_error, is_cpu, resolve
from perfgate.measure.fingerprint import differences
from perfgate.output import markdown, progress, report_data, terminal
from perfgate.plugin import timeout
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


def _table(config: pytest.Config) -> dict[str, Any]:
    path = Path(config.rootpath) / "pyproject.toml"
    return policy_mod.load_table(path)


def _given(config: pytest.Config, name: str, default: Any) -> Any:
    value = config.getoption(name)
    return default if value is None else value


def _run_options(config: pytest.Config, table: dict[str, Any]) -> RunOptions:
    smoke = config.getoption("perfgate_smoke")
    base = StopRule(min_rounds=3, max_rounds=5, budget_s=0.5) if smoke else StopRule()
    try:
        stop = StopRule(
            precision=_given(config, "perfgate_precision", base.precision),
            min_rounds=_given(config, "perfgate_min_rounds", base.min_rounds),
            max_rounds=_given(config, "perfgate_max_rounds", base.max_rounds),
            budget_s=_given(config, "perfgate_budget_s", base.budget_s),
        )
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}; fix the --perfgate-* option") from None
    try:
        tolerances = policy_mod.parse_tolerances(
            table.get("tolerance", {}), f"{Path(config.rootpath) / 'pyproject.toml'} [tool.perfgate]"
        )
    except policy_mod.PolicyError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    interval_ms = config.getoption("perfgate_telemetry_interval_ms")
    if not (interval_ms >= 0 and math.isfinite(interval_ms)):  # NaN fails both
        raise pytest.UsageError(
            f"perfgate: --perfgate-telemetry-interval-ms must be a number >= 0, got {interval_ms:g}"
        )
    window_s = _given(config, "perfgate_energy_window_s", 0.0 if smoke else 1.0)
    if not (window_s >= 0 and math.isfinite(window_s)):
        raise pytest.UsageError(f"perfgate: --perfgate-energy-window-s must be a number >= 0, got {window_s:g}")
    return RunOptions(
        stop=stop,
        energy_window_s=window_s,
        checkpoint=config.getoption("perfgate_checkpoint"),
        tolerances=tolerances,
        warm_compile=not smoke,
        telemetry_interval_s=interval_ms / 1e3 or None,
        count_flops=not config.getoption("perfgate_no_flops"),
        reference=not config.getoption("perfgate_no_reference"),
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        table = _table(config)
        policy = policy_mod.parse(table, f"{Path(config.rootpath) / 'pyproject.toml'} [tool.perfgate]")
        load_registries(
            [*table.get("registries", []), *config.getoption("perfgate_registry")],
            [*table.get("model_files", []), *config.getoption("perfgate_model_file")],
            config.rootpath,
        )
        opts = _run_options(config, table)
        tier_table, tier_defaults = tiers.parse(table, f"{Path(config.rootpath) / 'pyproject.toml'} [tool.perfgate]")
    except (policy_mod.PolicyError, tiers.TierError, RegistryError, FileNotFoundError, TypeError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    device = (
        config.hook.pytest_perfgate_device(config=config) or config.getoption("perfgate_device") or default_device()
    )
    if (err := device_error(device)) is not None:
        raise pytest.UsageError(f"perfgate: --perfgate-device {err}")
    device = str(resolve(device))  # "cuda" -> "cuda:0": every CUDA call downstream gets an index
    root = Path(config.getoption("perfgate_baselines") or Path(config.rootpath) / "baselines")
    set_inductor_cache(
        config.getoption("perfgate_inductor_cache")
        or os.environ.get("PERFGATE_INDUCTOR_CACHE")
        or Path(config.rootpath) / ".perfgate" / "inductor-cache"
    )
    session = Session(
        device=device,
        baselines_root=root,
        policy=policy,
        run_options=opts,
        gate_enabled=not config.getoption("perfgate_no_gate"),
        fail_on_improvement=config.getoption("perfgate_ratchet"),
        fail_on_graph_break=config.getoption("perfgate_fail_on_graph_break"),
        trace=config.getoption("perfgate_trace"),
        evidence_dir=Path(
            config.getoption("perfgate_evidence_dir") or Path(config.rootpath) / ".perfgate" / "evidence"
        ),
        record_label=config.getoption("perfgate_record"),
        verdict_file=Path(
            config.getoption("perfgate_verdicts") or Path(config.rootpath) / ".perfgate" / "verdicts.json"
        ),
    )
    try:
        # A selection on the command line stands alone unless a tier is named with it.
        named = config.getoption("perfgate_tier") or (
            tiers.ALL
            if any(config.getoption(o) for o in ("perfgate_models", "perfgate_sizes", "perfgate_variants"))
            else None
        )
        session.tier = tiers.choose(tier_table, tier_defaults, "cpu" if is_cpu(device) else "cuda", named)
    except tiers.TierError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    try:
        given = config.getoption("perfgate_case_timeout_s")
        session.case_timeout_s = timeout.configured_limit(
            table.get("case_timeout_s") if given is None else given,
            "cpu" if is_cpu(device) else "cuda",
            "--perfgate-case-timeout-s" if given is not None else "[tool.perfgate] case_timeout_s",
        )
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    if session.case_timeout_s:
        # The runner imports torch._dynamo on a case's first build; on a busy VM that took over 10 s,
        # the time limit's alarm cut the import in half, and the half-imported module failed every
        # later case. Imported here, before any limit is armed.
        import torch._dynamo  # noqa: F401
    session.default_variants = list(session.tier.variants) or table.get("variants")
    session.cases = _expand(config, session)  # bad selections fail here, before collection
    try:
        session.counts_config = counts_suite.parse(table, f"{Path(config.rootpath) / 'pyproject.toml'} [tool.perfgate]")
    except counts_suite.CountsConfigError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    session.counts_registries = (
        [*table.get("registries", []), *config.getoption("perfgate_registry")],
        [*table.get("model_files", []), *config.getoption("perfgate_model_file")],
    )
    config.hook.pytest_perfgate_configure_session(config=config, session=session)
    config.stash[_KEY] = session
    if session.gate_enabled:
        try:
            session.load_baseline()
        except baseline_store.BaselineError as exc:
            raise pytest.UsageError(f"perfgate: {exc}") from None
    _point_pytest_benchmark(config, session)


def _point_pytest_benchmark(config: pytest.Config, session: Session) -> None:
    """pytest-benchmark reads its options when it configures (trylast). Its own saves
    (--benchmark-save/--benchmark-autosave) get a folder of their own per fingerprint, never the
    baselines' (an autosave there became the file --benchmark-compare used while the gate used
    another); a plain --benchmark-compare compares with the gate's newest baseline file."""
    config.option.benchmark_storage = (
        f"file://{Path(config.rootpath) / '.perfgate' / 'benchmarks' / session.fingerprint_id}"
    )
    if config.getoption("benchmark_compare", None) is True and session.gate_enabled and session.baselines.files:
        config.option.benchmark_compare = str(session.baselines.files[0].resolve())
    prefixes = config.getoption("benchmark_histogram", None)
    if prefixes:
        config.option.benchmark_histogram = histogram_prefixes(prefixes, Path(config.rootpath))


def histogram_prefixes(prefixes: list[str], rootpath: Path) -> list[str]:
    """--benchmark-histogram's SVGs go to FILENAME-PREFIX-group.svg relative to the working folder:
    a bare prefix (its default is benchmark_<time>) is put under .perfgate/histograms instead of
    littering the repository's root; a prefix with a folder in it is where the user asked. pygal is
    checked here: a missing one crashed pytest-benchmark after the whole run."""
    if importlib.util.find_spec("pygal") is None:
        raise pytest.UsageError(f"perfgate: {extras.message('pygal', '--benchmark-histogram')}")
    return [p if Path(p).parent != Path(".") else str(rootpath / ".perfgate" / "histograms" / p) for p in prefixes]


def _expand(config: pytest.Config, session: Session) -> list[Case]:
    o = config.getoption
    try:
        tier = session.tier
        return expand_cases(
            session.device,
            models=_split(o("perfgate_models")) or list(tier.models),
            sizes_=_split(o("perfgate_sizes")) or list(tier.sizes),
            variants=_split(o("perfgate_variants")) or session.default_variants,
            case_ids=list(tier.cases),
        )
    except (KeyError, ValueError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None


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
        counts_suite.session_pass(config, config.stash[_KEY], session.items)  # before any case is timed
        config.stash[_PROGRESS] = progress.for_pytest(config, progress.count_cases(session.items))


def feed_benchmark(benchmark: Any, samples_ms: list[float], extra_info: dict[str, Any]) -> None:
    """Hand perfgate's samples to pytest-benchmark so its table, JSON, save and compare work.

    pytest-benchmark times with a host timer only (pedantic cannot take CUDA-event samples), so
    the samples go in through the same Metadata object pedantic fills (pinned 5.3.1 API).
    """
    if benchmark.disabled:
        return
    stats = benchmark._make_stats(1)
    for ms in samples_ms:
        stats.update(ms / 1e3)
    benchmark._mode = "perfgate"
    benchmark.extra_info.update(extra_info)


@pytest.hookimpl(tryfirst=True)
def pytest_benchmark_compare_machine_info(
    config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any], compared_benchmark: dict[str, Any]
) -> None:
    """perfgate's fingerprint decides what is comparable. pytest-benchmark's own implementation of
    this hook (run after this one) warns with both machine_infos dumped on one line (5 KB; and it
    raised where its storage lay outside the working directory) whenever they differ at all; made
    equal here, it stays silent. Where the fingerprints differ, the run's summary says so in the
    line naming the compared file (`terminal.compare_line`)."""
    session = config.stash.get(_KEY, None)
    if session is None:
        return
    theirs = RunInfo.from_json(compared_benchmark).machine_fingerprint or {}
    diff = differences(session.fingerprint, theirs)
    if diff:
        session.compared_elsewhere.append(", ".join(f"{k} {b!r} there, {a!r} here" for k, (a, b) in diff.items()))
    compared_benchmark["machine_info"] = machine_info


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
        "device": session.device,
    }


def run_json(config: pytest.Config) -> dict[str, Any]:
    """This process's results as pytest-benchmark writes them (with the raw data and the blocks the
    pytest_benchmark_update_json hooks add), also when no case ran."""
    bs = config._benchmarksession  # type: ignore[attr-defined]
    commit = config.hook.pytest_benchmark_generate_commit_info(config=config)
    data = config.hook.pytest_benchmark_generate_json(
        config=config,
        benchmarks=bs.benchmarks,
        include_data=True,
        machine_info=bs.get_machine_info(),
        commit_info=commit,
    )
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=bs.benchmarks, output_json=data)
    return data


def _record(config: pytest.Config, session: Session) -> Path | None:
    if not config._benchmarksession.benchmarks:  # type: ignore[attr-defined]
        return None
    return baseline_store.record(session.baseline_dir, run_json(config), session.record_label)


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
    if s.record_label and s.results:
        if exitstatus == 0:
            s.recorded = _record(config, s)
            if s.recorded and s.counts is not None:
                records = {r.case.id: r.record for r in s.results.values()}
                s.recorded_counts = counts_suite.write_portable(s.counts, records)
        else:  # a failing run (accuracy, build error, ...) must not become the reference
            s.record_refused = (
                f"perfgate: not recording a baseline: the run failed (exit {int(exitstatus)}); fix it and record again"
            )
    unjudged = gate.unjudged_latency(s.verdicts) if s.gate_enabled else None
    if unjudged:
        counts = ", ".join(f"{n} {kind}" for kind, n in unjudged.items())
        s.unjudged = f"perfgate: no case's latency could be judged ({counts}): this run gated no latency"
        fail = config.getoption("perfgate_fail_unjudged")
        if fail == "yes" or (fail == "auto" and os.environ.get("CI")):
            s.unjudged += " (failing the run: --perfgate-fail-unjudged)"
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not _judged_anything(s):
        return  # --benchmark-skip, or every case skipped: the previous run's verdicts stay as they were
    verdicts = report_data.session_verdicts(s)
    if s.verdict_file is not None:
        files.write_json(s.verdict_file, verdict_file.verdicts_json(verdicts, s.fingerprint))
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        commit = config.hook.pytest_benchmark_generate_commit_info(config=config)
        with open(step_summary, "a", encoding="utf8") as fh:
            fh.write(markdown.job_summary([report_data.session_run(s, commit)], verdicts) + "\n")


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
    if s.verdict_file is not None and _judged_anything(s):
        tr.write_line(f"perfgate: verdicts written to {s.verdict_file}")
    elif s.verdict_file is not None:
        tr.write_line(f"perfgate: no case was measured; {s.verdict_file} left as it was")
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
    bs = getattr(config, "_benchmarksession", None)
    compared = terminal.compare_line(list(getattr(bs, "compared_mapping", None) or {}), s.compared_elsewhere)
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

    from perfgate.cases.variant_steps import VariantError

    session: Session = request.config.stash[_KEY]
    verbose = request.config.getoption("verbose") > 0
    reporter = request.config.stash.get(_PROGRESS, None) or progress.NoProgress()
    fullname = request.node.nodeid

    def error(message: str) -> None:
        """The case could not be measured: a verdict that says why (the verdict file and summary
        show it), then one line; the traceback only with -v."""
        session.verdicts.append(gate.Verdict(case=fullname, metric="run", verdict=gate.ERROR, message=message))
        # Marked used (as feed_benchmark does): else pytest-benchmark adds a "fixture was not used
        # at all" warning, a warnings summary of four lines, to a failure already said in one.
        benchmark._mode = "perfgate"
        pytest.fail(f"{case.id}: {message}", pytrace=verbose)

    try:
        with reporter.case(case.id) as note, timeout.limit(session.case_timeout_s):
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
    feed_benchmark(benchmark, result.measurement.samples_ms, result.extra_info)
    problems = [f"{v.metric} {v.verdict}: {v.message}" for v in session.failing(verdicts, case)]
    if problems:
        pytest.fail(f"{case.id}: " + "; ".join(problems), pytrace=False)
    return result.extra_info
