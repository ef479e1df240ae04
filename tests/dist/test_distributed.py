"""Distributed runs: topology, lockstep rules, the data-parallel step kinds, the aggregation of
per-rank results (synthetic files), `perfgate aggregate`, and a real 2-rank torchrun run on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.dist import ranks as pd
from perfgate.gate import store
from perfgate.gate.policy import Override, Policy
from perfgate.gate.settings import GateSettings
from perfgate.measure import topology as topo_mod
from perfgate.measure.core import WarmupRule, measure
from perfgate.measure.stats import StopRule
from perfgate.output import ranks as ranks_text
from tests.helpers import bench, empty_pyproject, run_json

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- synthetic per-rank runs


def rank_run(rank: int, world: int, cases: list[dict], *, backend: str = "gloo") -> dict:
    """One rank's result file as the plugin writes it: a perfgate run plus the rank block."""
    block = {
        "rank": rank,
        "world_size": world,
        "local_rank": rank,
        "local_world_size": world,
        "dist_backend": backend,
        "num_threads": 1,
        "host": "node0",
        "rank_device": "cpu",
    }
    data = run_json(cases)
    data["perfgate_dist"] = block
    for b in data["benchmarks"]:
        b["extra_info"].update(block)
    return data


def case(name: str, samples_ms: list[float], *, step: str = "dp-inference", frames_per_step: float = 4.0, **kw) -> dict:
    med = float(np.median(samples_ms))
    b = bench(
        name,
        samples_ms,
        step=step,
        unit="frames",
        items_per_step={"frames": frames_per_step},
        throughput={"frames": frames_per_step / (med / 1e3)},
        fps=frames_per_step / (med / 1e3),
        **kw,
    )
    b["stats"]["data"] = [s / 1e3 for s in samples_ms]
    return b


def two_ranks(step: str = "dp-inference", **kw) -> dict[int, dict]:
    return {
        0: rank_run(
            0,
            2,
            [case("m-tiny-baseline", [10.0, 10.2, 9.9, 10.1, 10.0], step=step, peak_mem_mib=100.0, rel_l2=1e-7, **kw)],
        ),
        1: rank_run(
            1,
            2,
            [case("m-tiny-baseline", [12.0, 12.1, 11.9, 12.2, 12.0], step=step, peak_mem_mib=140.0, rel_l2=3e-7, **kw)],
        ),
    }


def test_data_parallel_case_sums_throughput_and_takes_the_slowest_ranks_latency():
    runs = two_ranks()
    agg = pd.aggregate(runs)
    store.validate(agg, Path("aggregated.json"))  # what compare/record accept
    [b] = agg["benchmarks"]
    info = b["extra_info"]
    r0, r1 = (runs[r]["benchmarks"][0]["extra_info"] for r in (0, 1))
    assert info["slowest_rank"] == 1 and info["world_size"] == 2
    assert info["median_ms"] == r1["median_ms"] and info["samples_ms"] == r1["samples_ms"]
    assert b["stats"] == runs[1]["benchmarks"][0]["stats"]  # pytest-benchmark's view is the slowest rank too
    assert info["throughput"]["frames"] == pytest.approx(r0["throughput"]["frames"] + r1["throughput"]["frames"])
    assert info["fps"] == pytest.approx(info["throughput"]["frames"]) and info["throughput_aggregation"] == "sum"
    assert info["items_per_step"] == {"frames": 8.0}
    assert info["peak_mem_mib"] == 140.0 and info["accuracy"]["rel_l2"] == 3e-7
    assert [s["rank"] for s in info["ranks"]] == [0, 1] and info["ranks"][0]["median_ms"] == r0["median_ms"]
    across = info["across_ranks"]["median_ms"]
    assert (across["min"], across["max"]) == (r0["median_ms"], r1["median_ms"])
    assert across["mean"] == pytest.approx((r0["median_ms"] + r1["median_ms"]) / 2)
    assert info["across_ranks"]["throughput.frames"]["max"] == r0["throughput"]["frames"]
    assert "rank" not in info and info["device"] == "cpu"
    d = agg["perfgate"]["distributed"]
    assert d["world_size"] == 2 and d["ranks"] == [0, 1] and d["missing_ranks"] == [] and d["backend"] == "gloo"
    assert "perfgate_dist" not in agg and agg["perfgate"]["fingerprint"]["world_size"] == 2


def test_replicated_case_keeps_the_slowest_ranks_throughput():
    agg = pd.aggregate(two_ranks(step="inference"))
    info = agg["benchmarks"][0]["extra_info"]
    assert info["throughput_aggregation"] == "slowest"
    assert info["throughput"] == two_ranks()[1]["benchmarks"][0]["extra_info"]["throughput"]


