"""History of saved runs: one metric per case over time and commit, pure and pytest-free.

Reads pytest-benchmark JSON wherever it was saved: numbered baselines and autosaves under
`baselines/<fingerprint_id>/` (pytest-benchmark nests autosaves one folder deeper, under its
machine id), `.benchmarks/`, or files named by the user. A file that cannot be read becomes one
line in `History.unreadable` and is skipped: one truncated file must not hide months of history.
Series are keyed by fingerprint as well as case, so numbers from two machines never share a line.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import numpy as np

from perfgate.measure.stats import TAIL_MIN_SAMPLES
from perfgate.record import HISTORY_FIELDS
from perfgate.results import (
    Benchmark,
    ResultFileError,
    RunInfo,
    benchmarks,
    entry_problem,
    raw_entries,
    read_benchmark_json,
)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "lower", "higher" or "" (no direction)
    label: str


# Units in names (style.md): the suffix of a key is its unit.
UNIT_SUFFIXES = (
    ("_ms", "ms"),
    ("_s", "s"),
    ("_mib", "MiB"),
    ("_mb", "MB"),
    ("_pct", "%"),
    ("_db", "dB"),
    ("_w", "W"),
    ("_c", "°C"),
    ("_mhz", "MHz"),
)


_STATISTIC = r"(mean|median|min|max|avg|std|p\d+)"


def unit_of(key: str) -> str:
    """'%' for gpu_util_pct, gpu_util_pct_mean and telemetry.metrics.gpu_util_pct.mean (the
    sampler's summary), 'MiB' for rss_mib, '' when the name has no unit."""
    parts = key.split(".")
    tail = parts[-2] if len(parts) > 1 and re.fullmatch(_STATISTIC, parts[-1]) else parts[-1]
    tail = re.sub(rf"_{_STATISTIC}$", "", tail)
    return next((u for suffix, u in UNIT_SUFFIXES if tail.endswith(suffix)), "")


# The record's own history fields (label, direction and unit from its metadata), then the figures
# inside its dicts: the accuracy measures and the primary-unit throughput.
_METRIC_LIST = (
    *(Metric(name, unit or unit_of(name), better, label) for name, (label, better, unit) in HISTORY_FIELDS.items()),
    Metric("throughput", "items/s", "higher", "throughput"),
    Metric("rel_l2", "", "lower", "relative L2 error"),
    Metric("max_abs", "", "lower", "max abs error"),
    Metric("cosine", "", "higher", "cosine similarity"),
    Metric("psnr_db", "dB", "higher", "PSNR"),
)
HISTORY_METRICS: dict[str, Metric] = {m.name: m for m in _METRIC_LIST}
_ACCURACY = {"rel_l2", "max_abs", "cosine", "psnr_db"}
# Plain pytest-benchmark files have no extra_info: latency comes from `stats` (seconds).
_STATS_S = {"median_ms": "median_s", "mean_ms": "mean_s", "min_ms": "min_s", "max_ms": "max_s", "std_ms": "stddev_s"}
_PERCENTILES = {"p90_ms": 90, "p99_ms": 99}


def metric_info(name: str) -> Metric:
    """The known metric, or an ad-hoc one for a dotted extra_info path (unit read from its suffix)."""
    return HISTORY_METRICS.get(name) or Metric(name, unit_of(name), "", name)


# A result file that cannot be used; the message is one line naming the file and the problem.
RunError = ResultFileError


@dataclass(frozen=True)
class Run:
    """One loaded pytest-benchmark result file: its top level and its typed entries."""

    path: str
    data: dict[str, Any]
    folder_fingerprint_id: str | None = None  # the baselines/<fp>/ folder it was found in
    # Typed from `data` unless given (a live session's records are no file).
    benchmarks: list[Benchmark] = field(default_factory=list, compare=False)
    info: RunInfo | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.info is None:  # frozen: set once, here
            object.__setattr__(self, "info", RunInfo.from_json(self.data))
            object.__setattr__(self, "benchmarks", self.benchmarks or benchmarks(self.data))

    @property
    def label(self) -> str:
        return Path(self.path).stem

    @property
    def fingerprint_id(self) -> str | None:
        return self.info.fingerprint_id or self.folder_fingerprint_id

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        return self.info.fingerprint

    @property
    def commit(self) -> str | None:
        return self.info.commit

    @property
    def dirty(self) -> bool:
        return self.info.dirty

    @property
    def branch(self) -> str | None:
        return self.info.branch

    @property
    def commit_time(self) -> datetime | None:
        return parse_time(self.info.commit_time)

    @property
    def run_time(self) -> datetime | None:
        return parse_time(self.info.run_time)

    def order_key(self) -> tuple:
        """Commit time first (history follows the commits), then when the run happened."""
        run_t = self.run_time or self.commit_time or _EPOCH
        return (self.commit_time or run_t, run_t, self.path)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time as an aware UTC datetime; naive times are taken as UTC (pytest-benchmark
    wrote naive UTC before 4.0); None when absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def run_fingerprint_id(data: Mapping[str, Any]) -> str | None:
    return RunInfo.from_json(data).fingerprint_id


def load_run(path: str | os.PathLike[str], *, samples: bool = True) -> Run:
    """Read one result file (perfgate.results, the one loader) and check that every entry has a
    name and something to show; RunError (one line: file, problem) when it cannot be used.
    `samples=False` empties extra_info.samples_ms, reference_ms and stats.data (4-5x faster)."""
    data = read_benchmark_json(path, samples=samples)
    for i, b in enumerate(raw_entries(data)):
        if problem := entry_problem(b):
            raise RunError(path, f"benchmark #{i} {problem}" if problem == "has no name" else f"benchmark {problem}")
    return Run(str(path), data)


def load_runs(paths: Iterable[str | os.PathLike[str]], *, samples: bool = True) -> tuple[list[Run], list[str]]:
    """(runs that loaded, one line per file that did not)."""
    runs, errors = [], []
    for p in paths:
        try:
            runs.append(load_run(p, samples=samples))
        except RunError as exc:
            errors.append(str(exc))
    return runs, errors


# ----------------------------------------------------------------------------- discovery


def _json_files(folder: Path) -> list[Path]:
    """Every *.json (and gzipped *.json.gz) below `folder`, hidden files (atomic-write temporaries,
    a store's .git) excluded."""
    if not folder.is_dir():
        return []
    found = [*folder.rglob("*.json"), *folder.rglob("*.json.gz")]
    return sorted(
        p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts) and p.is_file()
    )


