"""Counts in a benchmark session: the configuration, the instruction pass before any case is timed,
the count fields of each record, and the portable baselines the counts are judged against.

    [tool.perfgate.counts]
    instructions = ["*-baseline"]  # globs on case ids counted under callgrind in a CPU run ([]: none)
    steps = 10                     # the counted window, after `warmup` uncounted steps
    warmup = 10
    ops = true                     # aten op calls (and CUDA kernel launches) per step in every case
    smoke = ["physicsnemo-*"]      # --perfgate-smoke counts the first case these globs select ([]: none)
    processes = [["owl-image-*"], ["*"]]  # valgrind processes side by side: a case goes to the first
                                   # whose globs match it (the last takes the rest); default one process

Without the table nothing is counted. The instruction pass runs once, before the first case is
timed (valgrind would load a 2-core machine's second core during the timings): one valgrind process
per `processes` group (side by side), then the same again for the suspects, the cases whose count
moved beyond the tolerance from their baseline, to confirm the change (two identical processes
further apart than `instructions_nondeterministic` mark the case nondeterministic). The groups are
fixed by globs, not by the selection's size: a case's count depends on the cases before it in its
process, so the recording and the judging runs must split the same way.

Portable baselines live in `<baselines>/counts/<key>.json`, the key naming what the counts depend on
(perfgate.counts.launcher.key), never the host: a machine of another CPU generation gates on the
committed counts when its virtual CPU, torch and Python are the same.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import platform
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfgate.counts import launcher as instr
from perfgate.gate.instructions import judge_instructions, spread
from perfgate.record import CaseRecord, InstructionCount, as_json

TABLE = "counts"
NO_COUNTS_ENV = "PERFGATE_NO_COUNTS"  # set: no instruction pass in this process (perfgate ab's later pairs)
_KEYS = {"instructions", "steps", "warmup", "ops", "smoke", "processes"}


class CountsConfigError(ValueError):
    """A bad [tool.perfgate.counts] table; the message names the key."""


@dataclass(frozen=True, kw_only=True)
class CountsConfig:
    instructions: tuple[str, ...] = ("*-baseline",)
    steps: int = instr.STEPS
    warmup: int = instr.WARMUP
    ops: bool = True
    smoke: tuple[str, ...] | None = None  # None: the first counted case
    processes: tuple[tuple[str, ...], ...] = (("*",),)  # globs per valgrind process (partition)


def parse(table: Mapping[str, Any], source: str = "[tool.perfgate]") -> CountsConfig | None:
    """The `counts` table of [tool.perfgate], or None when there is none (nothing is counted)."""
    raw = table.get(TABLE)
    if raw is None:
        return None
    where = f"{source} counts"
    if not isinstance(raw, Mapping):
        raise CountsConfigError(f"{where}: must be a table ([tool.perfgate.counts]), got {raw!r}")
    unknown = set(raw) - _KEYS
    if unknown:
        raise CountsConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(_KEYS))}")
    globs = raw.get("instructions", list(CountsConfig.instructions))
    if not isinstance(globs, list) or not all(isinstance(g, str) and g for g in globs):
        raise CountsConfigError(f'{where}: instructions must be a list of case globs ("*-baseline"), got {globs!r}')
    smoke = raw.get("smoke")
    if smoke is not None and (not isinstance(smoke, list) or not all(isinstance(g, str) and g for g in smoke)):
        raise CountsConfigError(f"{where}: smoke must be a list of case globs, got {smoke!r}")
    ints = {}
    for k, low in (("steps", 10), ("warmup", 1)):
        v = raw.get(k, getattr(CountsConfig(), k))
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            why = " (an every-Nth slowdown must not fall between the counted steps)" if k == "steps" else ""
            raise CountsConfigError(f"{where}: {k} must be a whole number >= {low}{why}, got {v!r}")
        ints[k] = v
    ops = raw.get("ops", True)
    if not isinstance(ops, bool):
        raise CountsConfigError(f"{where}: ops must be true or false, got {ops!r}")
    groups = raw.get("processes", [["*"]])
    if (
        not isinstance(groups, list)
        or not groups
        or not all(isinstance(g, list) and g and all(isinstance(x, str) and x for x in g) for g in groups)
    ):
        raise CountsConfigError(
            f"{where}: processes must be a list of lists of case globs, one per valgrind process "
            f'([["owl-image-*"], ["*"]]), got {groups!r}'
        )
    return CountsConfig(
        instructions=tuple(globs),
        ops=ops,
        smoke=None if smoke is None else tuple(smoke),
        processes=tuple(tuple(g) for g in groups),
        **ints,
    )


def partition(cases: Sequence[Any], groups: Sequence[Sequence[str]]) -> list[list[Any]]:
    """The cases split into the valgrind processes: each case goes to the first group whose globs
    match its id (the last group takes what none matches), in the selection's order. Depends only
    on each case's id, so a case runs after the same cases whatever else is selected."""
    import fnmatch

    out: list[list[Any]] = [[] for _ in groups]
    for c in cases:
        i = next((i for i, g in enumerate(groups) if any(fnmatch.fnmatchcase(c.id, x) for x in g)), len(groups) - 1)
        out[i].append(c)
    return [g for g in out if g]


