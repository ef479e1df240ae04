"""pytest plugin for runs under torchrun: options and hooks only; the logic is perfgate.dist.ranks.

    torchrun --standalone --nproc-per-node N -m pytest benchmarks -p perfgate.plugin.torchrun ...

With WORLD_SIZE > 1 each rank joins the process group (NCCL for CUDA, gloo for the CPU), takes
its own GPU (cuda:LOCAL_RANK) or its share of the CPU cores, measures every selected case with
fixed round counts (ranks must agree on the number of collective steps), and writes its results to
`<dist-dir>/rank<R>.json`. At session finish the ranks send their results to rank 0, which writes
`<dist-dir>/aggregated.json` (and --benchmark-json / --perfgate-record / --benchmark-save targets,
which then hold the aggregate, not one rank) and prints the rank table. Without torchrun, or with
one rank, the plugin does nothing.

It adapts perfgate.plugin.hooks through the hooks that plugin declares (perfgate.plugin.hookspecs): the rank's
device, and the run configuration's lockstep rules, policy, record label and verdicts file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfgate import files, results
from perfgate.dist import ranks as pd
from perfgate.measure import topology as topo_mod
from perfgate.output import ranks as ranks_text

if TYPE_CHECKING:
    from perfgate.run.config import RunConfig

_STATE = pytest.StashKey["DistState"]()


@dataclass(kw_only=True)
class DistState:
    topo: topo_mod.Topology
    folder: Path
    device: str
    backend: str
    num_threads: int
    created_group: bool
    straggler_pct: float
    user_json: Path | None = None  # --benchmark-json given by the user: gets the aggregate
    record: str | None = None  # --perfgate-record label: rank 0 records the aggregate (its session does not)
    save: str | None = None  # --benchmark-save / --benchmark-autosave name: rank 0 saves the aggregate
    lines: list[str] = field(default_factory=list)  # rank 0's terminal summary
    record_failed: bool = False  # asked to record, and the baseline could not be written: fails the run


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("perfgate-dist", "perfgate: distributed runs under torchrun (-p perfgate.plugin.torchrun)")
    g.addoption(
        "--perfgate-dist-dir",
        default=None,
        metavar="DIR",
        help="where each rank writes rank<R>.json and rank 0 aggregated.json (default <rootdir>/.perfgate/dist)",
    )
    g.addoption(
        "--perfgate-straggler-pct",
        type=float,
        default=pd.DEFAULT_STRAGGLER_PCT,
        metavar="PCT",
        help="a rank whose median is more than PCT %% above the median of rank medians is a straggler "
        f"(default {pd.DEFAULT_STRAGGLER_PCT:g})",
    )
    g.addoption(
        "--perfgate-dist-rounds",
        type=int,
        default=None,
        metavar="N",
        help="timed rounds per case on every rank (default: the stop rule's bounds clipped to "
        f"{topo_mod.DEFAULT_LOCKSTEP_ROUNDS}; 5 with --perfgate-smoke)",
    )
    g.addoption(
        "--perfgate-dist-threads",
        type=int,
        default=None,
        metavar="N",
        help="intra-op CPU threads per rank (default: usable cores // ranks on this node, at least 1)",
    )


def _folder(config: pytest.Config) -> Path:
    value = config.getoption("perfgate_dist_dir")
    return Path(value) if value else Path(config.rootpath) / ".perfgate" / "dist"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before any pytest_configure (a historic hook, which cannot be wrapped): the process group,
    # the thread count (a fingerprint field) and pytest-benchmark's output paths must be set
    # before perfgate.plugin.hooks and pytest-benchmark read them.
    try:
        topo = topo_mod.topology()
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    if topo.distributed and not config.option.help:
        config.stash[_STATE] = _start(config, topo)


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_device(config: pytest.Config) -> str | None:
    state = config.stash.get(_STATE, None)
    return state.device if state is not None else None


@pytest.hookimpl(optionalhook=True)
def pytest_perfgate_run_config(config: pytest.Config, run_config: RunConfig) -> RunConfig | None:
    """Fixed rounds, no re-measurement, sibling load allowed; rank 0 records the aggregate, not
    its own run, and the other ranks write their verdicts beside their result files."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return None
    opts = run_config.run_options
    try:
        stop, warmup = topo_mod.lockstep_rules(opts.stop, opts.warmup, config.getoption("perfgate_dist_rounds"))
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: --perfgate-dist-rounds: {exc}") from None
    siblings = (state.topo.local_world_size - 1) * state.num_threads if state.device.startswith("cpu") else 0.0
    state.record = run_config.record_label
    return replace(
        run_config,
        run_options=replace(opts, stop=stop, warmup=warmup),
        policy=topo_mod.lockstep_policy(run_config.policy, siblings),
        record_label=None,
        verdict_file=(
            state.folder / f"verdicts.rank{state.topo.rank}.json" if state.topo.rank != 0 else run_config.verdict_file
        ),
    )


