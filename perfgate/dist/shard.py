"""`--perfgate-shard I/N`: a stable split of the selected cases over N runners (a GitHub Actions
matrix), and the checks `perfgate aggregate` makes before merging the shards' files.

Why not pytest-split (the well-kept splitting plugin): it splits test by test, so a model's
variants can land on another runner than its eager baseline, whose in-run median every speedup
(a gated metric) divides by; and its durations live in one `.test_durations` file, while a case
takes minutes on a GPU and milliseconds on the CPU. Here the unit is the group of cases that share
an eager baseline (`perfgate.dist.workers.group_name`), and the expected durations are the cases' own
`case_wall_s` in this fingerprint's baselines (committed, so every runner of the matrix reads the
same numbers). Groups go longest first to the shard with the least expected time (LPT), ties to
the lower shard; without durations every case counts 1. Each shard records the digest of the
whole selection and of the split, so shards that split differently are refused, not merged.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.dist.workers import case_id, group_name
from perfgate.results import benchmarks

OPTION = "--perfgate-shard"
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
RESULT_FILE = re.compile(r"^shard-(\d+)-of-(\d+)\.json$")


class ShardError(ValueError):
    """Shard files that cannot be merged; the message names the file and the fix."""


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based, as a matrix writes it
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def results_name(self) -> str:
        return f"shard-{self.index}-of-{self.count}.json"

    @property
    def verdicts_name(self) -> str:
        return f"verdicts.shard-{self.index}-of-{self.count}.json"


def parse(text: str) -> ShardSpec:
    """`I/N` with 1 <= I <= N; ValueError naming the option otherwise."""
    m = _SPEC.match(text or "")
    if not m:
        raise ValueError(f"{OPTION} {text!r}: write I/N, e.g. {OPTION} 2/4 for the second of four shards")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"{OPTION} {text!r}: I must be between 1 and N (N >= 1), e.g. {OPTION} 1/{max(count, 2)}")
    return ShardSpec(index, count)


def durations_s(baseline_files: Sequence[Path], fingerprint: Mapping[str, Any] | None) -> dict[str, float]:
    """case id -> the case's recorded wall time (`case_wall_s`) in the newest baseline that holds
    one; `baseline_files` newest first. Unreadable files raise the store's BaselineError."""
    from perfgate.gate import store

    out: dict[str, float] = {}
    for path in baseline_files:
        for b in store.by_name(store.load(path, dict(fingerprint) if fingerprint else None)).values():
            wall, case = b.record.case_wall_s, b.case_id
            if case not in out and isinstance(wall, (int, float)) and wall > 0:
                out[case] = float(wall)
    return out


def split(case_ids: Sequence[str], groups: Sequence[str], count: int, durations: Mapping[str, float]) -> list[int]:
    """The shard (1..count) of each case: `groups[i]` is case i's group, which stays whole.

    A case without a duration weighs the mean of the known ones (all 1 when none is known)."""
    known = [durations[c] for c in case_ids if c in durations]
    default = statistics.fmean(known) if known else 1.0
    weight: dict[str, float] = {}
    for case, group in zip(case_ids, groups):
        weight[group] = weight.get(group, 0.0) + (durations.get(case, default) if known else 1.0)
    order = {g: i for i, g in enumerate(weight)}
    load = [0.0] * count
    shard_of: dict[str, int] = {}
    for g in sorted(weight, key=lambda g: (-weight[g], order[g])):
        target = min(range(count), key=lambda s: (load[s], s))
        shard_of[g] = target + 1
        load[target] += weight[g]
    return [shard_of[g] for g in groups]


def digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def apply(cases: Sequence[Any], spec: ShardSpec, durations: Mapping[str, float], basis: str) -> tuple[list, dict]:
    """(this shard's cases in their order, the shard block its files carry)."""
    ids = [c.id for c in cases]
    shards = split(ids, [group_name(c) for c in cases], spec.count, durations)
    mine = [c for c, s in zip(cases, shards) if s == spec.index]
    block = {
        "index": spec.index,
        "count": spec.count,
        "cases": [c.id for c in mine],
        "selected": len(ids),
        "selection_digest": digest(ids),
        "split_digest": digest([f"{i}:{s}" for i, s in zip(ids, shards)]),
        "basis": basis,
    }
    return mine, block


# ----------------------------------------------------------------------------- merging shard files


