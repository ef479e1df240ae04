"""Several processes, one run: pytest-xdist workers bound to one GPU each, and the merge of their
(or of `--perfgate-shard` runners') results into one result file and one verdict set.

The engine is pytest-xdist: `pytest benchmarks --perfgate-gpus auto` (`-n <GPUs> --dist loadgroup`).
perfgate only
- gives each worker its own device through xdist's `workerinput` (the controller hands out GPU
  indices in `pytest_configure_node`, so a replacement for a crashed worker gets the freed GPU
  back, whatever xdist names it);
- keeps a model's cases (its eager baseline and the variants whose in-run speedup divides by it)
  on one worker under `--dist loadgroup`, through xdist's `pytest_xdist_make_scheduler` hook: its
  own LoadGroupScheduling with the case's group (`scope_of`) as the scope. xdist's marks cannot
  carry it: 3.8.0 appends the `xdist_group` name to the node id, which pytest 9.2 no longer lets a
  plugin change, so the groups are silently ignored (pytest-dev/pytest-xdist#1386, open);
- refuses a set-up whose timings would be corrupted (`xdist_problem`): workers sharing a device
  contend for it, and on a 2-core CPU two workers slow each other by far more than any
  regression worth catching.
Workers ship their results and verdicts to the controller in `workeroutput` (xdist's documented
channel), where `merge_runs` / `merge_verdicts` make one run of them; `perfgate aggregate` merges
shard files with the same two functions.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate import gate
from perfgate.gate.verdict_file import VerdictSet
from perfgate.results import RunInfo, benchmarks, with_benchmarks

ALLOW_OPTION = "--perfgate-allow-shared-device"


@dataclass(frozen=True, kw_only=True)
class MergedRun:
    """A run that other processes measured (xdist workers), merged: the result file's content, the
    verdicts, and why it must not be recorded (a worker lost), if so."""

    data: dict[str, Any]
    verdicts: VerdictSet
    not_recordable: str | None = None


class MergeError(ValueError):
    """Parts that cannot make one run; the message names the parts and the fix."""


# ----------------------------------------------------------------------------- workers and devices


def group_name(case: Any) -> str:
    """The xdist group of a case: its id without the variant (model, size, options), the cases
    that share one eager baseline and so must run in one process."""
    return case.id[: -len(case.variant) - 1]


def case_id(nodeid: str) -> str:
    """The case id of a benchmark's node id (`...::test_step[<id>]`), else the node id."""
    m = re.search(r"\[([^\[\]]+)\]$", nodeid)
    return m.group(1) if m else nodeid


def scope_of(nodeid: str, groups: Mapping[str, str]) -> str | None:
    """The xdist scheduling scope of a node: its case's group (`groups`: case id -> group), None
    for a test that is no case of this run."""
    group = groups.get(case_id(nodeid))
    return f"perfgate:{group}" if group is not None else None


def gpu_workers(text: str, gpu_count: int, numprocesses: object) -> int:
    """The workers `--perfgate-gpus N|auto` asks for (auto: one per GPU here); ValueError naming
    the option and the fix for a bad value, no GPU, or a different `-n` beside it."""
    option = "--perfgate-gpus"
    if text.strip() == "auto":
        if gpu_count < 1:
            raise ValueError(f"{option} auto: no GPU here (torch.cuda.device_count() is 0); run without it")
        n = gpu_count
    elif text.strip().isdigit() and int(text) >= 1:
        n = int(text)
    else:
        raise ValueError(f"{option} {text!r}: give the number of GPUs (one worker each) or auto, e.g. {option} 8")
    if numprocesses not in (None, n):
        raise ValueError(f"{option} {text} with -n {numprocesses}: give one of them ({option} sets -n {n})")
    return n


def worker_device(requested: str, gpu_count: int, in_use: Mapping[int, int]) -> str:
    """The device of a new worker: `cpu` or an explicit `cuda:N` as requested; for a bare `cuda`
    the GPU with the fewest workers (`in_use`: index -> workers), the lowest index first."""
    if requested != "cuda" or gpu_count < 1:
        return requested
    index = min(range(gpu_count), key=lambda i: (in_use.get(i, 0), i))
    return f"cuda:{index}"


