"""Every case the committed baselines hold is still a case the suite generates, or its rename is recorded.

A baseline is keyed by the case id (model, size, options, variant). Renaming a model, a size, a
sweep option or a variant silently orphans its baseline: the gate then reports "no baseline" for
the new id and never again judges the old one. A deliberate rename goes into RENAMED (and the
baseline is re-recorded); anything else fails here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import models  # noqa: F401  (registers this repository's families)
from perfgate.cases.selection import expand_cases
from perfgate.cases.workload import MODELS, sizes
from perfgate.counts import suite as counts_suite
from perfgate.results import read_benchmark_json

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / "baselines"

# old case id -> new case id, for a rename made on purpose (empty: none so far).
RENAMED: dict[str, str] = {}


def generated_ids(device: str) -> set[str]:
    """Every case id the suite can generate on `device`: each model at each of its sizes, every
    sweep point, every variant (a variant this machine cannot run still has its id and a skip)."""
    return {
        c.id
        for name, spec in MODELS.items()
        for size in sizes(spec)
        for c in expand_cases(device, models=[name], sizes_=[size])
    }


def orphans(baselines: Path) -> list[str]:
    """'file: case id' for each baseline case neither generated nor recorded as renamed."""
    out = []
    known = {"cpu": generated_ids("cpu"), "cuda": generated_ids("cuda")}
    for path in sorted(baselines.glob("*/*.json")):
        if path.parent.name == "counts":  # the portable instruction counts (CPU), read by their own loader
            device, cases = "cpu", list((counts_suite.load_portable(path) or {}).get("cases", {}))
        else:
            device = "cpu" if path.parent.name.startswith("cpu-") else "cuda"
            benches = read_benchmark_json(path, samples=False)["benchmarks"]
            cases = [b["name"].split("[", 1)[1].rstrip("]") for b in benches]
        for case in cases:
            if case not in known[device] and RENAMED.get(case) not in known[device]:
                out.append(f"{path.relative_to(baselines)}: {case}")
    return out


def test_the_committed_baselines_exist() -> None:
    assert len(list(BASELINES.glob("*/*.json"))) >= 1


def test_every_baseline_case_is_still_generated() -> None:
    assert orphans(BASELINES) == []


def test_every_recorded_rename_points_at_a_generated_case() -> None:
    missing = sorted(set(RENAMED.values()) - generated_ids("cpu") - generated_ids("cuda"))
    assert missing == []


def test_a_renamed_variant_orphans_its_baseline(tmp_path: Path) -> None:
    """The check fails on the realistic mistake: a case id that the suite no longer generates."""
    source = sorted(BASELINES.glob("cpu-*/*.json"))[0]
    copy = tmp_path / source.parent.name / source.name
    copy.parent.mkdir()
    shutil.copy(source, copy)
    data = json.loads(copy.read_text())
    renamed = data["benchmarks"][0]["name"].split("[", 1)[1].rstrip("]").replace("-baseline", "-eager")
    data["benchmarks"][0]["name"] = f"test_step[{renamed}]"
    copy.write_text(json.dumps(data))
    assert orphans(tmp_path) == [f"{source.parent.name}/{source.name}: {renamed}"]