def shard_files(folder: Path) -> list[tuple[Path, Path]]:
    """(results, verdicts) file pairs of `folder`, by shard index; ShardError when none, or a
    verdicts file is missing."""
    found = sorted((int(m.group(1)), int(m.group(2)), p) for p in folder.iterdir() if (m := RESULT_FILE.match(p.name)))
    if not found:
        raise ShardError(
            f"{folder}: no shard-<I>-of-<N>.json files; pass the folder the --perfgate-shard runs wrote "
            "(--perfgate-shard-dir, default .perfgate/shards), e.g. their artifacts downloaded into one folder"
        )
    pairs = []
    for index, count, path in found:
        verdicts = folder / ShardSpec(index, count).verdicts_name
        if not verdicts.is_file():
            raise ShardError(f"{verdicts}: missing beside {path.name}; copy both files of every shard into {folder}")
        pairs.append((path, verdicts))
    return pairs


def check_blocks(blocks: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
    """ShardError for shards of different splits, a shard given twice or one missing."""
    for label, b in blocks:
        if not isinstance(b, Mapping) or not isinstance(b.get("index"), int):
            raise ShardError(f"{label}: no perfgate.dist.shard block; it was not written by a --perfgate-shard run")
    counts = {label: b["count"] for label, b in blocks}  # type: ignore[index]
    if len(set(counts.values())) > 1:
        raise ShardError(f"shards of different splits {counts}; merge the N files of one --perfgate-shard I/N run")
    count = next(iter(counts.values()))
    for key, what in (("selection_digest", "selected other cases"), ("split_digest", "split the cases differently")):
        values = {label: b.get(key) for label, b in blocks}  # type: ignore[union-attr]
        if len(set(values.values())) > 1:
            labels = ", ".join(values)
            raise ShardError(
                f"the shards {what} ({labels}); run every shard of the matrix with the same options, commit and "
                "baselines"
            )
    indices = [b["index"] for _, b in blocks]  # type: ignore[index]
    twice = sorted({i for i in indices if indices.count(i) > 1})
    if twice:
        raise ShardError(f"shard {twice[0]}/{count} is given twice; keep one file per shard")
    missing = [i for i in range(1, count + 1) if i not in indices]
    if missing:
        raise ShardError(
            f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing; every shard's files are needed for "
            "one verdict (rerun the failed matrix job)"
        )


def unaccounted(assigned: Sequence[str], run: Mapping[str, Any], verdicts: Any) -> list[str]:
    """Case ids the shards were given that none measured, skipped or failed (a -k filter, a
    worker that died): listed, not hidden."""
    seen = {b.case_id for b in benchmarks(run)}
    seen |= set(verdicts.skipped) | {case_id(v.case) for v in verdicts.verdicts}
    return [c for c in assigned if c not in seen]


def merge_folder(folder: Path) -> tuple[dict[str, Any], Any, list[str]]:
    """(the merged results, the merged VerdictSet, notices) of the shard files in `folder`;
    ShardError, MergeError or ResultFileError (one line each) when they cannot make one run."""
    from perfgate.dist.workers import merge_runs, merge_verdicts
    from perfgate.gate.verdict_file import load_verdicts
    from perfgate.results import read_benchmark_json

    pairs = shard_files(folder)
    runs = [(str(r), read_benchmark_json(r)) for r, _ in pairs]
    blocks = [(label, (data.get("perfgate") or {}).get("shard")) for label, data in runs]
    check_blocks(blocks)
    merged = merge_runs(runs)
    vs = merge_verdicts([(str(v), load_verdicts(v)) for _, v in pairs])
    count = blocks[0][1]["count"]  # type: ignore[index]
    assigned = [c for _, b in blocks for c in b["cases"]]  # type: ignore[index]
    merged["perfgate"]["shard"] = {
        "count": count,
        "selected": blocks[0][1]["selected"],  # type: ignore[index]
        "cases_per_shard": {f"{b['index']}/{count}": len(b["cases"]) for _, b in blocks},  # type: ignore[index]
        "basis": blocks[0][1].get("basis"),  # type: ignore[union-attr]
    }
    missing = unaccounted(assigned, merged, vs)
    notes = [f"{len(missing)} case(s) of the selection have no result in any shard: {', '.join(missing)}"]
    return merged, vs, notes if missing else []