def xdist_problem(*, requested: str, workers: int, gpu_count: int, dist: str, allow_shared: bool) -> str | None:
    """Why `-n workers --dist dist` must not measure on `requested` (None: it may), one line with the fix."""
    if dist != "loadgroup":
        return (
            f"--dist {dist} can put a model's eager baseline and its variants on different workers, so their "
            "speedups would not be measured; add --dist loadgroup"
        )
    if workers < 2 or allow_shared:
        return None
    if requested == "cpu":
        return (
            f"-n {workers} on the CPU: the workers would share its cores and every timing would measure their "
            f"contention; run one process (no -n), or pass {ALLOW_OPTION} to test the plumbing only"
        )
    if requested.startswith("cuda:"):
        return (
            f"-n {workers} with --perfgate-device {requested}: every worker would measure on that one GPU; "
            "pass --perfgate-device cuda (each worker takes a GPU of its own)"
        )
    if workers > gpu_count:
        return (
            f"-n {workers} but {gpu_count} GPU(s) here: workers would share a GPU and contend for it; pass "
            f"-n {gpu_count} (one worker per GPU)"
        )
    return None


# ----------------------------------------------------------------------------- merging


def _same(parts: Sequence[tuple[str, Any]], what: str, fix: str) -> Any:
    values = {label: value for label, value in parts}
    distinct = list(dict.fromkeys(v for v in values.values() if v is not None))
    if len(distinct) > 1:
        shown = "; ".join(f"{label}: {value}" for label, value in values.items())
        raise MergeError(f"the parts have different {what} ({shown}); {fix}")
    return distinct[0] if distinct else None


def merge_runs(parts: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One result file from the result files of disjoint parts of one run, as (label, data) pairs:
    the first part's machine, commit and perfgate block, every part's cases in part order, and
    `perfgate.merged_from` naming the parts. MergeError when the parts ran on different
    fingerprints or commits, or a case is in two parts."""
    if not parts:
        raise MergeError("no results to merge")
    _same(
        [(label, (d.get("perfgate") or {}).get("fingerprint_id")) for label, d in parts],
        "machine fingerprints",
        "merge only parts measured on one kind of machine (perfgate doctor prints the fingerprint)",
    )
    _same(
        [(label, RunInfo.from_json(d).commit) for label, d in parts],
        "commits",
        "merge only parts of one run of one commit",
    )
    seen: dict[str, str] = {}
    entries = []
    for label, data in parts:
        for b in benchmarks(data):
            name = b.fullname
            if name in seen:
                raise MergeError(
                    f"{name} is in both {seen[name]} and {label}; the parts must be disjoint "
                    "(shards of one --perfgate-shard I/N split, each I once)"
                )
            seen[name] = label
            entries.append(b)
    out = copy.deepcopy(with_benchmarks(parts[0][1], entries))
    out.setdefault("perfgate", {})["merged_from"] = [label for label, _ in parts]
    return out


def merge_verdicts(parts: Sequence[tuple[str, VerdictSet]]) -> VerdictSet:
    """One verdict set from the parts' (label, VerdictSet): every verdict, every skip, the notices
    once each. MergeError when the parts ran on different fingerprints or only some gated."""
    if not parts:
        raise MergeError("no verdicts to merge")
    fp = _same(
        [(label, vs.fingerprint_id) for label, vs in parts],
        "machine fingerprints",
        "merge only parts measured on one kind of machine",
    )
    gated = _same(
        [(label, vs.gate_enabled) for label, vs in parts],
        "gate settings (--perfgate-no-gate in some only)",
        "run every part with the same options",
    )
    verdicts = [v for _, vs in parts for v in vs.verdicts]
    skipped: dict[str, str] = {}
    for _, vs in parts:
        skipped.update(vs.skipped)
    notices = tuple(dict.fromkeys(n for _, vs in parts for n in vs.notices))
    return VerdictSet(
        gate.sort_verdicts(verdicts),
        skipped,
        fp,
        gate_enabled=gated is not False,
        fail_on_improvement=any(vs.fail_on_improvement for _, vs in parts),
        notices=notices,
    )
