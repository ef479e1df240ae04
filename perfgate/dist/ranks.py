"""Distributed runs: per-rank result files and their aggregation into one pytest-benchmark/perfgate
run (the rank topology, process group and lockstep rules are in perfgate.measure.topology, the
data-parallel step kinds in perfgate.cases.steps).

Under `torchrun --nproc-per-node N -m pytest benchmarks -p perfgate.plugin.torchrun` every rank
measures the same cases on its own device and writes `rank<R>.json`; rank 0 aggregates them with
`aggregate()`: per case the slowest rank's latency (its stats and raw samples, so the gate tests
the worst rank), min/max/mean of every numeric metric across ranks, a rank-by-rank summary, the
stragglers, and for data-parallel step kinds the throughput summed over ranks. The result is an
ordinary perfgate result file: `perfgate compare`, `history` and `report` read it like any run.

The backend follows the device: NCCL for CUDA, gloo for the CPU; the code path is the same.
"""

from __future__ import annotations

import copy
import json
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.cases.workload import DATA_PARALLEL_STEP_KINDS
from perfgate.measure.topology import Topology
from perfgate.record import (
    DEFAULT_STRAGGLER_PCT,
    CaseRecord,
    RankBlock,
    RankSummary,
    Straggler,
    speedup,
    speedup_basis,
)
from perfgate.results import Benchmark, Distributed, RunInfo, benchmarks, with_benchmarks

# Step kinds (perfgate.cases.steps) whose ranks each process their own data: throughput sums over ranks,
# and outside torchrun they are selected only by name.
RANK_FILE = re.compile(r"^rank(\d+)\.json$")
AGGREGATED_FILE = "aggregated.json"
# extra_info keys that identify a rank or describe the case's set-up: not metrics to aggregate.
_NOT_METRICS = frozenset(
    {"rank", "local_rank", "world_size", "local_world_size", "options", "tolerance", "items_per_step"}
)


class AggregateError(ValueError):
    """Per-rank results that cannot be aggregated; the message names the file and the fix."""


# ----------------------------------------------------------------------------- per-rank files


def rank_file(folder: str | os.PathLike[str], rank: int) -> Path:
    return Path(folder) / f"rank{rank}.json"


def rank_files(folder: str | os.PathLike[str]) -> dict[int, Path]:
    """rank -> rank<R>.json in `folder`."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    found = {}
    for p in folder.iterdir():
        m = RANK_FILE.match(p.name)
        if m:
            found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def rank_block(t: Topology, *, backend: str, num_threads: int, device: str) -> RankBlock:
    """What a rank records about itself, top-level (`perfgate_dist`) and in each case's record."""
    import socket

    return RankBlock(
        rank=t.rank,
        world_size=t.world_size,
        local_rank=t.local_rank,
        local_world_size=t.local_world_size,
        dist_backend=backend,
        num_threads=num_threads,
        host=socket.gethostname(),
        rank_device=device,
    )


def run_rank(data: Mapping[str, Any], fallback: int | None = None) -> int:
    """The rank a result file belongs to: its `perfgate_dist` block, its entries, else `fallback`."""
    block = RunInfo.from_json(data).rank
    if block is not None and isinstance(block.rank, int):
        return block.rank
    ranks = {b.record.rank for b in benchmarks(data)}
    ranks.discard(None)
    if len(ranks) == 1 and isinstance(next(iter(ranks)), int):
        return int(next(iter(ranks)))
    if fallback is None:
        raise AggregateError("result file names no rank (no perfgate_dist block, no extra_info.rank)")
    return fallback