def test_straggler_is_a_rank_above_the_median_of_rank_medians():
    [found] = pd.find_stragglers({0: 10.0, 1: 10.0, 2: 10.2, 3: 13.0}, 10.0)
    assert (found.rank, found.median_ms, found.median_of_ranks_ms) == (3, 13.0, 10.1)
    assert found.excess_pct == pytest.approx(28.71, abs=0.01)
    assert pd.find_stragglers({0: 10.0, 1: 10.0, 2: 10.2, 3: 13.0}, 30.0) == []
    assert pd.find_stragglers({0: 10.0, 1: 11.0, 2: 10.0}, 10.0) == []  # exactly 10% is not more than 10%
    assert pd.find_stragglers({0: 50.0}, 0.0) == []  # one rank has no peers to lag behind
    with pytest.raises(ValueError, match="negative"):
        pd.find_stragglers({0: 1.0, 1: 2.0}, -1.0)


def test_an_aggregated_record_holds_typed_rank_summaries_and_writes_them_back_key_for_key():
    """The aggregate's per-rank summaries and stragglers are typed blocks on the record; the file's
    JSON reads back into them and writes back the same keys in the same order."""
    from perfgate.record import CaseRecord, RankSummary, Straggler

    agg = pd.aggregate(two_ranks(), threshold_pct=5.0)
    [info] = [b["extra_info"] for b in agg["benchmarks"]]
    rec = CaseRecord.from_extra_info(info)
    assert all(isinstance(r, RankSummary) for r in rec.ranks or []) and [r.rank for r in rec.ranks or []] == [0, 1]
    assert [type(s) for s in rec.stragglers or []] == [Straggler] and rec.stragglers[0].rank == 1
    again = rec.to_extra_info()
    assert json.dumps(again) == json.dumps(info)  # values and key order, the nested blocks' included


def test_aggregate_reports_stragglers_by_the_configured_threshold():
    runs = two_ranks()  # medians 10 and 12: rank 1 is 9.1% above their median 11
    assert pd.aggregate(runs, threshold_pct=10.0)["benchmarks"][0]["extra_info"]["stragglers"] == []
    agg = pd.aggregate(runs, threshold_pct=5.0)
    [s] = agg["benchmarks"][0]["extra_info"]["stragglers"]
    assert s["rank"] == 1 and s["excess_pct"] == pytest.approx(100 * (12 / 11 - 1))
    assert agg["perfgate"]["distributed"]["stragglers"] == 1
    assert any("straggler" in line and "rank 1" in line for line in ranks_text.summary_lines(agg))


def test_missing_ranks_unreliable_ranks_and_in_run_speedups():
    runs = {
        r: rank_run(
            r,
            3,
            [case("m-tiny-baseline", [10.0 + r] * 5), case("m-tiny-bf16", [5.0 + r] * 5, variant="bf16", speedup=9.0)],
        )
        for r in (0, 2)
    }
    runs[2]["benchmarks"][1]["extra_info"]["unreliable"] = "other processes used 3 cores"
    agg = pd.aggregate(runs)
    base, bf16 = (b["extra_info"] for b in agg["benchmarks"])
    assert agg["perfgate"]["distributed"]["missing_ranks"] == [1] and base["missing_ranks"] == [1]
    assert bf16["unreliable"] == "rank 2: other processes used 3 cores" and "unreliable" not in base
    assert (
        bf16["speedup"] == pytest.approx(12.0 / 7.0) and bf16["speedup_basis"] == "median_ms"
    )  # slowest eager median over slowest bf16 median
    assert any("no results from rank(s) 1" in line for line in ranks_text.summary_lines(agg))


def test_a_failing_or_silent_rank_refuses_recording():
    assert pd.record_refusal({0: 0, 1: 0}, 2) is None
    assert pd.record_refusal({0: 0, 1: 1}, 2) == "the run failed on rank 1 (exit 1)"
    assert pd.record_refusal({0: 0}, 2) == "no exit status from rank(s) 1"


def test_rank_table_lists_every_rank_and_the_aggregate():
    rows = ranks_text.rank_rows(pd.aggregate(two_ranks()))
    assert [r[1] for r in rows] == ["0", "1", "all"]
    assert rows[0][0] == "m-tiny-baseline" and "slowest" in rows[1][7] and rows[2][4].endswith("(sum)")


def test_aggregate_rejects_nothing_and_a_contradicting_world_size():
    with pytest.raises(pd.AggregateError, match="no per-rank results"):
        pd.aggregate({})
    with pytest.raises(pd.AggregateError, match="world size 3 given"):
        pd.aggregate(two_ranks(), world_size=3)