def selected(case_ids: Sequence[str], config: CountsConfig, *, smoke: bool) -> list[str]:
    import fnmatch

    chosen = [c for c in case_ids if any(fnmatch.fnmatchcase(c, g) for g in config.instructions)]
    if not smoke:
        return chosen
    if config.smoke is not None:
        chosen = [c for c in chosen if any(fnmatch.fnmatchcase(c, g) for g in config.smoke)]
    return chosen[:1]  # one case proves the path: torch alone takes 15-35 s to load under valgrind


# --- the pass ---------------------------------------------------------------------------------


@dataclass(kw_only=True)
class SessionCounts:
    """What the session's records and verdicts read: each counted case's fields, or why it has none."""

    config: CountsConfig
    fields: dict[str, dict[str, Any]]  # case id -> record fields
    skipped: dict[str, str]  # case id -> why it was not counted
    portable: dict[str, Any] | None  # the portable baseline file's content (this run's key), or None
    portable_path: Path | None
    pass_: instr.CountPass | None = None
    not_counted: str | None = None  # why no CPU case of this process was counted (an xdist worker, ...)


def portable_path(baselines_root: Path, key: str) -> Path:
    return Path(baselines_root) / "counts" / f"{key}.json"


def load_portable(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CountsConfigError(f"{path}: unreadable count baseline ({exc}); restore it or record again") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), dict):
        raise CountsConfigError(f"{path}: no 'cases' table: not a perfgate count baseline; record again")
    for case_id, entry in data["cases"].items():
        problem = _entry_problem(entry)
        if problem is not None:
            raise CountsConfigError(
                f"{path}: case {case_id!r}: {problem}; restore it (git checkout -- {path}) or record again"
            )
    return data


def _entry_problem(entry: Any) -> str | None:
    """What makes one case's entry of a portable count baseline unusable, or None."""
    if not isinstance(entry, Mapping):
        return f"a {type(entry).__name__}, not a table of counts"
    rec = CaseRecord.from_extra_info(entry)
    per_step = rec.instructions_per_step
    if per_step is not None and (
        isinstance(per_step, bool)
        or not isinstance(per_step, int | float)
        or not math.isfinite(per_step)
        or per_step <= 0
    ):
        return f"instructions_per_step must be a positive number, got {per_step!r}"
    for name, value in (
        ("instructions_functions", rec.instructions_functions),
        ("aten_ops_per_step", rec.aten_ops_per_step),
    ):
        if value is not None and not isinstance(value, Mapping):
            return f"{name} must be a table, got {type(value).__name__}"
    return None