def _start(config: pytest.Config, topo: topo_mod.Topology) -> DistState:
    import torch
    import torch.distributed as dist

    from perfgate.measure.device import default_device

    rounds, threads, pct = (
        config.getoption(o) for o in ("perfgate_dist_rounds", "perfgate_dist_threads", "perfgate_straggler_pct")
    )
    for name, value, low in (
        ("--perfgate-dist-rounds", rounds, 1),
        ("--perfgate-dist-threads", threads, 1),
        ("--perfgate-straggler-pct", pct, 0),
    ):
        if value is not None and value < low:
            raise pytest.UsageError(f"perfgate: {name} {value:g} must be at least {low}")
    device = topo_mod.rank_device(config.getoption("perfgate_device", None) or default_device(), topo.local_rank)
    threads = threads or topo_mod.threads_per_rank(topo_mod.usable_cores(), topo.local_world_size)
    torch.set_num_threads(threads)
    created = topo_mod.init_process_group(device)
    folder = _folder(config)
    o = config.option
    state = DistState(
        topo=topo,
        folder=folder,
        device=device,
        backend=dist.get_backend(),
        num_threads=threads,
        created_group=created,
        straggler_pct=pct,
        user_json=getattr(o, "benchmark_json", None),
        save=getattr(o, "benchmark_save", None) or getattr(o, "benchmark_autosave", None),
    )
    # Each rank writes its own results; what the user asked to be written once gets the aggregate.
    o.benchmark_json = pd.rank_file(folder, topo.rank)
    o.benchmark_save = o.benchmark_autosave = None
    folder.mkdir(parents=True, exist_ok=True)
    if topo.rank == 0:  # a previous run's files must not pass for this run's
        for old in [*pd.rank_files(folder).values(), folder / pd.AGGREGATED_FILE]:
            old.unlink(missing_ok=True)
    else:
        o.verbose = min(o.verbose, 0) - 1  # -q: rank 0 reports for the job
        os.environ.pop("GITHUB_STEP_SUMMARY", None)  # one job summary, rank 0's
    dist.barrier()  # no rank writes its file before rank 0 cleared the old ones
    return state


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list[Any], output_json: dict[str, Any]) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    block = pd.rank_block(state.topo, backend=state.backend, num_threads=state.num_threads, device=state.device)
    output_json["perfgate_dist"] = block.to_json()
    entries = results.benchmarks(output_json)
    for b in entries:  # the block's fields are record fields: each case says which rank measured it
        b.record = replace(b.record, **block.to_json())
    output_json.update(results.with_benchmarks(output_json, entries))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # pytest-benchmark wrote this rank's file in its sessionfinish wrapper, before this runs.
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    import json

    import torch.distributed as dist

    own_file = pd.rank_file(state.folder, state.topo.rank)
    own = json.loads(own_file.read_text(encoding="utf8")) if own_file.is_file() else None
    gathered: list[Any] | None = [None] * state.topo.world_size if state.topo.rank == 0 else None
    try:
        dist.gather_object((int(exitstatus), own), gathered, dst=0)
    except (RuntimeError, ValueError) as exc:  # a peer died: aggregate what reached the folder
        gathered = None
        state.lines.append(
            f"perfgate: gathering the ranks' results failed ({str(exc).splitlines()[0]}); "
            f"aggregating the files in {state.folder}"
        )
    if state.topo.rank != 0:
        return
    _aggregate(config, state, gathered)
    if state.record_failed:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _aggregate(config: pytest.Config, state: DistState, gathered: list[Any] | None) -> None:
    from perfgate.gate import store
    from perfgate.plugin import benchmark_adapter
    from perfgate.plugin.hooks import session_of

    statuses: dict[int, int] = {}
    if gathered is not None:
        statuses = {r: g[0] for r, g in enumerate(gathered) if g is not None}
        runs = {r: g[1] for r, g in enumerate(gathered) if g is not None and g[1] is not None}
        for r, d in runs.items():  # ranks of other nodes wrote to their own disks
            if not pd.rank_file(state.folder, r).is_file():
                store.atomic_write_json(pd.rank_file(state.folder, r), d)
    else:
        try:
            runs = pd.load_rank_runs(state.folder)
        except pd.AggregateError as exc:
            state.lines.append(f"perfgate: {exc}")
            return
    if not runs:
        state.lines.append("perfgate: no rank produced results; nothing to aggregate")
        return
    try:
        agg = pd.aggregate(runs, threshold_pct=state.straggler_pct, world_size=state.topo.world_size)
    except pd.AggregateError as exc:
        state.lines.append(f"perfgate: cannot aggregate: {exc}")
        return
    out = store.atomic_write_json(state.folder / pd.AGGREGATED_FILE, agg)
    state.lines += ranks_text.summary_lines(agg, out)
    if state.user_json:
        store.atomic_write_json(Path(state.user_json), agg)
        state.lines.append(f"perfgate: aggregated results written to {state.user_json}")
    session = session_of(config)
    if state.record and session is not None:
        refused = pd.record_refusal(statuses, state.topo.world_size)
        if refused:  # as in a single-process run: a failing run must not become the reference
            state.lines.append(f"perfgate: not recording a baseline: {refused}; fix it and record again")
        else:
            try:
                state.lines.append(
                    f"perfgate: recorded baseline {store.record(session.baseline_dir, agg, state.record)}"
                )
            except (OSError, store.BaselineError) as exc:  # the aggregate is kept already: `out`
                state.record_failed = True
                state.lines.append(store.unrecorded(session.baseline_dir, state.record, files.first_line(exc), out))
    if state.save:
        benchmark_adapter.save(config, agg, state.save)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if state.topo.rank != 0:
        terminalreporter.write_line(
            f"perfgate: rank {state.topo.rank} of {state.topo.world_size} wrote "
            f"{pd.rank_file(state.folder, state.topo.rank)}"
        )
        return
    terminalreporter.section("perfgate: ranks")
    for line in state.lines:
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and state.created_group:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
