"""Several processes, one run: xdist workers bound one per GPU, `--perfgate-shard I/N` splits and
`perfgate aggregate` merging them (perfgate.dist.workers, perfgate.dist.shard, perfgate.plugin.xdist)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.cases.selection import expand_cases
from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.dist import shard
from perfgate.dist import workers as parallel
from perfgate.gate import store
from perfgate.gate.verdict_file import load_verdicts

ROOT = Path(__file__).resolve().parents[2]

# Three model groups of two variants each (their own process's eager baseline gives the bf16
# speedup), plus a variant every CPU skips: the skips must survive the merge too.
MODELS = "physicsnemo-block,physicsnemo-train,physicsnemo-train-host-data"
VARIANTS = "baseline,bf16,cudagraphs"


def _cases(models: str = MODELS, variants: str = VARIANTS) -> list:
    return expand_cases("cpu", models=models.split(","), sizes_=["tiny"], variants=variants.split(","))


# ----------------------------------------------------------------------------- the split


@pytest.mark.parametrize("text, index, count", [("2/4", 2, 4), (" 1 / 1 ", 1, 1), ("8/8", 8, 8)])
def test_shard_spec_parses_i_of_n(text: str, index: int, count: int) -> None:
    spec = shard.parse(text)
    assert (spec.index, spec.count) == (index, count)
    assert spec.results_name == f"shard-{index}-of-{count}.json"


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0", ""])
def test_a_bad_shard_spec_names_the_option_and_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"--perfgate-shard .*e\.g\. --perfgate-shard \d/\d"):
        shard.parse(text)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 12])
def test_shards_cover_every_case_once_and_keep_a_models_cases_together(count: int) -> None:
    cases = _cases("physicsnemo-*,owl-*,vjepa2-encoder", "baseline,bf16,int8-dynamic,cudagraphs")
    parts = [shard.apply(cases, shard.ShardSpec(i, count), {}, "count")[0] for i in range(1, count + 1)]
    ids = [c.id for part in parts for c in part]
    assert sorted(ids) == sorted(c.id for c in cases) and len(ids) == len(set(ids))
    shard_of_group: dict[str, set[int]] = {}
    for i, part in enumerate(parts, 1):
        for c in part:
            shard_of_group.setdefault(parallel.group_name(c), set()).add(i)
    assert all(len(s) == 1 for s in shard_of_group.values())
    # Balanced by count (no durations): no shard has a whole group more than another.
    sizes = [len(p) for p in parts]
    biggest_group = max(sum(parallel.group_name(c) == g for c in cases) for g in shard_of_group)
    assert max(sizes) - min(sizes) <= biggest_group


def test_the_split_is_the_same_in_every_process_and_recorded_in_the_block() -> None:
    cases = _cases()
    a = shard.apply(cases, shard.ShardSpec(2, 3), {}, "count")
    b = shard.apply(list(_cases()), shard.ShardSpec(2, 3), {}, "count")
    assert [c.id for c in a[0]] == [c.id for c in b[0]] and a[1] == b[1]
    assert a[1]["cases"] == [c.id for c in a[0]] and a[1]["selected"] == len(cases)


def test_recorded_wall_times_balance_the_shards() -> None:
    """One slow model goes alone to a shard; the two quick ones share the other."""
    cases = _cases()
    durations = {c.id: (100.0 if c.model == "physicsnemo-train" else 1.0) for c in cases}
    parts = [shard.apply(cases, shard.ShardSpec(i, 2), durations, "wall")[0] for i in (1, 2)]
    assert {c.model for c in parts[0]} == {"physicsnemo-train"}
    assert {c.model for c in parts[1]} == {"physicsnemo-block", "physicsnemo-train-host-data"}
    by_count = [shard.apply(cases, shard.ShardSpec(i, 2), {}, "count")[0] for i in (1, 2)]
    assert [len(p) for p in by_count] == [6, 3]  # by count the slow model shares its shard


def test_a_case_belongs_to_its_models_xdist_scope() -> None:
    cases = _cases()
    groups = {c.id: parallel.group_name(c) for c in cases}
    node = "benchmarks/test_models.py::test_step[{}]"
    assert parallel.scope_of(node.format("physicsnemo-block-tiny-bf16"), groups) == parallel.scope_of(
        node.format("physicsnemo-block-tiny-baseline"), groups
    )
    assert parallel.scope_of(node.format("physicsnemo-train-tiny-bf16"), groups) != parallel.scope_of(
        node.format("physicsnemo-block-tiny-bf16"), groups
    )
    assert parallel.scope_of("tests/test_x.py::test_y", groups) is None


# ----------------------------------------------------------------------------- workers and devices


def test_each_new_worker_takes_the_least_used_gpu() -> None:
    assert parallel.worker_device("cuda", 4, {}) == "cuda:0"
    assert parallel.worker_device("cuda", 4, {0: 1, 1: 1}) == "cuda:2"
    assert parallel.worker_device("cuda", 2, {0: 1}) == "cuda:1"  # a replacement gets the freed GPU
    assert parallel.worker_device("cpu", 4, {}) == "cpu" and parallel.worker_device("cuda:3", 4, {}) == "cuda:3"


@pytest.mark.parametrize(
    "kw, fix",
    [
        ({"requested": "cuda", "workers": 8, "gpu_count": 8, "dist": "load"}, "add --dist loadgroup"),
        ({"requested": "cpu", "workers": 2, "gpu_count": 0, "dist": "loadgroup"}, "run one process"),
        ({"requested": "cuda:1", "workers": 2, "gpu_count": 8, "dist": "loadgroup"}, "pass --perfgate-device cuda"),
        ({"requested": "cuda", "workers": 3, "gpu_count": 2, "dist": "loadgroup"}, "pass -n 2"),
    ],
)
def test_workers_that_would_share_a_device_are_refused(kw: dict, fix: str) -> None:
    assert fix in parallel.xdist_problem(allow_shared=False, **kw)


def test_one_worker_per_gpu_is_accepted() -> None:
    assert (
        parallel.xdist_problem(requested="cuda", workers=8, gpu_count=8, dist="loadgroup", allow_shared=False) is None
    )
    assert parallel.xdist_problem(requested="cpu", workers=2, gpu_count=0, dist="loadgroup", allow_shared=True) is None


def test_perfgate_gpus_counts_workers() -> None:
    assert parallel.gpu_workers("auto", 8, None) == 8 and parallel.gpu_workers("4", 8, 4) == 4
    for text, gpus, n, msg in [("auto", 0, None, "no GPU here"), ("x", 8, None, "or auto"), ("2", 8, 3, "with -n 3")]:
        with pytest.raises(ValueError, match=msg):
            parallel.gpu_workers(text, gpus, n)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_", "PERFGATE_")) and k != "CI"}
    # This checkout, then the inherited path: packages that reach this Python only through it (a GPU
    # machine's carried wheels) are the ones the sub-run must import too.
    first = [*extra.pop("PYTHONPATH_FIRST", "").split(os.pathsep), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, first))
    return {**env, **extra}


def _pytest(folder: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 400):
    cmd = [sys.executable, "-m", "pytest", "-p", "perfgate.plugin.hooks", "-p", "perfgate.plugin.xdist"]
    cmd += ["-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=folder, env=env or _env(), capture_output=True, text=True, timeout=timeout)


DEVICE_PROBE = """
import json, os
from pathlib import Path