def _fields(p: instr.CountPass, case_id: str) -> dict[str, Any]:
    c = p.counts[case_id]
    return {
        "instructions_per_step": c.per_step,
        "instructions": p.block(case_id),
        "instructions_functions": c.functions,
    }


def run_pass(
    cases: Sequence[Any],
    config: CountsConfig,
    *,
    baseline_of: Any,
    tolerance_of: Any,
    baselines_root: Path,
    root: Path,
    registries: Sequence[str],
    model_files: Sequence[str],
    out_dir: Path,
    say: Any = print,
    run: instr.RunContext | None = None,
) -> SessionCounts:
    """Count `cases`, then recount the suspects. `baseline_of(case_id)` gives a baseline count
    per step (or None); `tolerance_of(case)` the instructions tolerance; `run`: the run counted for
    (its folder, sys.path, pytest arguments: the count process sees what the timed one does)."""
    groups = partition(cases, config.processes)
    say(
        f"perfgate: counting instructions of {len(cases)} case(s) under callgrind "
        + ("(one valgrind process)" if len(groups) == 1 else f"({len(groups)} valgrind processes side by side)")
    )
    lock, done = threading.Lock(), []

    def counted(case_id: str, wall_s: float | None) -> None:  # called from each process's waiting thread
        with lock:
            done.append(case_id)
            took = f", {wall_s:.0f} s" if wall_s is not None else ""
            say(f"perfgate:   counted {case_id} ({len(done)} of {len(cases)}{took})")

    kw = dict(root=root, registries=registries, model_files=model_files, steps=config.steps, warmup=config.warmup)
    kw["run"] = run
    first = instr.count_parallel(groups, out_dir=out_dir / "pass1", on_case=counted, **kw)
    fields = {cid: _fields(first, cid) for cid in first.counts}
    skipped = dict(first.errors)
    ppath = portable_path(baselines_root, first.key) if first.counts else None
    portable = load_portable(ppath) if ppath else None
    suspects = []
    for c in cases:
        if c.id not in first.counts:
            continue
        base = baseline_of(c.id)
        if base is None and portable:
            base = CaseRecord.from_extra_info(portable["cases"].get(c.id) or {}).instructions_per_step
        if base and abs(first.counts[c.id].per_step / base - 1) > tolerance_of(c):
            suspects.append(c)
    say(
        f"perfgate: counted {len(first.counts)} case(s) in {first.wall_s:.0f} s"
        + (f"; {len(skipped)} not counted" if skipped else "")
        + (f"; recounting to confirm {len(suspects)} suspected change(s) in a second process" if suspects else "")
    )
    if suspects:
        # The same cases in the same process and order up to its last suspect: a case's count moves
        # (0.16% on the tiny block) with what ran before it in the process (malloc's free lists,
        # type caches).
        again_groups = []
        for g in groups:
            mine = [g.index(c) for c in suspects if c in g]
            if mine:
                again_groups.append(g[: max(mine) + 1])
        second = instr.count_parallel(again_groups, out_dir=out_dir / "pass2", **kw)
        for c in suspects:
            block = first.block(c.id)
            if c.id in second.counts:
                again = second.counts[c.id].per_step
                block = replace(
                    block, repeat_per_step=again, spread_pct=spread(first.counts[c.id].per_step, again) * 100
                )
            else:
                block = replace(block, repeat_error=second.errors.get(c.id, "not recounted"))
            fields[c.id] = {**fields[c.id], "instructions": block}
    return SessionCounts(
        config=config, fields=fields, skipped=skipped, portable=portable, portable_path=ppath, pass_=first
    )


# --- records and verdicts ---------------------------------------------------------------------


