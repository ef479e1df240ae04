"""The history store: every main run kept, in a folder that is a checkout of the repository's own
data branch (`perfgate-history`), laid out as pytest-benchmark storage so that both readers read it
directly:

    <store>/<fingerprint_id>/NNNN_<commit12>-<tier>.json

`perfgate history --store DIR` and `perfgate report --site` read it (filtered by fingerprint, like
.benchmarks); `pytest-benchmark --storage DIR list` and `compare` read it too (NNNN_ is its
numbering). Each file is the run's pytest-benchmark JSON without its raw sample arrays (history
and the dashboard read the figures, not the samples: 300 KB instead of 1 MB for the 106-case CPU
matrix) and with a `perfgate_history` block: commit, fingerprint, tier, the verdicts, where the run
came from. A file may be gzipped (`.json.gz`, thinned old runs); perfgate reads both.

`add_run` is what the GitHub-hosted job calls (through `perfgate store add`) before it commits: it
validates the GPU or CPU run's artifact, because the runner that made it held no write token and
its files are only data (docs/history-store.md). `kept_counts` reads a commit's CPU instruction
counts back as portable baselines: the CPU pull-request gate (`perfgate ab --counts`) judges a pull
request's counts against its merge base's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from perfgate import files
from perfgate.gate.verdict_file import load_verdicts
from perfgate.results import (
    Benchmark,
    ResultFileError,
    RunInfo,
    benchmarks,
    raw_entries,
    read_benchmark_json,
    strip_samples,
)

SCHEMA = 1
BRANCH = "perfgate-history"
MAX_ARTIFACT_BYTES = 32 * 2**20  # results.json as the GPU job wrote it (the 106-case CPU matrix: 1 MB)
MAX_STORED_BYTES = 4 * 2**20  # one stored run without samples (the same matrix: 300 KB)
FINGERPRINT_ID = re.compile(r"(cpu|cuda)-[a-z0-9-]{1,80}-t\d+-[0-9a-f]{10}")
COMMIT = re.compile(r"[0-9a-f]{40}")
TIER = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
SOURCE_URL = re.compile(r"https://[A-Za-z0-9.-]+/[A-Za-z0-9._~/%-]*")  # a workflow run's address
RUN_FILE = re.compile(r"(\d{4,})_([0-9a-f]{12})-([a-z0-9_-]+)\.json(\.gz)?")


class StoreError(ValueError):
    """An artifact or store that must not be committed; one line naming the file and the problem."""


@dataclass(frozen=True)
class Added:
    path: Path | None  # None: this commit, fingerprint and tier were already stored
    fingerprint_id: str
    cases: int
    stored_bytes: int


def configured_store(pyproject: str | os.PathLike[str] = "pyproject.toml") -> list[str]:
    """[tool.perfgate] history_store (a folder, relative to the project), or none; StoreError, one
    line naming the file, for a bad value or a pyproject that cannot be read (a store silently
    left out would read as a history without its runs)."""
    from perfgate.cases.project import PolicyError, load_table

    try:
        value = load_table(pyproject).get("history_store")
    except PolicyError as exc:
        raise StoreError(str(exc)) from None
    if value is None:
        return []
    if not isinstance(value, str) or not value:
        raise StoreError(
            f'{pyproject} [tool.perfgate] history_store: must be a folder, e.g. history_store = ".perfgate/history", '
            f"got {value!r}"
        )
    return [str(Path(pyproject).parent / value)]


def _fingerprint_id(fp: Mapping[str, Any]) -> str:
    from perfgate.measure.fingerprint import fingerprint_id

    return fingerprint_id(dict(fp))


def _same_machine(recomputed: str, claimed: str) -> bool:
    """The claimed id names the machine its block describes: the same device, hardware and
    threads. The hash is compared only when the ids agree in form: a run measured at an older
    commit hashed the key fields of its day (the GPU run predates the validating job's code)."""
    if recomputed == claimed:
        return True
    head = re.sub(r"-f\d+m\d+(?=-t\d+-)", "", recomputed).rsplit("-", 1)[0]
    return re.sub(r"-f\d+m\d+(?=-t\d+-)", "", claimed).rsplit("-", 1)[0] == head


def _on_branch(repo: str | os.PathLike[str], commit: str, ref: str) -> bool:
    r = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", commit, ref], capture_output=True, text=True
    )
    if r.returncode == 128 and "valid commit" in r.stderr:
        return False  # a commit this clone has never seen is on none of its branches
    if r.returncode not in (0, 1):
        raise StoreError(f"git merge-base --is-ancestor {commit} {ref} in {repo}: {r.stderr.strip()}")
    return r.returncode == 0


