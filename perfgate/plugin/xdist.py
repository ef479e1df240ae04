"""pytest plugin for runs in several processes: options and hooks only; the logic is
perfgate.dist.workers (xdist workers, merging) and perfgate.dist.shard (the split across runners).

    pytest benchmarks --perfgate-gpus auto           # one worker per GPU of this machine
    pytest benchmarks -n 8 --dist loadgroup          # the same, spelt in xdist's options
    pytest benchmarks --perfgate-shard 2/4           # the second of four runners (a CI matrix)
    perfgate aggregate .perfgate/shards              # the four shards' files -> one run

Under pytest-xdist the controller hands each worker a GPU (`workerinput`), refuses set-ups whose
workers would share a device, and merges what the workers ship back (`workeroutput`) into the
controller's perfgate session before perfgate.plugin.hooks writes its verdicts, tables and job summary;
`--benchmark-json`, `--benchmark-save` and `--perfgate-record` get the merged run. pytest-benchmark
disables itself in xdist workers ("benchmarks cannot be performed reliably in a parallelized
environment"): perfgate times the cases itself and uses pytest-benchmark as the results' format
only, and the contention it warns of is what `xdist_problem` refuses, so the workers re-enable it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.dist import shard
from perfgate.dist import workers as parallel
from perfgate.dist.workers import ALLOW_OPTION
from perfgate.gate.verdict_file import VerdictSet
from perfgate.plugin.session import Session
from perfgate.results import benchmarks
from perfgate.run.config import RunConfig
from perfgate.run.outcome import RunOutcome

_STATE = pytest.StashKey["ParallelState"]()


@dataclass(frozen=True, kw_only=True)
class Shipped:
    """What a worker ships to the controller in `workeroutput["perfgate"]`: its results and verdicts
    as JSON text (execnet carries only built-in types) and its device."""

    results: str
    verdicts: str
    device: str

    def to_json(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, str]) -> Shipped:
        return cls(**{f.name: obj[f.name] for f in fields(cls)})


@dataclass(frozen=True, kw_only=True)
class WorkerRun:
    """One worker in the merged results' `perfgate.workers` block: its device and the cases it measured."""

    device: str
    cases: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "cases": self.cases}


@dataclass(kw_only=True)
class ParallelState:
    spec: shard.ShardSpec | None
    shard_dir: Path
    allow_shared: bool
    block: dict[str, Any] | None = None  # this shard's perfgate.dist.shard block
    devices: dict[str, str] = field(default_factory=dict)  # controller: worker id -> device
    outputs: dict[str, Shipped] = field(default_factory=dict)  # controller: worker id -> what it shipped
    lost: list[str] = field(default_factory=list)  # controller: workers that ended without results
    merged: dict[str, Any] | None = None  # controller: the merged results
    workers: dict[str, WorkerRun] = field(default_factory=dict)  # controller: the merged results' workers
    merged_verdicts: VerdictSet | None = None  # controller: the workers' verdicts, merged
    checked: bool = False
    lines: list[str] = field(default_factory=list)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("perfgate-parallel", "perfgate: xdist workers (one per GPU) and shards across runners")
    g.addoption(
        "--perfgate-gpus",
        default=None,
        metavar="N|auto",
        help="measure in N pytest-xdist workers, one per GPU (auto: every GPU here); the same as -n N --dist "
        "loadgroup with --perfgate-device cuda",
    )
    g.addoption(
        "--perfgate-shard",
        default=None,
        metavar="I/N",
        help="run shard I of N of the selected cases (1 <= I <= N), a stable split that keeps a model's variants "
        "with its eager baseline; writes its files to --perfgate-shard-dir for `perfgate aggregate`",
    )
    g.addoption(
        "--perfgate-shard-dir",
        default=None,
        metavar="DIR",
        help="where a shard writes shard-I-of-N.json and verdicts.shard-I-of-N.json (default .perfgate/shards)",
    )
    g.addoption(
        ALLOW_OPTION,
        action="store_true",
        help="let xdist workers share a device (the CPU, or more workers than GPUs): their timings contend, so only "
        "to test the plumbing, never to gate",
    )


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _controller(config: pytest.Config) -> bool:
    return not _worker(config) and config.getoption("dist", "no") != "no"