def annotate(counts: SessionCounts | None, case: Any, record: CaseRecord, step: Any) -> CaseRecord:
    """The case's record with its counts: instructions (or why none), op and kernel counts."""
    if counts is None:
        return record
    added: dict[str, Any] = {}
    f = counts.fields.get(case.id)
    if f is not None:
        added |= f
    elif case.id in counts.skipped:
        added["instructions_skipped"] = counts.skipped[case.id]
    elif counts.not_counted and str(case.device).startswith("cpu"):
        added["instructions_skipped"] = counts.not_counted
    elif str(case.device).startswith("cpu"):
        added["instructions_skipped"] = "not selected for counting ([tool.perfgate.counts] instructions)"
    if counts.config.ops and step is not None:
        added |= _op_count_fields(counts, case, record, step)
    return replace(record, **added)


def _op_count_fields(counts: SessionCounts, case: Any, record: CaseRecord, step: Any) -> dict[str, Any]:
    """aten op calls, CUDA kernel launches and the GPU's busy time per step (torch profiler), with
    the host's share of the timed median beside it."""
    from perfgate.measure.op_counts import count_step

    oc = count_step(step, case.device, counts.config.steps)
    out: dict[str, Any] = {"aten_ops_per_step": oc.aten_ops_per_step}
    if oc.kernels_per_step is not None:
        out |= {"kernels_per_step": oc.kernels_per_step, "kernel_names_per_step": oc.kernel_names_per_step}
    if oc.device_ms_per_step is not None:
        from perfgate.measure.device_time import host_share

        out |= {"device_ms_per_step": oc.device_ms_per_step, "kernel_ms_per_step": oc.kernel_ms_per_step}
        if record.median_ms:
            share = host_share(record.median_ms, oc.device_ms_per_step)
            out |= {"host_ms_per_step": share.host_ms_per_step, "bound": share.bound}
    return out


def portable_record(counts: SessionCounts | None, case_id: str) -> CaseRecord | None:
    """The portable baseline's counts of a case as a record (counts fields only), or None."""
    if counts is None or not counts.portable:
        return None
    entry = counts.portable["cases"].get(case_id)
    if not entry:
        return None
    return CaseRecord.from_extra_info({k: v for k, v in entry.items() if k in _PORTABLE_FIELDS})


_PORTABLE_FIELDS = ("instructions_per_step", "instructions", "instructions_functions", "aten_ops_per_step")


def with_portable(counts: SessionCounts | None, case_id: str, baseline: CaseRecord | None) -> CaseRecord | None:
    """A host baseline without counts gets the portable baseline's (recorded elsewhere, same key)."""
    if baseline is None or baseline.instructions_per_step is not None:
        return baseline
    port = portable_record(counts, case_id)
    if port is None:
        return baseline
    return replace(baseline, **{k: getattr(port, k) for k in _PORTABLE_FIELDS})


def portable_verdicts(counts: SessionCounts | None, case_id: str, fullname: str, record: CaseRecord, settings: Any):
    """Without a host baseline the gate compares nothing; the counts still have theirs."""
    port = portable_record(counts, case_id)
    if port is None:
        return []
    v = judge_instructions(fullname, record, port, settings)
    return [replace(v, baseline_file=str(counts.portable_path))] if v is not None else []