def discover(
    *,
    baselines_root: str | os.PathLike[str] = "baselines",
    fingerprint_id: str | None = None,
    storage_dirs: Sequence[str | os.PathLike[str]] = (".benchmarks",),
    paths: Sequence[str | os.PathLike[str]] = (),
) -> tuple[list[Path], list[Path]]:
    """(files under this fingerprint's baseline folder or explicitly named, files whose fingerprint
    must be read from their content: pytest-benchmark storage shared by every machine).

    With `fingerprint_id=None` every fingerprint folder is included.
    """
    root = Path(baselines_root)
    # counts/ holds the portable count baselines (perfgate.counts), no runs.
    own = (
        _json_files(root / fingerprint_id)
        if fingerprint_id
        else [f for f in _json_files(root) if f.relative_to(root).parts[0] != "counts"]
    )
    for p in map(Path, paths):
        own += _json_files(p) if p.is_dir() else [p]
    own = _unique(own)
    taken = {o.resolve() for o in own}
    return own, [f for f in _unique(f for d in storage_dirs for f in _json_files(Path(d))) if f.resolve() not in taken]


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen, out = set(), []
    for p in paths:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


# ----------------------------------------------------------------------------- values


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def metric_value(bench: Benchmark, metric: str) -> float | None:
    """One metric of one benchmark entry: perfgate's record first, pytest-benchmark's stats
    (seconds) for plain files; None when the entry does not have it."""
    rec = bench.record
    if metric in TAIL_MIN_SAMPLES and (bench.sample_count or 0) < TAIL_MIN_SAMPLES[metric]:
        return None  # older files computed tails from any number of samples: too few to support one
    if metric in _ACCURACY:
        v = _number(rec.accuracy.get(metric))
    elif metric == "throughput":
        v = _number(rec.throughput_primary)
    else:
        v = _number(bench.lookup(metric))
    if v is not None:
        return v
    stats = bench.stats
    if stats is None:
        return None
    if metric in _STATS_S:
        s = _number(getattr(stats, _STATS_S[metric]))
        return None if s is None else s * 1e3
    if metric in _PERCENTILES and stats.data_s:
        return float(np.percentile(np.asarray(stats.data_s, float), _PERCENTILES[metric])) * 1e3
    if metric == "fps" and rec.unit == "frames":
        return _number(rec.throughput.get("frames"))
    return None


