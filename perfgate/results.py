"""Reading result files: pytest-benchmark JSON (runs, baselines, aggregated ranks) and the gate's
verdicts file, with one-line errors naming the file and the problem.

`read_benchmark_json` is the one loader: `perfgate.history.runs.load_run` (history, reports) and
`perfgate.gate.store.load` (baselines, compare) both call it and add their own checks of the
entries on top. It tells a truncated file (a killed writer: every bracket so far matched, some
left open) from a corrupt one (mismatched brackets, stray text), so the fix it suggests fits.
`benchmarks()` types the entries (`Benchmark`: pytest-benchmark's name, fullname and stats,
perfgate's `CaseRecord`) and `RunInfo` the top level: this module and perfgate/record.py are the
only ones that read the file's keys (tests/test_architecture.py counts string-key reads elsewhere).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.record import CaseRecord, RankBlock, as_json


class ResultFileError(Exception):
    """A result file that cannot be used; str() is one line: '<path>: <problem>'.
    `unreadable` is True when the file could not be read at all (missing, no permission)."""

    def __init__(self, path: str | os.PathLike[str], problem: str, *, unreadable: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem, self.unreadable = str(path), problem, unreadable


# Raw sample arrays are most of a result file and most of its parse time (json makes a float
# object per number); history needs none of them, so they are emptied before parsing. Only
# arrays of number characters match, so no string can be cut.
_SAMPLE_ARRAYS = re.compile(r'"(samples_ms|reference_ms|data)":\s*\[[-0-9.eE+,\s]*\]')


def read_benchmark_json(path: str | os.PathLike[str], *, samples: bool = True) -> dict[str, Any]:
    """The parsed file, a dict with a 'benchmarks' list; ResultFileError otherwise. `samples=False`
    empties extra_info.samples_ms, reference_ms and stats.data (4-5x faster on real files)."""
    path = Path(path)
    text = _read_text(path)
    try:
        data = json.loads(text if samples else _SAMPLE_ARRAYS.sub(r'"\1": []', text))
    except json.JSONDecodeError:
        data = _parse(path, text)  # the whole text: its error position is the file's, not the lean copy's
    if not is_result_file(data):
        raise ResultFileError(path, "not a pytest-benchmark file (no 'benchmarks' list)")
    return data


def is_result_file(data: Any) -> bool:
    """Whether parsed JSON is a pytest-benchmark result file (a 'benchmarks' list)."""
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list)


# The most any result or verdicts file may hold, read or decompressed: the files come from
# artifacts and the data branch too (a GPU run's results.json with every sample: about 1 MB for 106
# cases), and a gzip bomb must not fill the memory.
MAX_READ_BYTES = 64 * 2**20


def _read_text(path: Path, max_bytes: int | None = None) -> str:
    max_bytes = MAX_READ_BYTES if max_bytes is None else max_bytes
    try:
        if path.name.endswith(".gz"):  # a thinned run of the history store (perfgate.history.store)
            with gzip.open(path, "rb") as f:
                raw = f.read(max_bytes + 1)
        else:
            with path.open("rb") as f:
                raw = f.read(max_bytes + 1)
        if len(raw) > max_bytes:
            what = "decompresses to" if path.name.endswith(".gz") else "holds"
            raise ResultFileError(path, f"{what} more than {max_bytes} bytes, the bound on a result file; not read")
        return raw.decode("utf8")
    except (EOFError, gzip.BadGzipFile, zlib.error):
        raise ResultFileError(path, "truncated or corrupt gzip") from None
    except OSError as exc:
        raise ResultFileError(path, f"cannot read ({exc.strerror or exc})", unreadable=True) from None
    except UnicodeDecodeError:
        raise ResultFileError(path, "cannot read (not UTF-8 text)") from None


def _parse(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        what = "truncated" if truncated(text) else "corrupt"
        raise ResultFileError(path, f"{what} JSON at line {exc.lineno} column {exc.colno}") from None


def truncated(text: str) -> bool:
    """Whether broken JSON is a cut-off file (empty, or every bracket so far matched and some left
    open: a killed writer) rather than a corrupt one (mismatched brackets, stray text)."""
    stack: list[str] = []
    in_str = esc = False
    for ch in text:
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return False
    return bool(stack) or in_str or not text.strip()


def case_id(name: str) -> str:
    """The case id of a benchmark's name or fullname ('...::test_step[ID]' -> 'ID')."""
    return name.split("[", 1)[1].rstrip("]") if "[" in name else name


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Stats:
    """pytest-benchmark's own summary of an entry, in seconds (a plain pytest-benchmark file has
    nothing else; perfgate's record has the same figures in milliseconds)."""

    median_s: float | None = None
    mean_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    stddev_s: float | None = None
    rounds: int | None = None
    data_s: list[float] = field(default_factory=list)

    @classmethod
    def from_json(cls, stats: Mapping[str, Any]) -> Stats:
        rounds, data = stats.get("rounds"), stats.get("data")
        return cls(
            median_s=_number(stats.get("median")),
            mean_s=_number(stats.get("mean")),
            min_s=_number(stats.get("min")),
            max_s=_number(stats.get("max")),
            stddev_s=_number(stats.get("stddev")),
            rounds=rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None,
            data_s=[float(x) for x in data if _number(x) is not None] if isinstance(data, list) else [],
        )