def _session(config: pytest.Config) -> Session | None:
    from perfgate.plugin.hooks import session_of

    return session_of(config)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before perfgate.plugin.hooks configures: its hooks below read this state.
    from perfgate.measure.topology import topology

    text = config.getoption("perfgate_shard")
    try:
        spec = shard.parse(text) if text is not None else None
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    if spec and config.getoption("perfgate_record", None):
        raise pytest.UsageError(
            f"perfgate: --perfgate-record with {shard.OPTION}: a shard holds part of the cases; record from one "
            "unsharded run (-n <GPUs> --dist loadgroup spreads it over this machine's GPUs)"
        )
    gpus = config.getoption("perfgate_gpus")
    if gpus is not None and not _worker(config):  # workers get the same arguments: they must not start workers
        # Set here and as xdist's own pytest_cmdline_main would (tx), whichever of the two runs first.
        try:
            n = parallel.gpu_workers(gpus, _gpu_count(), config.getoption("numprocesses", None))
        except ValueError as exc:
            raise pytest.UsageError(f"perfgate: {exc}") from None
        if config.getoption("dist", "no") not in ("no", "loadgroup"):
            raise pytest.UsageError(
                f"perfgate: --perfgate-gpus with --dist {config.getoption('dist')}: drop --dist and -n "
                "(--perfgate-gpus sets both)"
            )
        config.option.numprocesses, config.option.dist, config.option.tx = n, "loadgroup", ["popen"] * n
    if config.getoption("numprocesses", None) and topology().distributed:
        raise pytest.UsageError("perfgate: -n (pytest-xdist) under torchrun: use one or the other")
    folder = config.getoption("perfgate_shard_dir") or Path(config.rootpath) / ".perfgate" / "shards"
    config.stash[_STATE] = ParallelState(
        spec=spec, shard_dir=Path(folder), allow_shared=config.getoption(ALLOW_OPTION.lstrip("-").replace("-", "_"))
    )


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_device(config: pytest.Config) -> str | None:
    return config.workerinput.get("perfgate_device") if _worker(config) else None  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_run_config(config: pytest.Config, run_config: RunConfig) -> RunConfig | None:
    """The controller records, writes the verdicts and the job summary, once, from the merged run
    (`pytest_perfgate_merged_run`): a worker does none of these."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return None
    if _worker(config):
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
        return replace(run_config, record_label=None, verdict_file=None, fail_unjudged=False)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_configure_session(config: pytest.Config, session: Session) -> None:
    """A shard keeps its share of the cases, split by the recorded case times where there are any."""
    state = config.stash.get(_STATE, None)
    if state is None or state.spec is None:
        return
    from perfgate.gate.store import BaselineError

    baselines = session.baselines
    try:
        durations = shard.durations_s(baselines.files, session.fingerprint)
    except BaselineError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    basis = f"case_wall_s of {baselines.folder}" if durations else "case count (no case_wall_s recorded)"
    session.cases, state.block = shard.apply(session.cases, state.spec, durations, basis)


# ----------------------------------------------------------------------------- controller


def _requested_device(config: pytest.Config) -> str:
    import torch

    from perfgate.measure.device import default_device

    d = torch.device(config.getoption("perfgate_device") or default_device())
    return str(d) if d.type != "cuda" or d.index is not None else "cuda"


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    state = node.config.stash.get(_STATE, None)
    if state is None:
        return
    in_use: dict[int, int] = {}
    for d in state.devices.values():
        if d.startswith("cuda:"):
            in_use[int(d[5:])] = in_use.get(int(d[5:]), 0) + 1
    device = parallel.worker_device(_requested_device(node.config), _gpu_count(), in_use)
    node.workerinput["perfgate_device"] = device
    state.devices[node.gateway.id] = device


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    config = node.config
    state, session = config.stash.get(_STATE, None), _session(config)
    if state is None or session is None or state.checked:
        return
    cases = {c.id for c in session.cases}
    if not any(parallel.case_id(i) in cases for i in ids):
        return  # not a benchmark run (e.g. perfgate's own tests under -n auto)
    state.checked = True
    workers = int(config.getoption("numprocesses") or 1)
    problem = parallel.xdist_problem(
        requested=_requested_device(config),
        workers=workers,
        gpu_count=_gpu_count(),
        dist=config.getoption("dist"),
        allow_shared=state.allow_shared,
    )
    if problem:
        pytest.exit(f"perfgate: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    session = _session(config)
    if config.getvalue("dist") != "loadgroup" or session is None:
        return None
    from xdist.scheduler import LoadGroupScheduling

    groups = {c.id: parallel.group_name(c) for c in session.cases}

    class CaseGroupScheduling(LoadGroupScheduling):
        """xdist's loadgroup, the group of a benchmark case being its model's (see perfgate.dist.workers)."""

        def _split_scope(self, nodeid: str) -> str:
            return parallel.scope_of(nodeid, groups) or super()._split_scope(nodeid)

    return CaseGroupScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    state = node.config.stash.get(_STATE, None)
    if state is None:
        return
    wid = node.gateway.id
    shipped = getattr(node, "workeroutput", {}).get("perfgate")
    if shipped is not None:
        state.outputs[wid] = Shipped.from_json(shipped)
    elif error is not None:
        state.lost.append(f"worker {wid} on {state.devices.get(wid, '?')} ended without results ({error})")
    state.devices.pop(wid, None)  # its GPU goes to a replacement worker


def _worker_order(wid: str) -> tuple[int, str]:
    digits = "".join(ch for ch in wid if ch.isdigit())
    return (int(digits) if digits else 0, wid)


def _merge_workers(config: pytest.Config, state: ParallelState) -> None:
    """The workers' results and verdicts, merged into this plugin's state (`pytest_perfgate_merged_run`
    hands them to perfgate.plugin.hooks, which builds the run's outcome and records it); the merged
    run to the files the user asked pytest-benchmark for."""
    from perfgate.gate.verdict_file import verdicts_from_json
    from perfgate.plugin import benchmark_adapter

    order = sorted(state.outputs, key=_worker_order)
    runs = [(wid, json.loads(state.outputs[wid].results)) for wid in order]
    vsets = [(wid, verdicts_from_json(json.loads(state.outputs[wid].verdicts), wid)) for wid in order]
    merged = parallel.merge_runs(runs)
    state.merged_verdicts = parallel.merge_verdicts(vsets)
    state.workers = {
        wid: WorkerRun(device=state.outputs[wid].device, cases=[b.case_id for b in benchmarks(run)])
        for wid, run in runs
    }
    merged["perfgate"]["workers"] = {wid: w.to_json() for wid, w in state.workers.items()}
    state.merged = merged
    written = benchmark_adapter.write_requested(config, merged)
    if written is not None:
        state.lines.append(f"perfgate: the {len(order)} workers' results merged into {written}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Before perfgate.plugin.hooks's, which builds the run's outcome from the merged run.
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None or not _controller(config) or not state.outputs:
        return
    try:
        _merge_workers(config, state)
    except parallel.MergeError as exc:
        state.lines.append(f"perfgate: cannot merge the workers' results: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_merged_run(config: pytest.Config) -> parallel.MergedRun | None:
    """The controller's run is the workers' runs, merged (a worker lost makes it unrecordable)."""
    state = config.stash.get(_STATE, None)
    if state is None or state.merged is None or state.merged_verdicts is None:
        return None
    return parallel.MergedRun(
        data=state.merged, verdicts=state.merged_verdicts, not_recordable="; ".join(state.lost) or None
    )


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_run_outcome(config: pytest.Config, outcome: RunOutcome) -> None:
    """A worker ships its outcome to the controller; a shard writes its files."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _worker(config):
        _ship(config, outcome)
        return
    state.lines += state.lost
    if state.spec is not None:
        _write_shard(config, state, outcome)


def _ship(config: pytest.Config, outcome: RunOutcome) -> None:
    """A worker's results and verdicts to the controller, as JSON text (execnet carries only
    built-in types; the results hold whatever pytest-benchmark's machine_info does)."""
    from perfgate.gate.verdict_file import verdicts_json
    from perfgate.plugin.benchmark_adapter import run_json

    if not outcome.records and not outcome.verdicts.skipped and not outcome.verdicts.verdicts:
        return  # a worker that ran no case (more workers than groups)
    config.workeroutput["perfgate"] = Shipped(  # type: ignore[attr-defined]
        results=json.dumps(run_json(config), default=str),
        verdicts=json.dumps(verdicts_json(outcome.verdicts, outcome.fingerprint), default=str),
        device=session.config.device if (session := _session(config)) is not None else "?",
    ).to_json()


def _write_shard(config: pytest.Config, state: ParallelState, outcome: RunOutcome) -> None:
    """The shard's results and verdicts, written even when it measured nothing, so that
    `perfgate aggregate` can tell a shard without cases from a missing one."""
    from perfgate import files
    from perfgate.gate.verdict_file import verdicts_json
    from perfgate.plugin.benchmark_adapter import run_json

    assert state.spec is not None
    data = state.merged if state.merged is not None else run_json(config)
    data.setdefault("perfgate", {})["shard"] = state.block
    results = files.write_json(state.shard_dir / state.spec.results_name, data)
    files.write_json(state.shard_dir / state.spec.verdicts_name, verdicts_json(outcome.verdicts, outcome.fingerprint))
    n = len(state.block["cases"]) if state.block else 0
    state.lines.append(
        f"perfgate: shard {state.spec.label}: {n} of {state.block['selected'] if state.block else '?'} case(s); "
        f"results and verdicts in {results.parent} (merge the shards with: perfgate aggregate {results.parent})"
    )


# ----------------------------------------------------------------------------- workers


def pytest_sessionstart(session: pytest.Session) -> None:
    """In a worker, pytest-benchmark takes the samples again (see the module's docstring); the
    controller writes what the user asked pytest-benchmark to write, from the merged run."""
    from perfgate.plugin import benchmark_adapter

    config = session.config
    state = config.stash.get(_STATE, None)
    if _controller(config) and state is not None and benchmark_adapter.drop_compare(config):
        # The controller measures nothing, so pytest-benchmark would print no compared table.
        state.lines.append(
            "perfgate: --benchmark-compare has no table under xdist (pytest-benchmark shows none for the "
            "workers' cases); perfgate's tables and the gate's verdicts above cover them"
        )
    if _worker(config):
        benchmark_adapter.enable_in_worker(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or _worker(config):
        return
    if state.merged is not None:
        shown = ", ".join(f"{wid} on {w.device} ({len(w.cases)} case(s))" for wid, w in state.workers.items())
        terminalreporter.write_line(f"perfgate: {len(state.workers)} xdist worker(s) measured: {shown}")
    for line in state.lines:
        terminalreporter.write_line(line)