def case_label(bench: Benchmark) -> str:
    """'model [size opts] variant' from the record, else pytest's test name."""
    return bench.label


# ----------------------------------------------------------------------------- history


@dataclass(frozen=True)
class SeriesPoint:
    value: float
    # Against the previous reliable point of the same series, after filtering; None on an
    # unreliable point: a contended run's number once read "+82989% vs previous" on unchanged code.
    change_pct: float | None
    commit: str | None
    commit_time: str | None
    run_time: str | None
    dirty: bool
    branch: str | None
    source: str
    unreliable: bool = False  # the run flagged its own timing (contention): shown, never compared


@dataclass
class Series:
    fingerprint_id: str
    fullname: str
    name: str
    label: str
    model: str | None
    size: str | None
    variant: str | None
    unit: str
    points: list[SeriesPoint] = field(default_factory=list)
    change_points: list[dict[str, Any]] | None = None  # perfgate.history.changepoints.annotate fills it on request

    def values(self) -> list[float]:
        return [p.value for p in self.points]

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "points"}, "points": [asdict(p) for p in self.points]}


@dataclass(frozen=True, kw_only=True)
class Filters:
    models: tuple[str, ...] = ()  # globs
    variants: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()  # globs over the test name and the readable label
    since: datetime | None = None
    until: datetime | None = None

    def keep_run(self, run: Run) -> bool:
        t = run.run_time or run.commit_time
        if t is None:
            return self.since is None and self.until is None
        return (self.since is None or t >= self.since) and (self.until is None or t <= self.until)

    def keep_bench(self, bench: Benchmark) -> bool:
        rec = bench.record
        if self.models and not _match(rec.model or None, self.models):
            return False
        if self.variants and not _match(rec.variant or None, self.variants):
            return False
        if self.cases and not (_match(bench.name, self.cases) or _match(bench.label, self.cases)):
            return False
        return True


def _match(value: Any, patterns: Sequence[str]) -> bool:
    return isinstance(value, str) and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def parse_day(text: str, *, end: bool = False) -> datetime:
    """A --since/--until value: a date (the whole day, UTC) or an ISO time; ValueError otherwise."""
    text = text.strip()
    if len(text) == 10:  # YYYY-MM-DD
        d = date.fromisoformat(text)
        return datetime.combine(d, time.max if end else time.min, tzinfo=UTC)
    t = parse_time(text)
    if t is None:
        raise ValueError(f"{text!r} is neither a date (2026-11-21) nor an ISO time (2026-11-21T18:00:00+00:00)")
    return t


@dataclass
class History:
    metric: Metric
    series: list[Series]
    unreadable: list[str]
    other_fingerprints: int = 0  # readable files skipped because they belong to another fingerprint
    files: int = 0  # files read

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": asdict(self.metric),
            "files": self.files,
            "other_fingerprints": self.other_fingerprints,
            "unreadable": self.unreadable,
            "series": [s.as_dict() for s in self.series],
        }