def write_ranks(folder: Path, runs: dict[int, dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for r, d in runs.items():
        (folder / f"rank{r}.json").write_text(json.dumps(d))


def test_load_rank_runs_names_the_bad_file(tmp_path):
    with pytest.raises(pd.AggregateError, match="no rank<R>.json files"):
        pd.load_rank_runs(tmp_path)
    write_ranks(tmp_path, two_ranks())
    assert sorted(pd.load_rank_runs(tmp_path)) == [0, 1]
    (tmp_path / "rank1.json").write_text('{"benchmarks": [')
    with pytest.raises(pd.AggregateError, match=r"rank1\.json: truncated JSON"):
        pd.load_rank_runs(tmp_path)
    write_ranks(tmp_path, {1: two_ranks()[0]})
    with pytest.raises(pd.AggregateError, match="holds rank 0's results but is named for rank 1"):
        pd.load_rank_runs(tmp_path)
    write_ranks(tmp_path, {1: two_ranks()[1], 5: rank_run(5, 8, [case("m-tiny-baseline", [1.0] * 3)])})
    with pytest.raises(pd.AggregateError, match="different world sizes"):
        pd.load_rank_runs(tmp_path)


def test_cli_aggregate_writes_a_run_that_compare_history_and_report_read(tmp_path, capsys):
    write_ranks(tmp_path / "dist", two_ranks())
    out = tmp_path / "aggregated.json"
    assert main(["aggregate", str(tmp_path / "dist"), "-o", str(out)]) == 0
    assert "aggregated 2 of 2 ranks" in capsys.readouterr().out
    agg = store.load(out)
    assert agg["benchmarks"][0]["extra_info"]["slowest_rank"] == 1
    assert main(["compare", str(out), str(out), "--pyproject", str(empty_pyproject(tmp_path))]) == 0
    assert (
        main(
            [
                "history",
                str(out),
                "--brief",
                "--metric",
                "throughput",
                "--baselines",
                str(tmp_path / "b"),
                "--storage",
                str(tmp_path / "s"),
                "--fingerprint",
                "cpu-test",
            ]
        )
        == 0
    )
    assert "m [tiny] baseline" in capsys.readouterr().out
    assert main(["report", str(out), "-o", str(tmp_path / "r.html"), "--no-history"]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0
    assert main(["aggregate", str(tmp_path / "dist"), "--straggler-pct", "5", "--fail-on-straggler"]) == 1
    assert (tmp_path / "dist" / "aggregated.json").is_file()  # the default output


@pytest.mark.parametrize(
    "argv, message",
    [
        (["aggregate", "nosuch"], "nosuch: no such folder"),
        (["aggregate", ".", "--straggler-pct", "-1"], "--straggler-pct -1"),
    ],
)
def test_cli_aggregate_bad_input_is_one_line_exit_4(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


# ----------------------------------------------------------------------------- topology and lockstep


def test_topology_from_torchrun_environment():
    assert topo_mod.topology({}) == topo_mod.Topology()
    t = topo_mod.topology({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (t.rank, t.world_size, t.local_rank, t.local_world_size, t.distributed) == (3, 4, 1, 2, True)
    with pytest.raises(ValueError, match="outside WORLD_SIZE"):
        topo_mod.topology({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        topo_mod.topology({"WORLD_SIZE": "two"})
    assert topo_mod.under_launcher({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert not topo_mod.under_launcher({"RANK": "0", "WORLD_SIZE": "1"})


@pytest.mark.parametrize(
    "device, local_rank, backend, rank_device",
    [
        ("cpu", 1, "gloo", "cpu"),
        ("cuda", 3, "nccl", "cuda:3"),
        ("cuda:0", 3, "nccl", "cuda:0"),
    ],
)
def test_backend_and_device_follow_the_device(device, local_rank, backend, rank_device):
    assert topo_mod.backend_for(device) == backend and topo_mod.rank_device(device, local_rank) == rank_device


def test_threads_split_the_cores_between_local_ranks():
    assert [topo_mod.threads_per_rank(2, n) for n in (1, 2, 3)] == [2, 1, 1]
    assert topo_mod.threads_per_rank(64, 8) == 8


def test_lockstep_rules_make_every_rank_run_the_same_number_of_steps():
    stop, warm = topo_mod.lockstep_rules(StopRule(min_rounds=3, max_rounds=5, budget_s=0.01), WarmupRule())
    calls = []
    noisy = iter(np.random.default_rng(0).uniform(0, 2e-3, 100))
    m = measure(lambda: calls.append(time.sleep(next(noisy))), "cpu", stop=stop, warmup=warm)
    assert (len(m.samples_ms), m.warmup_rounds, len(calls)) == (5, 6, 1 + 6 + 5)
    assert topo_mod.lockstep_rules(StopRule(), WarmupRule())[0].max_rounds == topo_mod.DEFAULT_LOCKSTEP_ROUNDS
    assert topo_mod.lockstep_rules(StopRule(), WarmupRule(), rounds=7)[0].min_rounds == 7


def test_lockstep_policy_drops_remeasure_and_allows_sibling_load():
    policy = Policy(
        defaults=GateSettings(contention_max=0.25),
        overrides=(
            Override(model="a*", settings={"contention_max": 0.5}),
            Override(model="b*", settings={"remeasure": 3}),
        ),
    )
    p = topo_mod.lockstep_policy(policy, 1.0)
    assert p.settings("x", "baseline", "latency") == GateSettings(contention_max=1.25, remeasure=0)
    assert p.settings("a", "baseline", "latency").contention_max == 1.5
    assert p.settings("b", "baseline", "latency").remeasure == 0


# ----------------------------------------------------------------------------- data-parallel steps


@pytest.fixture
def own_process_group():
    """The one-rank group the DDP step creates without torchrun, removed afterwards."""
    import torch.distributed as dist

    had = dist.is_initialized()
    yield
    if not had and dist.is_initialized():
        dist.destroy_process_group()


def test_data_parallel_step_kinds_are_built_in_and_their_workloads_registered_by_models():
    import models  # noqa: F401  (the registry: perfgate itself never imports it)
    from perfgate.cases.steps import STEP_KIND_BUILDERS, is_training
    from perfgate.cases.workload import MODELS

    assert (
        pd.DATA_PARALLEL_STEP_KINDS <= set(STEP_KIND_BUILDERS)
        and is_training("ddp-train")
        and not is_training("dp-inference")
    )
    assert (MODELS["physicsnemo-ddp-train"].step_kind, MODELS["physicsnemo-ddp-train"].data) == ("ddp-train", "device")
    assert MODELS["vjepa2-dp-inference"].step_kind == "dp-inference"


def test_rank_batches_share_the_reference_call_then_differ_per_rank():
    import models  # noqa: F401
    from perfgate.cases.steps import rank_batches
    from perfgate.cases.workload import build_workload, family, get_model

    wl = build_workload(get_model("vjepa2-dp-inference"), "tiny", "cpu", seed=5)
    r0, r1 = (rank_batches(wl, wl.inputs, r, 2) for r in (0, 1))
    assert torch.equal(r0(0)[0], wl.inputs[0]) and torch.equal(r1(0)[0], wl.inputs[0])
    assert torch.equal(r1(3)[0], family(wl.spec).example_inputs(wl.config, seed=6)[0])
    assert not torch.equal(r0(1)[0], r1(1)[0])
    half = rank_batches(wl, tuple(t.bfloat16() for t in wl.inputs), 1, 2)(1)[0]
    assert half.dtype == torch.bfloat16  # the variant's dtype
    wl = build_workload(get_model("physicsnemo-ddp-train"), "tiny", "cpu")
    gen = family(wl.spec).device_batch
    shape = tuple(wl.inputs[0].shape)
    src = rank_batches(wl, wl.inputs, 1, 2)
    assert torch.equal(src(0)[0], gen(shape, index=0, device="cpu", dtype=torch.float32))
    assert [torch.equal(src(i)[0], gen(shape, index=2 * i + 1, device="cpu", dtype=torch.float32)) for i in (1, 2)] == [
        True,
        True,
    ]


@pytest.mark.parametrize("model, unit", [("physicsnemo-ddp-train", "examples"), ("vjepa2-dp-inference", "frames")])
def test_data_parallel_steps_run_in_one_process(model, unit, own_process_group):
    import models  # noqa: F401
    from perfgate.cases.runner import Case, RunOptions, run_case

    r = run_case(
        Case(model=model, size="tiny", variant="baseline", device="cpu"),
        RunOptions(stop=StopRule(min_rounds=2, max_rounds=2), warmup=WarmupRule(min_rounds=1, max_rounds=1, window=1)),
    )
    assert r.extra_info["accuracy"]["rel_l2"] == 0.0
    assert (
        r.extra_info["step"] == kind_of(model) and r.extra_info["unit"] == unit and len(r.measurement.samples_ms) == 2
    )
    if model == "physicsnemo-ddp-train":
        import torch.distributed as dist

        assert dist.is_initialized() and dist.get_world_size() == 1 and dist.get_backend() == "gloo"


def kind_of(model: str) -> str:
    from perfgate.cases.workload import MODELS

    return MODELS[model].step_kind


# ----------------------------------------------------------------------------- the plugin


def test_plugin_is_a_no_op_without_torchrun(pytester, tmp_path):
    pytester.makepyfile(test_x="def test_x():\n    assert True\n")
    dist_dir = tmp_path / "dist"
    r = pytester.runpytest_inprocess(
        "-p", "perfgate.plugin.torchrun", "--perfgate-dist-dir", str(dist_dir), "-p", "no:cacheprovider"
    )
    r.assert_outcomes(passed=1)
    assert not dist_dir.exists() and "perfgate: ranks" not in r.stdout.str()


def test_two_rank_torchrun_run_aggregates_into_a_gateable_result(tmp_path, capsys):
    """The suite under `torchrun --nproc-per-node 2` on gloo: per-rank files, rank 0's aggregate."""
    dist_dir = tmp_path / "dist"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "GITHUB_"))
    }
    if sys.platform == "linux":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one node: loopback, whatever the container's hostname resolves to
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "pytest",
        "benchmarks",
        "-p",
        "perfgate.plugin.torchrun",
        "-p",
        "no:cacheprovider",
        "--perfgate-models",
        "physicsnemo-ddp-train,vjepa2-dp-inference",
        "--perfgate-variants",
        "baseline",
        "--perfgate-device",
        "cpu",
        "--perfgate-smoke",
        "--perfgate-no-gate",
        "--perfgate-dist-dir",
        str(dist_dir),
        "--perfgate-verdicts",
        str(tmp_path / "verdicts.json"),
        "--perfgate-inductor-cache",
        str(tmp_path / "inductor"),
        "--benchmark-json",
        str(tmp_path / "user.json"),
        "--perfgate-baselines",
        str(tmp_path / "bl"),
        "--perfgate-record",
        "e2e",
    ]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    wall_s = time.perf_counter() - t0
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    print(f"2-rank torchrun run: {wall_s:.1f} s")
    assert "aggregated 2 of 2 ranks (gloo)" in p.stdout

    ranks = {r: store.load(dist_dir / f"rank{r}.json") for r in (0, 1)}
    agg = store.load(dist_dir / "aggregated.json")
    assert json.loads((tmp_path / "user.json").read_text()) == agg  # --benchmark-json gets the aggregate
    [recorded] = (tmp_path / "bl").glob("*/0001_e2e.json")  # and so does --perfgate-record, once
    assert store.load(recorded) == agg and recorded.parent.name == agg["perfgate"]["fingerprint_id"]
    assert agg["perfgate"]["distributed"]["world_size"] == 2 and agg["perfgate"]["distributed"]["ranks"] == [0, 1]
    threads = topo_mod.threads_per_rank(topo_mod.usable_cores(), 2)
    assert agg["perfgate"]["fingerprint"]["threads"] == threads
    assert {b["extra_info"]["model"] for b in agg["benchmarks"]} == {"physicsnemo-ddp-train", "vjepa2-dp-inference"}
    for b in agg["benchmarks"]:
        info = b["extra_info"]
        per_rank = [
            next(x["extra_info"] for x in ranks[r]["benchmarks"] if x["fullname"] == b["fullname"]) for r in (0, 1)
        ]
        assert [i["rank"] for i in per_rank] == [0, 1] and all(i["num_threads"] == threads for i in per_rank)
        assert all(i["dist_backend"] == "gloo" and i["world_size"] == 2 for i in per_rank)
        assert info["world_size"] == 2 and [s["rank"] for s in info["ranks"]] == [0, 1]
        assert info["median_ms"] == max(i["median_ms"] for i in per_rank) == per_rank[info["slowest_rank"]]["median_ms"]
        unit = info["unit"]
        assert info["throughput"][unit] == pytest.approx(sum(i["throughput"][unit] for i in per_rank))
        assert info["accuracy"]["rel_l2"] == 0.0  # every rank's first call checked against the reference
        assert all(len(i["samples_ms"]) == 5 for i in per_rank)  # lockstep: the same rounds on both ranks
        assert isinstance(info["stragglers"], list) and "median_ms" in info["across_ranks"]
    assert (
        main(
            [
                "compare",
                str(dist_dir / "aggregated.json"),
                str(dist_dir / "aggregated.json"),
                "--pyproject",
                str(ROOT / "pyproject.toml"),
                "--show-unchanged",  # every verdict listed, the unchanged ones too
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "physicsnemo-ddp-train-tiny-baseline" in out
