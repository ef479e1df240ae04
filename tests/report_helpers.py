"""Helpers of the report tests: the real run's file as if made at other commits, the page rendered
from files, a section of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdict_file import VerdictSet
from perfgate.history.runs import load_run
from perfgate.output import html
from perfgate.output.report_data import history_for
from perfgate.record import CaseRecord

CASE = "benchmarks/test_models.py::test_step[{}]"


def day(d: int) -> str:
    return f"2026-11-{d:02d}T00:00:00+00:00"


def at_commit(
    data: dict[str, Any],
    commit: str,
    when: str,
    *,
    scale: float = 1.0,
    dirty: bool = False,
    drop: tuple[str, ...] = (),
    contended: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The real run as if made at another commit and time, its medians (ms and step/reference
    ratios) times `scale`, the variants in `drop` left out, those in `contended` measured while
    other processes used 1.5 cores: 5x slower and flagged unreliable by the gate's own rule, the
    others reliable."""
    out = copy.deepcopy(data)
    out["commit_info"].update(id=commit, time=when, author_time=when, dirty=dirty)
    out["datetime"] = when
    out["perfgate"]["commit"], out["perfgate"]["recorded_at"] = commit, when
    out["benchmarks"] = [b for b in out["benchmarks"] if b["extra_info"]["variant"] not in drop]
    for b in out["benchmarks"]:
        info = b["extra_info"]
        busy = 5.0 if info["variant"] in contended else 1.0
        info["median_ms"] *= scale * busy
        info["normalised_median"] *= scale * busy
        # The others as if measured on a quiet machine (the real run's may have been contended).
        info["contention_cores"] = 1.5 if busy > 1 else 0.0
        info["unreliable"] = gate.unreliable_reason(CaseRecord.from_extra_info(info), GateSettings())
    return out


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def info(data: dict[str, Any], case: str) -> dict[str, Any]:
    return next(b["extra_info"] for b in data["benchmarks"] if b["name"] == f"test_step[{case}]")


def render(saved: Path, tonight: dict[str, Any], verdicts: VerdictSet | None, with_history: bool = True) -> str:
    runs = [load_run(write(saved / "tonight.json", tonight))]
    hist, skipped = (
        history_for(runs, baselines_root=saved / "baselines", storage_dirs=[]) if with_history else (None, [])
    )
    return html.benchmark_report(runs, verdicts, hist, unreadable=skipped)


def section(page: str, ident: str) -> str:
    return page.split(f'id="{ident}"')[1].split("</section>")[0]