def build_series(runs: Sequence[Run], metric: str, filters: Filters = Filters()) -> list[Series]:
    """Group entries by (fingerprint, case), ordered by commit time then run time, with the change
    from the previous reliable entry (unreliable ones are kept but neither get nor give a change).
    The same run seen twice (a baseline also passed by path) counts once."""
    m = metric_info(metric)
    series: dict[tuple[str, str], Series] = {}
    seen: set[tuple[str, str, str, str]] = set()
    for run in sorted(runs, key=Run.order_key):
        if not filters.keep_run(run):
            continue
        fp = run.fingerprint_id or "unknown"
        run_t, commit_t = run.run_time, run.commit_time
        run_iso, commit_iso = run_t.isoformat() if run_t else None, commit_t.isoformat() if commit_t else None
        commit, dirty, branch = run.commit, run.dirty, run.branch
        for bench in run.benchmarks:
            if not filters.keep_bench(bench):
                continue
            value = metric_value(bench, metric)
            if value is None or not math.isfinite(value):
                continue
            fullname = bench.fullname
            dedup = (fp, fullname, str(run_iso), str(commit))
            if dedup in seen:
                continue
            seen.add(dedup)
            s = series.get((fp, fullname))
            if s is None:
                rec = bench.record
                s = series[(fp, fullname)] = Series(
                    fingerprint_id=fp,
                    fullname=fullname,
                    name=bench.name,
                    label=bench.label,
                    model=rec.model or None,
                    size=rec.size or None,
                    variant=rec.variant or None,
                    unit=m.unit,
                )
            unreliable = bool(bench.record.unreliable)
            prev = next((p.value for p in reversed(s.points) if not p.unreliable), None)
            s.points.append(
                SeriesPoint(
                    value=value,
                    change_pct=(value / prev - 1) * 100 if prev and not unreliable else None,
                    commit=commit,
                    commit_time=commit_iso,
                    run_time=run_iso,
                    dirty=dirty,
                    branch=branch,
                    source=run.path,
                    unreliable=unreliable,
                )
            )
    return sorted(series.values(), key=lambda s: (s.fingerprint_id, s.model or "~", s.size or "", s.label))


@dataclass
class Gathered:
    runs: list[Run]
    unreadable: list[str]
    other_fingerprints: int  # readable shared-storage files of another fingerprint, left out
    files: int  # files read


def gather(
    *,
    baselines_root: str | os.PathLike[str] = "baselines",
    fingerprint_id: str | None = None,
    storage_dirs: Sequence[str | os.PathLike[str]] = (".benchmarks",),
    paths: Sequence[str | os.PathLike[str]] = (),
    samples: bool = False,
) -> Gathered:
    """Discover and read every saved run for one fingerprint (or all with None); unreadable files
    become one line each. A file in baselines/<fp>/ without a fingerprint block belongs to <fp>."""
    own, shared = discover(
        baselines_root=baselines_root, fingerprint_id=fingerprint_id, storage_dirs=storage_dirs, paths=paths
    )
    runs, unreadable = load_runs([*own, *shared], samples=samples)
    shared_set = {str(p) for p in shared}
    root = Path(baselines_root).resolve()
    kept, other = [], 0
    for r in runs:
        folder_fp = _folder_fingerprint(Path(r.path), root)
        if folder_fp and not run_fingerprint_id(r.data):
            r = replace(r, folder_fingerprint_id=folder_fp)
        if fingerprint_id and r.path in shared_set and r.fingerprint_id != fingerprint_id:
            other += 1
            continue
        kept.append(r)
    return Gathered(kept, unreadable, other, len(runs))


def collect(
    *,
    metric: str = "median_ms",
    filters: Filters = Filters(),
    baselines_root: str | os.PathLike[str] = "baselines",
    fingerprint_id: str | None = None,
    storage_dirs: Sequence[str | os.PathLike[str]] = (".benchmarks",),
    paths: Sequence[str | os.PathLike[str]] = (),
) -> History:
    """The history of one metric over every saved run for one fingerprint (or all with None)."""
    g = gather(
        baselines_root=baselines_root,
        fingerprint_id=fingerprint_id,
        storage_dirs=storage_dirs,
        paths=paths,
        samples=metric in _PERCENTILES,
    )  # p90/p99 of plain files need stats.data
    return History(
        metric=metric_info(metric),
        series=build_series(g.runs, metric, filters),
        unreadable=g.unreadable,
        other_fingerprints=g.other_fingerprints,
        files=g.files,
    )


def _folder_fingerprint(path: Path, root: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(root)
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) > 1 else None