def validate(
    results: str | os.PathLike[str],
    verdicts: str | os.PathLike[str] | None,
    *,
    commit: str,
    tier: str,
    repo: str | os.PathLike[str] | None = None,
    main_ref: str = "origin/main",
    device_type: str | None = None,
    max_bytes: int = MAX_ARTIFACT_BYTES,
) -> dict[str, Any]:
    """The run to store (samples stripped, `perfgate_history` block added), or StoreError.

    Checks: the size bound before parsing; a pytest-benchmark file whose entries have perfgate's
    figures; the fingerprint block, whose id recomputed from it matches the one claimed (the id
    becomes a folder name: nothing else may reach the path); the commit the run says it measured
    is the commit the workflow ran for, clean, and (with `repo`) on main; the verdicts file, if
    any, of the same fingerprint."""
    path = Path(results)
    if not COMMIT.fullmatch(commit):
        raise StoreError(f"--commit {commit!r}: give the full 40-hex-digit commit the run measured")
    if not TIER.fullmatch(tier):
        raise StoreError(f"--tier {tier!r}: a short lower-case name such as pr or all")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror}); pass the artifact's results.json") from None
    if size > max_bytes:
        raise StoreError(f"{path}: {size} bytes, over the bound of {max_bytes}; not a run this store keeps")
    try:
        data = read_benchmark_json(path)
    except ResultFileError as exc:
        raise StoreError(str(exc)) from None
    if not raw_entries(data):
        raise StoreError(f"{path}: no benchmarks; a run that measured nothing is not kept")
    for i, raw in enumerate(raw_entries(data)):
        b = Benchmark.from_json(raw) if isinstance(raw, dict) and "fullname" in raw else None
        if b is None or b.stats is None:
            raise StoreError(f"{path}: benchmark #{i} has no fullname or stats")
        if not b.has_record or not isinstance(b.record.median_ms, (int, float)):
            raise StoreError(f"{path}: benchmark {b.fullname!r} has no perfgate median_ms; not a perfgate run")
    block = data.get("perfgate")
    if not isinstance(block, dict) or not isinstance(block.get("fingerprint"), dict):
        raise StoreError(f"{path}: no perfgate fingerprint block; not a run of the perfgate plugin")
    fp_id = block.get("fingerprint_id")
    if not isinstance(fp_id, str) or not FINGERPRINT_ID.fullmatch(fp_id):
        raise StoreError(f"{path}: fingerprint id {fp_id!r} is not one perfgate writes")
    if not _same_machine(_fingerprint_id(block["fingerprint"]), fp_id):
        raise StoreError(f"{path}: fingerprint id {fp_id} does not match its fingerprint block (edited?)")
    if device_type and block["fingerprint"].get("device_type") != device_type:
        raise StoreError(f"{path}: a {block['fingerprint'].get('device_type')} run where {device_type} was expected")
    if device_type == "cpu":
        _check_counts(path, benchmarks(data))
    info = RunInfo.from_json(data)
    if info.commit != commit:
        raise StoreError(f"{path}: measured commit {info.commit!r}, not {commit}, the commit this workflow ran for")
    if info.dirty:
        raise StoreError(f"{path}: measured a working tree with uncommitted changes; only clean commits are kept")
    if repo is not None and not _on_branch(repo, commit, main_ref):
        raise StoreError(f"commit {commit} is not on {main_ref}; only main's runs are kept")
    verdict_rows: list[dict[str, Any]] = []
    if verdicts is not None:
        try:
            vs = load_verdicts(verdicts)
        except ResultFileError as exc:
            raise StoreError(str(exc)) from None
        if vs.fingerprint_id and vs.fingerprint_id != fp_id:
            raise StoreError(f"{verdicts}: verdicts of {vs.fingerprint_id}, results of {fp_id}")
        verdict_rows = [
            {k: v for k, v in row.as_dict().items() if k in ("case", "metric", "verdict", "change_pct", "compared")}
            for row in vs.verdicts
        ]
    out = strip_samples(data)
    out["perfgate_history"] = {
        "schema": SCHEMA,
        "commit": commit,
        "fingerprint_id": fp_id,
        "tier": tier,
        "verdicts": verdict_rows,
    }
    return out


def _check_counts(path: Path, entries: list[Benchmark]) -> None:
    """A CPU run is kept for its instruction counts (the CPU pull-request gate judges against them,
    `kept_counts`): at least one counted case, each with its count key, one key for the run."""
    counted = [b for b in entries if b.record.instructions_per_step is not None]
    if not counted:
        raise StoreError(
            f"{path}: a CPU run without instruction counts; run the count tier with valgrind installed "
            "(scripts/install-valgrind, --perfgate-tier cpu-pr)"
        )
    keys: set[str] = set()
    for b in counted:
        key = b.record.instructions.key if b.record.instructions else None
        if not isinstance(key, str):
            raise StoreError(f"{path}: {b.fullname!r} has an instruction count without its count key; not perfgate's")
        keys.add(key)
    if len(keys) > 1:
        raise StoreError(f"{path}: counts under {len(keys)} keys ({', '.join(sorted(keys))}); one run counts under one")