def portable_content(
    key: str,
    determines: Mapping[str, Any],
    records: Mapping[str, CaseRecord],
    *,
    host_cpu: str,
    commit: str | None,
    cases: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The portable baseline file's content for `key`: each counted record's count fields (over
    `cases`, the entries an older file already held), with what the counts depend on
    (`determines`: virtual_cpu, torch, python, valgrind) and where they were recorded. One builder
    for `write_portable` (this run) and for the counts kept in the history store
    (`portable_from_run`)."""
    merged = dict(cases or {})
    for cid, rec in records.items():
        if rec.instructions_per_step is None:
            continue
        merged[cid] = {k: as_json(getattr(rec, k)) for k in _PORTABLE_FIELDS if getattr(rec, k) is not None}
    return {
        "schema": 1,
        "key": key,
        "what_determines_counts": {k: determines.get(k) for k in ("virtual_cpu", "torch", "python", "valgrind")},
        "recorded_on": {"host_cpu": host_cpu, "commit": commit},
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cases": dict(sorted(merged.items())),
    }


def portable_from_run(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A run's results (pytest-benchmark JSON, as read by perfgate.results) as portable baseline
    contents, one per count key its counted cases carry (a run counts under one key: usually one)."""
    from perfgate.results import RunInfo, case_records

    info = RunInfo.from_json(data)
    fp = info.fingerprint or {}
    by_key: dict[str, dict[str, CaseRecord]] = {}
    blocks: dict[str, InstructionCount] = {}
    for cid, rec in case_records(data).items():
        block = rec.instructions
        if rec.instructions_per_step is None or block is None or not isinstance(block.key, str):
            continue
        by_key.setdefault(block.key, {})[cid] = rec
        blocks.setdefault(block.key, block)
    return {
        k: portable_content(
            k,
            {
                "virtual_cpu": blocks[k].virtual_cpu,
                "valgrind": blocks[k].valgrind,
                "torch": fp.get("torch"),
                "python": fp.get("python"),
            },
            recs,
            host_cpu=str(fp.get("cpu_model") or "unknown"),
            commit=info.commit,
        )
        for k, recs in by_key.items()
    }


def write_portable(
    counts: SessionCounts, records: Mapping[str, CaseRecord], commit: str | None = None, *, into: Path | None = None
) -> Path | None:
    """Record this run's counts as the portable baseline of its key (merged into the file: cases
    not counted now keep their entries), atomically; `into`: another file to write the merged
    counts to (the portable file, where it can be read, still gives the other cases)."""
    from filelock import FileLock

    from perfgate.files import write_json

    p = counts.pass_
    if p is None or not counts.fields or counts.portable_path is None:
        return None
    determines = {
        "virtual_cpu": p.virtual_cpu,
        "torch": p.torch,
        "python": platform.python_version(),
        "valgrind": p.valgrind,
    }
    path = into or counts.portable_path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Read, merge and write under the folder's lock (as baselines are numbered, perfgate.gate.store):
    # two recordings at once each kept the other's cases out of the file.
    with FileLock(path.parent / ".record.lock"):
        try:
            old = load_portable(counts.portable_path) or {"cases": {}}
        except OSError:
            if into is None:
                raise
            old = {"cases": {}}  # the kept copy holds this run's cases at least
        data = portable_content(p.key, determines, records, host_cpu=_host_cpu(), commit=commit, cases=old["cases"])
        return write_json(path, data)


def write_portable_or_keep(
    counts: SessionCounts, records: Mapping[str, CaseRecord], kept_dir: Path
) -> tuple[Path | None, str | None]:
    """`write_portable`, or where the counts folder cannot be written (gone read-only or full since
    the run started), the merged counts written into `kept_dir` instead and one line saying why,
    where they are and how to finish: (the file, None) or (None, the line), as
    `perfgate.gate.store.record_or_keep` keeps a baseline. Nothing counted is lost."""
    from perfgate.files import write_or_keep

    target = counts.portable_path
    if target is None:  # nothing to write, and so nothing to fail on
        return None, None
    written, kept, why = write_or_keep(
        lambda: write_portable(counts, records), lambda: write_portable(counts, records, into=kept_dir / target.name)
    )
    if why is None:
        return written, None
    keep = (
        f"the counts are kept in {kept}: once the folder is writable, copy it over {target}"
        if kept is not None
        else "make the folder writable"
    )
    return (
        None,
        f"perfgate: the instruction counts could not be recorded in {target.parent} ({why}); {keep}, or record again",
    )


def _host_cpu() -> str:
    """The recording host's CPU (family/model), for the reader: it is not part of the key."""
    fam = model = name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "cpu family" and not fam:
                fam = v
            elif k == "model" and not model:
                model = v
            elif k == "model name" and not name:
                name = v
    except OSError:
        return platform.processor()
    return f"{name} (family {fam} model {model})"