@dataclass
class Benchmark:
    """One entry of a result file, typed: pytest-benchmark's identity and stats, perfgate's record.
    `raw` is the entry as read, so a writer that changes the record passes pytest-benchmark's own
    fields (group, params, options, stats) through unchanged (`to_json`)."""

    name: str
    fullname: str
    record: CaseRecord
    stats: Stats | None  # None: the entry has no pytest-benchmark stats
    has_record: bool  # False: a plain pytest-benchmark entry (no extra_info)
    raw: dict[str, Any] = field(repr=False)
    written: frozenset[str] = frozenset()  # the extra_info keys the file held (a record fills defaults)

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Benchmark:
        info, stats = entry.get("extra_info"), entry.get("stats")
        name, fullname = entry.get("name"), entry.get("fullname")
        return cls(
            name=str(name or fullname or ""),
            fullname=str(fullname or name or ""),
            record=CaseRecord.from_extra_info(info if isinstance(info, Mapping) else {}),
            stats=Stats.from_json(stats) if isinstance(stats, Mapping) else None,
            has_record=isinstance(info, Mapping),
            raw=dict(entry),
            written=frozenset(info) if isinstance(info, Mapping) else frozenset(),
        )

    def to_json(self) -> dict[str, Any]:
        """The entry as pytest-benchmark writes it, with the record as its extra_info."""
        out = {k: v for k, v in self.raw.items() if k != "extra_info"}
        if self.has_record or self.record != CaseRecord():  # a plain entry stays plain until given a figure
            out["extra_info"] = self.record.to_extra_info()
        return out

    @property
    def case_id(self) -> str:
        return case_id(self.name)

    @property
    def median_ms(self) -> float | None:
        """perfgate's median, else pytest-benchmark's (seconds)."""
        if (v := _number(self.record.median_ms)) is not None:
            return v
        s = self.stats.median_s if self.stats else None
        return None if s is None else s * 1e3

    @property
    def sample_count(self) -> int | None:
        """How many timed samples the figures come from (the record's n or rounds, else the stats')."""
        rec, stats = self.record, self.stats or Stats()
        for v in (rec.n, rec.rounds, stats.rounds):
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        data = rec.samples_ms or stats.data_s
        return len(data) if data else None

    @property
    def label(self) -> str:
        """'model [size opts] variant' from the record, else pytest's test name."""
        rec = self.record
        if rec.model and rec.variant:
            opts = "".join(f" {k}={v}" for k, v in sorted((rec.options or {}).items()))
            size = f" [{rec.size}{opts}]" if rec.size else ""
            return f"{rec.model}{size} {rec.variant}"
        return self.name

    def lookup(self, dotted: str) -> Any:
        """A record field or a figure inside one ('throughput.frames', 'telemetry.metrics.x.mean');
        keys the record does not know are looked up in its `extra`. None when absent."""
        head, *rest = dotted.split(".")
        value: Any = as_json(getattr(self.record, head)) if head in _RECORD_FIELDS else self.record.extra.get(head)
        for part in rest:
            if not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
        return value


_RECORD_FIELDS = frozenset(CaseRecord.__dataclass_fields__) - {"extra"}


def raw_entries(data: Mapping[str, Any]) -> list[Any]:
    """The entries as written, for a validator that names a bad one by its index."""
    entries = data.get("benchmarks")
    return list(entries) if isinstance(entries, list) else []


def benchmarks(data: Mapping[str, Any]) -> list[Benchmark]:
    """The typed entries of a result file's data (what `read_benchmark_json` returned)."""
    entries = data.get("benchmarks")
    return [Benchmark.from_json(b) for b in entries if isinstance(b, Mapping)] if isinstance(entries, list) else []


