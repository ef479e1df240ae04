"""Builders of benchmark JSON for tests (no model runtime needed)."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfgate.gate.store import SCHEMA
from perfgate.measure.stats import tail_ms

FP = {
    "device_type": "cpu",
    "gpu_name": None,
    "compute_capability": None,
    "driver": None,
    "cuda": None,
    "torch": "2.13.0+cpu",
    "torchao": "0.18.0",
    "torch_tensorrt": None,
    "cpu_model": "Test CPU",
    "cpu_flags": ["avx2"],
    "threads": 2,
    "world_size": 1,
}


def bench(
    name: str,
    samples_ms: list[float],
    *,
    model: str = "m",
    variant: str = "baseline",
    peak_mem_mib: float = 100.0,
    rel_l2: float = 0.0,
    speedup: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    x = np.asarray(samples_ms)
    info = {
        "model": model,
        "size": "tiny",
        "variant": variant,
        "device": "cpu",
        "samples_ms": list(map(float, x)),
        "median_ms": float(np.median(x)),
        "p90_ms": tail_ms(x, "p90_ms"),  # the runner's own rule: None below 64 samples
        "peak_mem_mib": peak_mem_mib,
        "accuracy": {"rel_l2": rel_l2, "cosine": 1.0, "max_abs": 0.0, "finite": 1.0},
        **extra,
    }
    if speedup is not None:
        info["speedup"] = speedup
    return {
        "name": f"test_step[{name}]",
        "fullname": f"benchmarks/test_models.py::test_step[{name}]",
        "stats": {"median": float(np.median(x)) / 1e3, "min": float(x.min()) / 1e3, "mean": float(x.mean()) / 1e3},
        "extra_info": info,
    }


def run_json(
    benchmarks: list[dict[str, Any]],
    fp: dict[str, Any] | None = None,
    commit: str = "abc",
    when: str = "2026-11-01T00:00:00+00:00",
) -> dict[str, Any]:
    fp = copy.deepcopy(fp or FP)
    return {
        "machine_info": {"perfgate": {"fingerprint": fp}},
        "commit_info": {"id": commit, "time": when},
        "datetime": when,
        "version": "5.3.1",
        "benchmarks": benchmarks,
        "perfgate": {
            "schema": SCHEMA,
            "fingerprint": fp,
            "fingerprint_id": "cpu-test",
            "commit": commit,
            "recorded_at": when,
        },
    }


# A sub-run's time limit is a hang guard, not a timing check: on the 2-core VM at load 8-16 a
# sub-run that takes 100 s quietly took over 600 s (and failed five tests that way), and CI allows
# 90 minutes. Generous, so only a real hang trips it.
HANG_GUARD_S = 1800


# Change points need the report extra's ruptures: a machine without it (the GPU image, which has
# the machine's own packages) skips those tests with the fix instead of failing on the import.
def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


needs_ruptures = pytest.mark.skipif(
    not importable("ruptures"),
    reason="ruptures is not installed: pip install -e '.[report]' (the dev extra has it)",
)
needs_pygal = pytest.mark.skipif(
    not importable("pygal"),
    reason="pygal is not installed (--benchmark-histogram): pip install -e '.[report]' (the dev extra has it)",
)


def counted_run(
    out: Any,
    *,
    commit: str | None = None,
    scale: float = 1.0,
    key: str | None = None,
    counted: bool = True,
) -> Any:
    """A real CPU run's results file (tests/data/history-step's first run: the suite on the tiny
    PhysicsNeMo block) with its case counted as the count pass records it: the committed count
    baseline's figures for that case as a `CountPass` (`scale`: its instructions times this), put
    into the record by `perfgate.counts.suite.annotate` and written back with `to_extra_info`.
    `key`: count under another key (another valgrind); `commit`: the commit the run says it measured."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from perfgate.counts import launcher as instr
    from perfgate.counts import suite
    from perfgate.results import Benchmark, read_benchmark_json

    root = Path(__file__).resolve().parents[1]
    run = sorted((root / "tests" / "data" / "history-step").glob("*/0001_*.json"))[0]
    committed = json.loads(next((root / "baselines" / "counts").glob("*.json")).read_text())
    det = committed["what_determines_counts"]
    p = instr.CountPass(virtual_cpu=det["virtual_cpu"], torch=det["torch"], python=det["python"], wall_s=61.0)
    p.valgrind = key or det["valgrind"]
    data = read_benchmark_json(run)
    if commit is not None:
        data["commit_info"]["id"] = data["perfgate"]["commit"] = commit
    for raw in data["benchmarks"]:
        b = Benchmark.from_json(raw)
        entry = committed["cases"][b.case_id]
        block = entry["instructions"]
        total = round(block["total"] * scale)
        p.counts[b.case_id] = instr.CaseCount(
            case=b.case_id, instructions=total, steps=block["steps"], functions=entry["instructions_functions"]
        )
        counts = suite.SessionCounts(
            config=suite.CountsConfig(ops=False),
            fields={b.case_id: suite._fields(p, b.case_id)} if counted else {},
            skipped={},
            portable=None,
            portable_path=None,
            pass_=p,
        )
        record = suite.annotate(counts, SimpleNamespace(id=b.case_id, device="cpu"), b.record, None)
        raw["extra_info"] = record.to_extra_info()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(data))
    return Path(out)


def kept_gpu_records(run: str, name: str) -> dict:
    """The records of a gzipped pytest-benchmark JSON a GPU run left in docs/data/RUN/NAME.json.gz
    (perfgate.results.load_records: by case id)."""
    import gzip
    import tempfile

    from perfgate.results import load_records

    data = Path(__file__).resolve().parents[1] / "docs" / "data" / run / f"{name}.json.gz"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.json"
        path.write_bytes(gzip.decompress(data.read_bytes()))
        return load_records(path)


def empty_pyproject(folder: Path) -> Path:
    """A pyproject.toml without [tool.perfgate], for a command to run under the defaults whatever the
    repository's own says (a --pyproject naming no file is refused: perfgate.commands.project_file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "empty-pyproject.toml"
    path.write_text("")
    return path