def pytest_sessionfinish(session):
    from perfgate.plugin.hooks import session_of
    wid = os.environ.get("PYTEST_XDIST_WORKER")
    if wid:
        Path(f"device-{wid}.json").write_text(json.dumps(session_of(session.config).config.device))
"""


@pytest.mark.slow
def test_perfgate_gpus_binds_one_worker_to_each_fake_gpu(tmp_path: Path) -> None:
    """Under tests/fake_cuda with two fake GPUs, `--perfgate-gpus auto` starts two workers and each
    builds its perfgate session (whose device every case is bound to, perfgate.measure.device.bind) on its
    own GPU; a third worker for two GPUs is refused before a case runs."""
    (tmp_path / "conftest.py").write_text(DEVICE_PROBE)
    (tmp_path / "test_probe.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nregistries = ["models"]\n')
    env = _env(PYTHONPATH_FIRST=str(ROOT / "tests" / "fake_cuda"), PERFGATE_FAKE_CUDA_COUNT="2")
    r = _pytest(tmp_path, "--perfgate-gpus", "auto", "--perfgate-models", "physicsnemo-block", env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    devices = {p.stem[len("device-") :]: json.loads(p.read_text()) for p in tmp_path.glob("device-*.json")}
    assert devices == {"gw0": "cuda:0", "gw1": "cuda:1"}

    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "test_models.py", tmp_path / "benchmarks")
    r = _pytest(
        tmp_path, "benchmarks", "-n", "3", "--dist", "loadgroup", "--perfgate-models", "physicsnemo-block", env=env
    )
    assert r.returncode == 4 and "-n 3 but 2 GPU(s) here" in r.stdout + r.stderr and "pass -n 2" in r.stdout + r.stderr


# ----------------------------------------------------------------------------- end to end on the CPU

# contention_max: the shared 2-core machine is busy, and a contended eager run gives no in-run
# speedup, which the test reads to see that a model's variants ran beside its eager baseline.
# Wide tolerances: the test is about which cases land where, not about their timings.
E2E_PYPROJECT = """
[tool.perfgate]
registries = ["models"]
[tool.perfgate.gate]
contention_max = 1000.0
latency_tolerance = 10.0
memory_tolerance = 10.0
speedup_tolerance = 1.0
"""


def _counts(workers: dict) -> str:
    return ", ".join(f"{w}: {len(v['cases'])}" for w, v in workers.items())


def _latency_cases(vs) -> list[str]:
    return sorted(v.case.split("::")[-1] for v in vs.verdicts if v.metric == "latency")


@pytest.mark.slow
def test_xdist_workers_and_shards_merge_into_the_single_process_case_set(tmp_path: Path, capsys) -> None:
    """Two xdist workers (recording the merged run as the baseline), then two shards gated against
    it, the first of them in two workers again, merged by `perfgate aggregate`: every case of the
    single-process selection has exactly one result or skip, and its verdicts, in each merged run."""
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "test_models.py", tmp_path / "benchmarks")
    (tmp_path / "pyproject.toml").write_text(E2E_PYPROJECT)
    common = ["benchmarks", "-q", "--perfgate-device", "cpu", "--perfgate-models", MODELS, "--perfgate-sizes", "tiny"]
    common += ["--perfgate-variants", VARIANTS, "--perfgate-smoke", "--perfgate-no-flops", "--perfgate-baselines", "bl"]
    workers = ["-n", "2", "--dist", "loadgroup", "--perfgate-allow-shared-device"]

    # The single-process run's case set: what one process collects.
    r = _pytest(tmp_path, *common, "--collect-only")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    single = {line.split("::")[-1] for line in r.stdout.splitlines() if "::test_step[" in line}
    assert len(single) == 9

    r = _pytest(
        tmp_path, *common, *workers, "--perfgate-record", "xdist", "--benchmark-json", "xdist.json",
        "--perfgate-verdicts", "xdist-verdicts.json",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "perfgate: 2 xdist worker(s) measured: gw0 on cpu (" in r.stdout  # what the workers shipped
    run = json.loads((tmp_path / "xdist.json").read_text())
    names = [b["name"] for b in run["benchmarks"]]
    assert len(names) == len(set(names)) == 6
    per_worker = run["perfgate"]["workers"]
    assert set(per_worker) == {"gw0", "gw1"} and all(w["device"] == "cpu" for w in per_worker.values())
    assert sorted(c for w in per_worker.values() for c in w["cases"]) == sorted(
        n[len("test_step[") : -1] for n in names
    )
    # A model's variants ran on its eager baseline's worker (so the bf16 case has an in-run speedup).
    groups = {
        wid: {c.removesuffix("-baseline").removesuffix("-bf16") for c in w["cases"]} for wid, w in per_worker.items()
    }
    assert not groups["gw0"] & groups["gw1"]
    assert all(b["extra_info"]["speedup"] > 0 for b in run["benchmarks"] if b["extra_info"]["variant"] == "bf16")
    xdist_vs = load_verdicts(tmp_path / "xdist-verdicts.json")
    assert {v.case.split("::")[-1] for v in xdist_vs.verdicts} | {f"test_step[{c}]" for c in xdist_vs.skipped} == single
    [recorded] = (tmp_path / "bl").glob("*/0001_xdist.json")  # the controller recorded the merged run, once
    assert store.load(recorded)["benchmarks"] == run["benchmarks"]

    shards = tmp_path / "shards"
    for spec, extra in (("1/2", workers), ("2/2", [])):
        r = _pytest(tmp_path, *common, *extra, "--perfgate-shard", spec, "--perfgate-shard-dir", str(shards))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert f"perfgate: shard {spec}: " in r.stdout
    assert main(["aggregate", str(shards)]) == 0
    out = capsys.readouterr().out
    merged = store.load(shards / "aggregated.json")
    info = merged["perfgate"]["shard"]
    assert info["basis"].startswith("case_wall_s of ") and sum(info["cases_per_shard"].values()) == 9
    assert sorted(b["name"] for b in merged["benchmarks"]) == sorted(names)
    vs = load_verdicts(shards / "verdicts.json")
    judged = {v.case.split("::")[-1] for v in vs.verdicts}
    assert judged | {f"test_step[{c}]" for c in vs.skipped} == single and len(vs.skipped) == 3
    assert _latency_cases(vs) == _latency_cases(xdist_vs) == sorted(names)  # one latency verdict per measured case
    assert all(
        v.baseline_file and v.baseline_file.endswith("0001_xdist.json") for v in vs.verdicts if v.metric == "latency"
    )
    assert "merged 2 shard(s)" in out and "gate verdicts" in out
    shard_workers = store.load(shards / "shard-1-of-2.json")["perfgate"]["workers"]
    print(
        f"\nselected {len(single)} cases; xdist run: {_counts(per_worker)} measured; shards {info['cases_per_shard']} "
        f"of {info['selected']} (shard 1/2's workers {_counts(shard_workers)}); merged {len(merged['benchmarks'])} "
        f"measured + {len(vs.skipped)} skipped, {len(vs.verdicts)} verdicts"
    )

    # A missing shard, or shards of two machines, are refused with the fix.
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("shard-1-of-2.json", "verdicts.shard-1-of-2.json"):
        shutil.copy(shards / name, partial / name)
    assert main(["aggregate", str(partial)]) == EXIT_BAD_INPUT
    assert "shard(s) 2/2 missing" in capsys.readouterr().err
    other = json.loads((shards / "shard-2-of-2.json").read_text())
    other["perfgate"]["fingerprint_id"] = "cpu-other-machine"
    for name in ("shard-2-of-2.json", "verdicts.shard-2-of-2.json"):
        shutil.copy(shards / name, partial / name)
    (partial / "shard-2-of-2.json").write_text(json.dumps(other))
    assert main(["aggregate", str(partial)]) == EXIT_BAD_INPUT
    assert "different machine fingerprints" in capsys.readouterr().err