def kept_counts(stores: str | os.PathLike[str] | list[str], commit: str) -> dict[str, dict[str, Any]]:
    """The instruction counts kept for `commit` (40 hex digits) in the store(s), as portable
    baseline contents by count key (perfgate.counts.suite.portable_from_run, the builder
    `--perfgate-record` writes baselines/counts/<key>.json with): every CPU run of that commit,
    whatever its tier (a later run's case wins). Empty when none is kept."""
    from perfgate.counts.suite import portable_from_run

    if not COMMIT.fullmatch(commit):
        raise StoreError(f"commit {commit!r}: give the full 40-hex-digit commit")
    found: dict[str, dict[str, Any]] = {}
    for store in [stores] if isinstance(stores, (str, os.PathLike)) else stores:
        root = Path(store)
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("cpu-")):
            for path in run_files(folder):
                named = RUN_FILE.fullmatch(path.name)
                if named is None or named.group(2) != commit[:12]:
                    continue
                try:
                    data = read_benchmark_json(path, samples=False)
                except ResultFileError as exc:
                    raise StoreError(f"{exc}; restore the store (git -C {root} checkout .)") from None
                if RunInfo.from_json(data).commit != commit:
                    continue  # another commit with the same 12 first digits
                for key, content in portable_from_run(data).items():
                    if key in found:
                        content = {**content, "cases": {**found[key]["cases"], **content["cases"]}}
                    found[key] = content
    return found


def dumps(run: Mapping[str, Any]) -> str:
    """Compact JSON, one run: git compresses and deltas it (docs/history-store.md, the sizes)."""
    return json.dumps(run, separators=(",", ":"), sort_keys=False) + "\n"


def run_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json*") if RUN_FILE.fullmatch(p.name))


def add_run(store: str | os.PathLike[str], run: Mapping[str, Any], *, source: str | None = None) -> Added:
    """Write a validated run as the next NNNN_ file of its fingerprint's folder (atomically, never
    over an existing file); nothing when the same commit and tier are already stored."""
    meta = run["perfgate_history"]
    fp_id, commit, tier = meta["fingerprint_id"], meta["commit"], meta["tier"]
    if source is not None and not SOURCE_URL.fullmatch(source):
        raise StoreError(f"--source {source!r}: give the workflow run's https:// address (the dashboard links it)")
    folder = Path(store) / fp_id
    existing = run_files(folder)
    name_tail = f"_{commit[:12]}-{tier}.json"
    cases = len(benchmarks(run))
    if any(p.name.removesuffix(".gz").endswith(name_tail) for p in existing):
        return Added(None, fp_id, cases, 0)
    text = dumps({**run, "perfgate_history": {**meta, **({"source": source} if source else {})}})
    if len(text) > MAX_STORED_BYTES:
        raise StoreError(f"{fp_id} run at {commit[:12]}: {len(text)} bytes stored, over {MAX_STORED_BYTES}")
    number = max((int(RUN_FILE.fullmatch(p.name).group(1)) for p in existing), default=0) + 1
    path = files.write_text(folder / f"{number:04d}{name_tail}", text, clobber=False)
    return Added(path, fp_id, cases, len(text.encode()))


def stored_time(path: Path) -> datetime | None:
    """When a stored run was measured (its `datetime`), None when unreadable."""
    from perfgate.history.runs import parse_time

    try:
        return parse_time(RunInfo.from_json(read_benchmark_json(path, samples=False)).run_time)
    except ResultFileError:
        return None


def thin(store: str | os.PathLike[str], *, now: datetime, keep_days: int = 90, keep_tier: str = "all") -> list[Path]:
    """Remove from the store's tree the runs older than `keep_days` except those of `keep_tier`
    (the nightly full matrix: one run a day stays); returns the files removed. The branch's git
    history still holds them (`git log -- FILE`): thinning bounds the checkout and the time to
    read it, not what is kept. StoreError, before anything is removed, when `keep_tier` is neither
    the built-in whole matrix (`all`, kept whether or not a nightly ran yet) nor a tier a stored run
    has: a misspelt tier (`nightly`) would keep nothing."""
    from perfgate.cases.tiers import ALL

    folders = sorted(p for p in Path(store).iterdir() if p.is_dir() and not p.name.startswith("."))
    tiers = {m.group(3) for folder in folders for p in run_files(folder) if (m := RUN_FILE.fullmatch(p.name))}
    if keep_tier not in tiers | {ALL}:
        raise StoreError(
            f"--keep-tier {keep_tier}: no run in {store} has this tier, so none would be kept; its runs' tiers: "
            f"{', '.join(sorted(tiers)) or 'none'} (the nightly full matrix is '{ALL}')"
        )
    removed = []
    for folder in folders:
        for path in run_files(folder):
            tier = RUN_FILE.fullmatch(path.name).group(3)
            if tier == keep_tier:
                continue
            when = stored_time(path)
            if when is not None and (now - when).days > keep_days:
                path.unlink()
                removed.append(path)
    return removed
