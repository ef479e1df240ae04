"""The torchrun aggregation in words: the rank-by-rank table, the stragglers, the summary lines
(perfgate.dist.ranks aggregates the rank files; this draws what it aggregated)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from typing import Any

from perfgate.output.text import fmt_g, text_table
from perfgate.record import DEFAULT_STRAGGLER_PCT
from perfgate.results import Distributed, RunInfo, benchmarks


def _throughput(unit: str | None, throughput: Mapping[str, Any] | None) -> str:
    thr = (throughput or {}).get(unit) if unit else None
    return f"{fmt_g(thr)} {unit}/s" if isinstance(thr, (int, float)) else "-"


RANK_TABLE_HEADERS = ("case", "rank", "median ms", "p90 ms", "throughput", "peak MiB", "vs median", "note")


def rank_rows(aggregated: Mapping[str, Any]) -> list[list[str]]:
    """Rows of the rank-by-rank table: each rank, then the aggregate as the gate sees it."""
    rows = []
    for b in benchmarks(aggregated):
        rec = b.record
        summaries = rec.ranks or []
        ref = statistics.median([s.median_ms for s in summaries]) if summaries else None
        strag = {s.rank for s in rec.stragglers or []}
        for s in summaries:
            vs = f"{(s.median_ms / ref - 1) * 100:+.1f}%" if ref else "-"
            note = ", ".join(
                n
                for n in (
                    "straggler" if s.rank in strag else "",
                    "slowest" if s.rank == rec.slowest_rank else "",
                    "unreliable" if s.unreliable else "",
                )
                if n
            )
            rows.append(
                [
                    b.case_id if s is summaries[0] else "",
                    str(s.rank),
                    fmt_g(s.median_ms),
                    fmt_g(s.p90_ms),
                    _throughput(rec.unit, s.throughput),
                    fmt_g(s.peak_mem_mib),
                    vs,
                    note,
                ]
            )
        how = "sum" if rec.throughput_aggregation == "sum" else "slowest"
        rows.append(
            [
                "",
                "all",
                fmt_g(rec.median_ms),
                fmt_g(rec.p90_ms),
                f"{_throughput(rec.unit, rec.throughput)} ({how})",
                fmt_g(rec.peak_mem_mib),
                "",
                f"latency: rank {rec.slowest_rank}",
            ]
        )
    return rows


def rank_table(aggregated: Mapping[str, Any]) -> list[str]:
    return text_table(RANK_TABLE_HEADERS, rank_rows(aggregated))


def straggler_lines(aggregated: Mapping[str, Any]) -> list[str]:
    lines = []
    for b in benchmarks(aggregated):
        threshold = b.record.straggler_threshold_pct
        for s in b.record.stragglers or []:
            lines.append(
                f"straggler: {b.case_id} rank {s.rank} median {s.median_ms:.4g} ms is "
                f"{s.excess_pct:.1f}% above the median of ranks ({s.median_of_ranks_ms:.4g} ms; "
                f"threshold {DEFAULT_STRAGGLER_PCT if threshold is None else threshold:g}%)"
            )
    return lines


def summary_lines(aggregated: Mapping[str, Any], path: str | os.PathLike[str] | None = None) -> list[str]:
    d = RunInfo.from_json(aggregated).distributed or Distributed(world_size=0, ranks=[])
    head = f"perfgate: aggregated {len(d.ranks)} of {d.world_size} ranks"
    if d.backend:
        head += f" ({d.backend})"
    if path is not None:
        head += f" into {path}"
    lines = [head]
    if d.missing_ranks:
        lines.append(f"perfgate: no results from rank(s) {', '.join(map(str, d.missing_ranks))}")
    if d.fingerprint_ids:
        lines.append(
            f"perfgate: ranks ran on different fingerprints {d.fingerprint_ids}; the file carries rank {min(d.ranks)}'s"
        )
    return [*lines, *rank_table(aggregated), *straggler_lines(aggregated)]