def entry_problem(entry: Any) -> str | None:
    """What makes a raw entry unusable for any reader (no name, nothing to show), else None."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name") or entry.get("fullname"), str):
        return "has no name"
    if not isinstance(entry.get("extra_info"), Mapping) and not isinstance(entry.get("stats"), Mapping):
        return f"{entry.get('name') or entry.get('fullname')!r} has neither extra_info nor stats"
    return None


def with_benchmarks(data: Mapping[str, Any], entries: list[Benchmark]) -> dict[str, Any]:
    """A result file's data with its entries replaced by `entries` (each written by `to_json`)."""
    return {**{k: v for k, v in data.items() if k != "benchmarks"}, "benchmarks": [b.to_json() for b in entries]}


@dataclass(frozen=True)
class Distributed:
    """An aggregated torchrun run's `perfgate.distributed` block (perfgate.dist.ranks.aggregate)."""

    world_size: int
    ranks: list[int]
    missing_ranks: list[int] = field(default_factory=list)
    backend: str | None = None
    hosts: list[str] = field(default_factory=list)
    straggler_threshold_pct: float | None = None
    stragglers: int = 0  # over all cases
    fingerprint_ids: dict[int, str | None] | None = None  # only where the ranks' fingerprints differ
    throughput: str = ""  # how throughput and latency combine over ranks, in words

    @classmethod
    def from_json(cls, block: Mapping[str, Any]) -> Distributed:
        return cls(**{k: v for k, v in block.items() if k in cls.__dataclass_fields__})

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class RunInfo:
    """A result file's top level, typed: the commit pytest-benchmark recorded (or perfgate's block
    did), when it ran, and the fingerprint that keys its baselines."""

    commit: str | None = None
    dirty: bool = False
    branch: str | None = None
    commit_time: str | None = None  # ISO text as written
    run_time: str | None = None  # pytest-benchmark's datetime, else perfgate's recorded_at
    fingerprint_id: str | None = None
    fingerprint: dict[str, Any] | None = None
    machine_fingerprint: dict[str, Any] | None = None  # the one in machine_info, what pytest-benchmark compares
    rank: RankBlock | None = None  # a torchrun rank's file: its perfgate_dist block
    distributed: Distributed | None = None  # an aggregated run's block

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        block = _mapping(data.get("perfgate"))
        from_machine = _mapping(_mapping(data.get("machine_info")).get("perfgate"))
        commit = _mapping(data.get("commit_info"))
        fp = block.get("fingerprint") or from_machine.get("fingerprint")
        run_time = data.get("datetime") if isinstance(data.get("datetime"), str) and data.get("datetime") else None
        return cls(
            commit=commit.get("id") or block.get("commit"),
            dirty=bool(commit.get("dirty")),
            branch=commit.get("branch"),
            commit_time=commit.get("time") or commit.get("author_time"),
            run_time=run_time or block.get("recorded_at"),
            fingerprint_id=block.get("fingerprint_id") or from_machine.get("fingerprint_id"),
            fingerprint=fp if isinstance(fp, dict) else None,
            machine_fingerprint=mfp if isinstance(mfp := from_machine.get("fingerprint"), dict) else None,
            rank=RankBlock.from_json(data["perfgate_dist"]) if isinstance(data.get("perfgate_dist"), Mapping) else None,
            distributed=Distributed.from_json(block["distributed"])
            if isinstance(block.get("distributed"), Mapping)
            else None,
        )


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def strip_samples(data: Mapping[str, Any]) -> dict[str, Any]:
    """The run without its raw sample arrays (extra_info samples_ms and reference_ms, stats.data),
    the figures computed from them kept (what the history store keeps)."""
    out = json.loads(json.dumps(data))
    for b in out.get("benchmarks") or []:
        info, stats = b.get("extra_info") or {}, b.get("stats") or {}
        for key in ("samples_ms", "reference_ms"):
            if isinstance(info.get(key), list):
                info[key] = []
        if isinstance(stats.get("data"), list):
            stats["data"] = []
    return out


def case_records(data: Mapping[str, Any]) -> dict[str, CaseRecord]:
    """Case id -> typed record of every benchmark in a result file's data (what
    `read_benchmark_json` returned): the one place its perfgate keys become a CaseRecord."""
    return {b.case_id: b.record for b in benchmarks(data)}


def load_records(path: str | os.PathLike[str], *, samples: bool = True) -> dict[str, CaseRecord]:
    """`case_records` of the result file at `path` (ResultFileError, one line, when unreadable)."""
    return case_records(read_benchmark_json(path, samples=samples))