def load_rank_runs(folder: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """rank -> validated result of every rank<R>.json in `folder` (AggregateError when unusable)."""
    from perfgate.gate import store

    files = rank_files(folder)
    if not files:
        raise AggregateError(
            f"{folder}: no rank<R>.json files; run `torchrun ... -m pytest benchmarks -p perfgate.plugin.torchrun` "
            f"(they go to --perfgate-dist-dir) or pass the folder holding them"
        )
    runs: dict[int, dict[str, Any]] = {}
    for file_rank, path in files.items():
        try:
            data = store.load(
                path,
                remedy="run the torchrun job again (`-p perfgate.plugin.torchrun`: each rank writes its "
                "rank<R>.json to --perfgate-dist-dir)",
            )
        except store.BaselineError as exc:
            raise AggregateError(str(exc)) from None
        rank = run_rank(data, fallback=file_rank)
        if rank != file_rank:
            raise AggregateError(
                f"{path}: holds rank {rank}'s results but is named for rank {file_rank}; rename it rank{rank}.json"
            )
        runs[rank] = data
    blocks = {r: RunInfo.from_json(d).rank for r, d in runs.items()}
    worlds = {r: b.world_size for r, b in blocks.items() if b is not None}
    if len(set(worlds.values())) > 1:
        raise AggregateError(
            f"{folder}: rank files of runs with different world sizes ({worlds}); remove the stale rank<R>.json files"
        )
    if worlds:
        world = next(iter(worlds.values()))
        extra = [r for r in runs if r >= world]
        if extra:
            raise AggregateError(
                f"{rank_file(folder, extra[0])}: rank {extra[0]} is outside the world size {world} of the other "
                "files; remove it"
            )
    return runs


def record_refusal(exit_statuses: Mapping[int, int], world_size: int) -> str | None:
    """Why the aggregate of a run must not be recorded as a baseline (None: it may): every rank
    must have reported and passed."""
    unknown = [r for r in range(world_size) if r not in exit_statuses]
    if unknown:
        return f"no exit status from rank(s) {', '.join(map(str, unknown))}"
    failed = {r: s for r, s in sorted(exit_statuses.items()) if s != 0}
    if failed:
        return "the run failed on " + ", ".join(f"rank {r} (exit {s})" for r, s in failed.items())
    return None


# ----------------------------------------------------------------------------- aggregation


def numeric_leaves(info: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric scalar of extra_info as a dotted path (throughput.frames, accuracy.rel_l2)."""
    out: dict[str, float] = {}
    for k, v in info.items():
        if not prefix and k in _NOT_METRICS:
            continue
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[key] = float(v)
        elif isinstance(v, Mapping):
            out.update(numeric_leaves(v, f"{key}."))
    return out


def across_ranks(infos: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """min, max and mean over ranks of each numeric metric (over the ranks that have it)."""
    leaves = [numeric_leaves(i) for i in infos]
    keys = list(dict.fromkeys(k for lv in leaves for k in lv))
    out = {}
    for k in keys:
        vals = [lv[k] for lv in leaves if k in lv]
        out[k] = {"min": min(vals), "max": max(vals), "mean": statistics.fmean(vals)}
    return out


def find_stragglers(medians_ms: Mapping[int, float], threshold_pct: float = DEFAULT_STRAGGLER_PCT) -> list[Straggler]:
    """Ranks whose median is more than `threshold_pct` % above the median of the rank medians."""
    if threshold_pct < 0:
        raise ValueError(f"straggler threshold must not be negative, got {threshold_pct}")
    if len(medians_ms) < 2:
        return []
    ref = statistics.median(medians_ms.values())
    out = []
    for rank, med in sorted(medians_ms.items()):
        if ref > 0 and med > ref * (1.0 + threshold_pct / 100.0):
            out.append(
                Straggler(rank=rank, median_ms=med, median_of_ranks_ms=ref, excess_pct=(med / ref - 1.0) * 100.0)
            )
    return out


# What a rank's summary on the aggregate keeps of its record.
_RANK_FIGURES = (
    "mean_ms",
    "min_ms",
    "max_ms",
    "p90_ms",
    "std_ms",
    "rounds",
    "peak_mem_mib",
    "first_call_s",
    "contention_cores",
    "fps",
    "device",
    "num_threads",
    "host",
    "unreliable",
)


def rank_summary(rank: int, entry: Benchmark) -> RankSummary:
    """The rank's median and the figures its record holds (RankSummary writes the ones its record
    always writes even when None, as the record does)."""
    rec = entry.record
    figures = {k: getattr(rec, k) for k in _RANK_FIGURES}
    return RankSummary(
        rank=rank, median_ms=median_ms(entry), **figures, throughput=dict(rec.throughput), accuracy=dict(rec.accuracy)
    )


def _worst_accuracy(accs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The worst value of each accuracy figure over the ranks (errors up, similarities down)."""
    lower_is_worse = {"finite", "cosine", "psnr_db"}
    keys = list(dict.fromkeys(k for a in accs for k in a))
    out = {}
    for k in keys:
        vals = [a[k] for a in accs if isinstance(a.get(k), (int, float))]
        if vals:
            out[k] = min(vals) if k in lower_is_worse else max(vals)
    return out


def median_ms(entry: Benchmark) -> float:
    """A benchmark entry's median in ms: perfgate's record, else pytest-benchmark's stats; 0 without either."""
    return entry.median_ms or 0.0


def _sum(values: Sequence[Mapping[str, Any]], unit: str) -> float:
    return sum(float(v.get(unit, 0.0)) for v in values)


def aggregate_case(entries: Mapping[int, Benchmark], *, world_size: int, threshold_pct: float) -> Benchmark:
    """One benchmark entry from the same case measured on several ranks (rank -> entry)."""
    recs = {r: e.record for r, e in sorted(entries.items())}
    medians = {r: median_ms(e) for r, e in sorted(entries.items())}
    slowest = max(medians, key=lambda r: (medians[r], -r))
    out = copy.deepcopy(entries[slowest])
    rec = out.record
    data_parallel = rec.step_kind in DATA_PARALLEL_STEP_KINDS
    agg: dict[str, Any] = {"rank": None, "local_rank": None, "host": None, "rank_device": None}
    if rec.device:
        agg["device"] = str(rec.device).split(":", 1)[0]  # cuda:3 -> cuda, as in a one-process run
    agg |= {"slowest_rank": slowest, "world_size": world_size}
    missing = [r for r in range(world_size) if r not in recs]
    if missing:
        agg["missing_ranks"] = missing
    agg["throughput_aggregation"] = "sum" if data_parallel else "slowest"
    if data_parallel:
        units = list(dict.fromkeys(u for r in recs.values() for u in r.throughput))
        summed = {u: _sum([r.throughput for r in recs.values()], u) for u in units}
        agg["throughput"] = summed
        if rec.items_per_step:
            per_step = [r.items_per_step for r in recs.values()]
            agg["items_per_step"] = {u: _sum(per_step, u) for u in rec.items_per_step}
        if "frames" in summed:
            agg["fps"] = summed["frames"]
    # The fullest device and the busiest neighbourhood decide.
    agg["peak_mem_mib"] = _max([r.peak_mem_mib for r in recs.values()], rec.peak_mem_mib)
    agg["reserved_mem_mib"] = _max([r.reserved_mem_mib for r in recs.values()], rec.reserved_mem_mib)
    agg["contention_cores"] = _max([r.contention_cores for r in recs.values()], rec.contention_cores)
    agg["accuracy"] = _worst_accuracy([r.accuracy for r in recs.values()])
    unreliable = [f"rank {r}: {x.unreliable}" for r, x in recs.items() if x.unreliable]
    if unreliable:
        agg["unreliable"] = "; ".join(unreliable)
    agg["across_ranks"] = across_ranks([r.to_extra_info() for r in recs.values()])
    agg["ranks"] = [rank_summary(r, entries[r]) for r in recs]
    agg["stragglers"] = find_stragglers(medians, threshold_pct)
    agg["straggler_threshold_pct"] = threshold_pct
    out.record = replace(rec, **agg)
    return out


def _max(values: Sequence[Any], default: Any) -> Any:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(nums) if nums else default


def _case_group(rec: CaseRecord) -> tuple:
    return (rec.model, rec.size, json.dumps(rec.options or {}, sort_keys=True, default=str))


def _respeed(entries: list[Benchmark]) -> None:
    """Speedups over the eager baseline from the aggregated (slowest-rank) figures, by the one rule
    (perfgate.record.speedup, on the record's own basis): across ranks, the slowest rank's time is
    the step's."""
    # The median the aggregate gates on (pytest-benchmark's where an entry has no perfgate median).
    timed = [replace(b.record, median_ms=median_ms(b)) for b in entries]
    eager = {_case_group(t): t for t in timed if t.variant == "baseline"}
    for b, t in zip(entries, timed):
        base = eager.get(_case_group(t))
        value = speedup(base, t) if base is not None and t.model else None
        if value is not None:
            b.record = replace(b.record, speedup=value, speedup_basis=speedup_basis(t))


def aggregate(
    runs: Mapping[int, Mapping[str, Any]],
    *,
    threshold_pct: float = DEFAULT_STRAGGLER_PCT,
    world_size: int | None = None,
) -> dict[str, Any]:
    """One perfgate result from per-rank results (rank -> pytest-benchmark JSON with a perfgate block).

    The top level (machine, commit, fingerprint) is the lowest rank's; `perfgate.dist.ranks`
    says how many ranks contributed. Cases keep the order the lowest rank ran them in.
    """
    if not runs:
        raise AggregateError("no per-rank results to aggregate")
    if threshold_pct < 0:
        raise AggregateError(f"straggler threshold {threshold_pct} must not be negative")
    ranks = sorted(runs)
    infos = {r: RunInfo.from_json(runs[r]) for r in ranks}
    blocks = {r: i.rank for r, i in infos.items() if i.rank is not None}
    declared = {b.world_size for b in blocks.values() if isinstance(b.world_size, int)}
    if world_size is not None and declared and declared != {world_size}:
        raise AggregateError(
            f"world size {world_size} given, but the rank files were written by a run of {sorted(declared)} ranks"
        )
    world = world_size or max([*declared, ranks[-1] + 1])
    if ranks[-1] >= world:
        raise AggregateError(f"rank {ranks[-1]} is outside the world size {world}")
    first = runs[ranks[0]]
    by_case: dict[str, dict[int, Benchmark]] = {}
    for r in ranks:
        for b in benchmarks(runs[r]):
            by_case.setdefault(b.fullname, {})[r] = b
    entries = [aggregate_case(e, world_size=world, threshold_pct=threshold_pct) for e in by_case.values()]
    _respeed(entries)
    out = copy.deepcopy(with_benchmarks({k: v for k, v in first.items() if k != "perfgate_dist"}, entries))
    block = out.setdefault("perfgate", {})
    fp_ids = {r: i.fingerprint_id for r, i in infos.items()}
    if isinstance(block.get("fingerprint"), dict):
        block["fingerprint"]["world_size"] = world  # as each rank keyed its own (WORLD_SIZE), here from the ranks
    block["distributed"] = Distributed(
        world_size=world,
        ranks=ranks,
        missing_ranks=[r for r in range(world) if r not in runs],
        backend=next((b.dist_backend for b in blocks.values() if b.dist_backend), None),
        hosts=sorted({b.host for b in blocks.values() if b.host}),
        straggler_threshold_pct=threshold_pct,
        stragglers=sum(len(b.record.stragglers or ()) for b in entries),
        fingerprint_ids=fp_ids if len(set(fp_ids.values())) > 1 else None,
        throughput="summed over ranks for data-parallel steps (" + ", ".join(sorted(DATA_PARALLEL_STEP_KINDS)) + "), "
        "the slowest rank's otherwise; latency is always the slowest rank's",
    ).to_json()
    return out
