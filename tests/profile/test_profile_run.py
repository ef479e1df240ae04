"""`perfgate profile` on the tiny PhysicsNeMo block: report, trace, layer breakdown, CLI, evidence.

The profile's benchmark, FLOPs and accuracy are the runner's record (`test_profile_numbers_are_the_runners_record`)."""

from __future__ import annotations

import argparse
import io
import json
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from perfgate import cli
from perfgate.cases import runner
from perfgate.cases.runner import Case
from perfgate.cases.steps import make_step
from perfgate.cases.workload import build_workload, get_model
from perfgate.commands import profile as profile_cmd
from perfgate.gate import Verdict
from perfgate.profile import api, evidence, run
from perfgate.profile.config import ProfileConfig, ProfileError, ProfileUnavailable, points
from perfgate.profile.layers import BREAKDOWN_MARGIN, layer_breakdown, layer_plan
from perfgate.profile.report import FlopsSection, ProfileReport
from perfgate.profile.trace import nvtx_section, trace_steps
from perfgate.record import CaseRecord
from tests import fake_clock
from tests.fake_clock import FakeClock


@pytest.fixture
def one_thread() -> Iterator[None]:
    # A 1-thread run is not slowed by one busy neighbour on this 2-core machine (environment.md).
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def fp32_roofline(f: Mapping[str, Any] | FlopsSection | None) -> bool:
    """A share of the measured fp32 matmul peak, or the note saying the step ran above that peak: a
    peak timed while a neighbour was busy (this shared 2-core machine) gives no share, by design."""
    if isinstance(f, FlopsSection):
        f = f.to_json()
    assert f is not None
    if "peak_share" in f:
        return f["peak_dtype"] == "fp32" and 0 < f["peak_share"] <= 1
    return "above the measured fp32 peak" in f["peak_note"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ProfileReport, str]:
    stream = io.StringIO()
    cfg = ProfileConfig(
        model="physicsnemo-block",
        size="tiny",
        device="cpu",
        iterations=5,
        warmup=1,
        layer_rounds=5,
        trace_steps=2,
        precisions=("fp32", "bf16"),
        telemetry_interval_s=0.02,
        out_dir=tmp_path_factory.mktemp("profiles"),
        command="perfgate profile physicsnemo-block --device cpu",
    )
    run_dir, report = run.run_profile(cfg, stream=stream)
    return run_dir, report, stream.getvalue()


def test_run_folder_holds_json_and_self_contained_html(profiled: tuple[Path, ProfileReport, str]) -> None:
    run_dir, report, _ = profiled
    on_disk = json.loads((run_dir / "report.json").read_text())
    assert on_disk["model"] == "physicsnemo-block" and len(on_disk["points"]) == 1
    page = (run_dir / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "Layer-by-layer breakdown" in page and "Precision comparison" in page
    assert "<script" not in page and "src=" not in page and "<link" not in page  # nothing to fetch
    (p,) = report.points
    b = p.benchmark
    assert b.n == 5 and b.min_ms <= b.median_ms <= b.max_ms and b.steps_per_s > 0
    assert p.flops is not None and p.flops.gflop_per_step == pytest.approx(0.014680064)
    assert p.flops.achieved_tflops and p.flops.achieved_tflops > 0 and fp32_roofline(p.flops)
    assert p.telemetry is not None and p.telemetry.source == "psutil" and (p.telemetry.n_samples or 0) >= 1
    assert p.memory.method in ("vmhwm", "rss_sampler") and p.memory.weights_mib > 0
    assert p.precision is not None
    bf16 = p.precision.rows["bf16"]
    assert bf16.speedup and bf16.speedup > 0 and bf16.interpretation in p.precision.bands.values()
    assert bf16.accuracy and bf16.accuracy["rel_l2"] < 0.05
    assert all(s.rule and s.severity and s.finding and s.fixes for s in p.suggestions)
    # A CPU profile reads its precision bands and suggestions for the CPU and cites perfgate's own docs.
    assert "little gain on this CPU" in p.precision.bands.values() and "tensor core" not in page
    said = json.dumps(on_disk["points"][0]["suggestions"]).lower()
    assert p.suggestions and not any(w in said for w in ("tensor core", "cuda", "cudnn", "gpu", "seed 0"))
    assert all(s.source.startswith("docs/profiling.md#") for s in p.suggestions)


def test_trace_parses_and_has_events(profiled: tuple[Path, ProfileReport, str]) -> None:
    run_dir, report, _ = profiled
    trace = report.points[0].trace
    assert trace is not None
    events = json.loads((run_dir / trace.trace).read_text())["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in complete}
    assert len(complete) > 20
    assert {"perfgate.step", "module:attn", "module:mlp"} <= names  # steps and layers are labelled
    assert sum(e["name"] == "perfgate.step" for e in complete) == trace.steps == 2  # the warm-up step is left out
    assert any(n.startswith("aten::") for n in names)
    ops = trace.top_ops
    assert ops and ops[0]["self_cpu_ms"] >= ops[-1]["self_cpu_ms"]
    assert not any(o["name"].startswith(("module:", "perfgate.", "ProfilerStep")) for o in ops)
    assert (run_dir / trace.ops_table).read_text().strip()


def test_profile_numbers_are_the_runners_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark, FLOPs, accuracy and precision rows come from runner.measure_case's records."""
    seen: list[runner.CaseResult] = []
    measure_case = runner.measure_case

    def spy(*args: Any, **kwargs: Any) -> runner.CaseResult:
        seen.append(measure_case(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(runner, "measure_case", spy)
    cfg = ProfileConfig(
        model="physicsnemo-block",
        size="tiny",
        variant="autocast-bf16",
        device="cpu",
        iterations=4,
        warmup=1,
        layer_rounds=2,
        trace_steps=1,
        precisions=("fp32", "bf16"),
        telemetry_interval_s=0.02,
        out_dir=tmp_path,
    )
    _, report = run.run_profile(cfg, stream=io.StringIO())
    (p,) = report.points
    main, fp32, bf16 = (r.record for r in seen)
    assert [main.variant, fp32.variant, bf16.variant] == ["autocast-bf16", "baseline", "autocast-bf16"]
    assert p.benchmark.samples_ms == main.samples_ms and p.benchmark.median_ms == main.median_ms
    assert p.benchmark.p90_ms == main.p90_ms and p.benchmark.throughput == main.throughput
    assert p.flops is not None
    assert p.flops.gflop_per_step == main.gflop_per_step and p.flops.achieved_tflops == main.achieved_tflops
    assert p.accuracy == main.accuracy and p.unreliable == main.unreliable
    assert p.telemetry == main.telemetry and p.telemetry_timeline == seen[0].timeline
    assert main.rounds == 4 and main.warmup_rounds == 1 and main.reference_ms is None  # fixed counts, no reference
    assert p.precision is not None and fp32.median_ms and bf16.median_ms
    rows = p.precision.rows
    assert rows["fp32"].median_ms == fp32.median_ms and rows["bf16"].accuracy == bf16.accuracy
    assert rows["bf16"].speedup == fp32.median_ms / bf16.median_ms


def test_trace_ranges_name_layers_and_leave_no_hooks(tmp_path: Path) -> None:
    toy = Toy(n_blocks=2)
    x = torch.randn(1, 3, 16, 16)
    t = trace_steps(lambda: toy(x), torch.device("cpu"), tmp_path / "t.json", steps=1, top_n=5, module=toy)
    names = {e["name"] for e in json.loads(Path(t.trace).read_text())["traceEvents"] if e.get("ph") == "X"}
    assert {"module:patch_embed", "module:blocks.1.attn", "module:norm"} <= names and t.module_ranges
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in toy.modules())
    assert not api._STATE.record  # annotate no longer feeds the torch profiler
    assert (tmp_path / "t.ops.txt").read_text().strip()


def test_nvtx_section_says_why_it_is_skipped(tmp_path: Path) -> None:
    def step() -> None:
        raise AssertionError("a skipped NVTX section runs no step")

    out = nvtx_section(step, torch.device("cpu"), None, 2, "perfgate profile m", tmp_path)
    assert out.skipped in (
        "NVTX ranges matter on a CUDA device",
        "NVTX needs a CUDA build of torch (this one has none)",
        "NVTX is turned off (PERFGATE_NVTX=0)",
    )


def test_progress_goes_to_the_stream(profiled: tuple[Path, ProfileReport, str]) -> None:
    text = profiled[2]
    assert "[1/7]" in text and "layer breakdown" in text and "[7/7] writing report" in text


def test_layer_breakdown_adds_up_to_the_measured_total(one_thread: None) -> None:
    """On the real block, what holds however busy the machine is; the timing itself is checked on a
    fake clock below (the parts against the plain forward read 0.33 beside two CPU burners)."""
    wl = build_workload(get_model("physicsnemo-block"), "tiny", "cpu")
    import contextlib

    lay = layer_breakdown(wl.module, wl.inputs, torch.device("cpu"), contextlib.nullcontext, rounds=15)
    names = {c.name for c in lay.components}
    assert names == {"norm1", "attn", "norm2", "mlp"}
    # The parts plus the root's own ops are the instrumented forward, exactly.
    assert lay.parts_sum_ms + lay.unattributed_ms == pytest.approx(lay.total_mean_ms, rel=1e-9)
    assert sum(c.share or 0.0 for c in lay.components) <= 1.0 + 1e-9
    assert lay.sum_vs_plain is not None and lay.sum_vs_plain > 0 and lay.margin == BREAKDOWN_MARGIN
    assert lay.attention.modules == ["attn"] and lay.attention.share and 0 < lay.attention.share < 1
    assert lay.blocks == [] and lay.patch_embedding.share is None


class _Takes(nn.Module):
    """A part that takes `ms` of the fake clock per call."""

    def __init__(self, clock: FakeClock, ms: float) -> None:
        super().__init__()
        self.clock, self.ms = clock, ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.takes(self.ms)
        return x


class _Block(nn.Module):
    """norm1 1 ms, attn 2, norm2 0.5, mlp 1.5; an un-instrumented forward takes `plain_extra_ms` more
    in the block's own code (as a stalled plain round would)."""

    def __init__(self, clock: FakeClock, plain_extra_ms: float) -> None:
        super().__init__()
        self.clock, self.plain_extra_ms = clock, plain_extra_ms
        self.norm1, self.attn = _Takes(clock, 1.0), _Takes(clock, 2.0)
        self.norm2, self.mlp = _Takes(clock, 0.5), _Takes(clock, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.norm1._forward_pre_hooks:  # no hook timing the parts: a plain forward
            self.clock.takes(self.plain_extra_ms)
        return self.mlp(self.norm2(self.attn(self.norm1(x))))


@pytest.mark.parametrize(
    "plain_extra_ms, sum_vs_plain, consistent",
    [(0.0, 1.0, True), (1.25, 0.8, True), (2.5, 5.0 / 7.5, False), (5.0, 0.5, False)],
)
def test_layer_breakdown_shares_and_its_margin_on_a_fake_clock(
    monkeypatch: pytest.MonkeyPatch, plain_extra_ms: float, sum_vs_plain: float, consistent: bool
) -> None:
    import contextlib

    clock = fake_clock.install(monkeypatch)
    block = _Block(clock, plain_extra_ms)
    lay = layer_breakdown(block, (torch.zeros(1),), torch.device("cpu"), contextlib.nullcontext, rounds=5)
    shares = {c.name: c.share for c in lay.components}
    assert shares == pytest.approx({"norm1": 0.2, "attn": 0.4, "norm2": 0.1, "mlp": 0.3})
    assert (lay.total_median_ms, lay.parts_median_ms, lay.unattributed_ms) == pytest.approx((5.0, 5.0, 0.0))
    assert lay.plain_median_ms == pytest.approx(5.0 + plain_extra_ms)
    assert lay.attention.modules == ["attn"] and lay.attention.share == pytest.approx(0.4)
    assert lay.sum_vs_plain == pytest.approx(sum_vs_plain) and lay.consistent is consistent


class Toy(nn.Module):
    """A generic shape: patch embedding, a ModuleList of blocks with attention inside, a head."""

    def __init__(self, n_blocks: int = 6) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, 16, 4, stride=4)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"attn": nn.MultiheadAttention(16, 2, batch_first=True), "mlp": nn.Linear(16, 16)})
            for _ in range(n_blocks)
        )
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, C)
        for b in self.blocks:
            t = t + b["attn"](t, t, t, need_weights=False)[0]
            t = t + b["mlp"](t)
        return self.norm(t)


def test_layer_plan_is_generic() -> None:
    plan = layer_plan(Toy())
    assert plan.top["blocks"] == [
        f"blocks.{i}.{m}" for i in range(6) for m in ("attn", "mlp")
    ]  # a ModuleDict has no forward
    assert plan.top["patch_embed"] == ["patch_embed"] and plan.patch == ["patch_embed"]
    assert plan.blocks == {"blocks": {f"blocks.{i}": [f"blocks.{i}.attn", f"blocks.{i}.mlp"] for i in range(6)}}
    assert plan.attention == [f"blocks.{i}.attn" for i in range(6)]


def test_nested_module_lists_are_timed_through_their_members() -> None:
    class Stages(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleList(nn.ModuleList(nn.Linear(8, 8) for _ in range(2)) for _ in range(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for stage in self.stages:
                for layer in stage:
                    x = layer(x)
            return x

    import contextlib

    plan = layer_plan(Stages())
    assert plan.top == {"stages": ["stages.0.0", "stages.0.1", "stages.1.0", "stages.1.1"]}
    assert plan.blocks == {
        "stages": {"stages.0": ["stages.0.0", "stages.0.1"], "stages.1": ["stages.1.0", "stages.1.1"]},
        "stages.0": {"stages.0.0": ["stages.0.0"], "stages.0.1": ["stages.0.1"]},
        "stages.1": {"stages.1.0": ["stages.1.0"], "stages.1.1": ["stages.1.1"]},
    }
    lay = layer_breakdown(
        Stages(), (torch.randn(4, 8),), torch.device("cpu"), contextlib.nullcontext, rounds=3, warmup=1
    )
    assert lay.components[0].mean_ms > 0 and all(g.total_ms > 0 for g in lay.blocks)
    assert lay.main_blocks == "stages"


def test_block_statistics_and_slowest_five() -> None:
    import contextlib

    lay = layer_breakdown(
        Toy(), (torch.randn(2, 3, 32, 32),), torch.device("cpu"), contextlib.nullcontext, rounds=4, warmup=1
    )
    (group,) = lay.blocks
    assert group.path == "blocks" and group.n == 6 and len(group.per_block) == 6 and lay.main_group() is group
    slow = [b.median_ms for b in group.slowest]
    assert len(slow) == 5 and slow == sorted(slow, reverse=True)
    blocks = next(c for c in lay.components if c.name == "blocks")
    assert blocks.modules == 12 and blocks.blocks == 6 and blocks.mean_ms == pytest.approx(group.total_ms)
    assert lay.main_blocks == "blocks"
    assert lay.patch_embedding.share is not None and lay.attention.share is not None


def test_sweep_points() -> None:
    base = dict(model="physicsnemo-block", device="cpu")
    assert [p.label for p in points(ProfileConfig(**base))] == [""]
    pts = points(ProfileConfig(**base, sweep=("img_size", (128, 256))))
    assert [p.options for p in pts] == [{"img_size": 128}, {"img_size": 256}] and pts[0].slug == "img_size-128"
    assert [p.size for p in points(ProfileConfig(**base, sweep=("size", ("tiny", "medium"))))] == ["tiny", "medium"]
    assert [p.batch for p in points(ProfileConfig(**base, sweep=("batch", (1, 2))))] == [1, 2]
    with pytest.raises(ProfileError, match="unknown model"):
        points(ProfileConfig(model="nope", device="cpu"))


def test_bad_configurations_are_reported_before_profiling(tmp_path: Path) -> None:
    base = dict(model="physicsnemo-block", device="cpu", out_dir=tmp_path)
    with pytest.raises(ProfileError, match="known precisions are fp32, bf16, fp16"):
        run.run_profile(ProfileConfig(**base, precisions=("fp8",)))
    with pytest.raises(ProfileError, match="has no size 'huge'"):
        run.run_profile(ProfileConfig(**base, size="huge"))
    with pytest.raises(ProfileError, match="unknown variant"):
        run.run_profile(ProfileConfig(**base, variant="turbo"))
    if not torch.cuda.is_available():
        with pytest.raises(ProfileUnavailable, match="no CUDA device"):
            run.run_profile(ProfileConfig(**{**base, "device": "cuda"}))
    assert list(tmp_path.iterdir()) == []  # no half-made run folder


def test_cli_quick_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "profile",
            "physicsnemo-block",
            "--device",
            "cpu",
            "--skip-detailed",
            "--iterations",
            "3",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert "Mean" in out and "Median" in out and "GFLOP/step" in out and "report:" in out
    assert "[1/4]" in err and "[4/4] writing report" in err
    (run_dir,) = tmp_path.iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert "layers" not in report["points"][0] and "trace" not in report["points"][0]
    assert report["command"].startswith("perfgate profile physicsnemo-block --device cpu --iterations 3 --warmup 1")


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["profile", "nope"], cli.EXIT_BAD_INPUT, "unknown model 'nope'"),
        (
            [
                "profile",
                "physicsnemo-block",
                "--device",
                "cpu",
                "--skip-detailed",
                "--iterations",
                "1",
                "--option",
                "img_size=64",
            ],
            cli.EXIT_BAD_INPUT,
            "takes no option 'img_size'",
        ),
        (["profile", "physicsnemo-block", "--option", "oops"], cli.EXIT_BAD_INPUT, "write it as KEY=VALUE"),
        (["profile", "physicsnemo-block", "--sweep", "img_size"], cli.EXIT_BAD_INPUT, "write it as KEY=V1,V2"),
    ],
    ids=["unknown-model", "unknown-option", "bad-option", "bad-sweep"],
)
def test_cli_bad_input_is_one_line(
    argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*argv, "--out", str(tmp_path)]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and message in err[-1] and err[-1].startswith("perfgate profile:")


_WHOLE = "is not a whole number; give batch multipliers, e.g. batch=1,2,4"
_NO_FOLDER = "cannot make the run folder there ({file} is a file, not a folder); give a writable folder"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--sweep", "batch=a,b"], f"--sweep batch: 'a' {_WHOLE}"),
        (["--sweep", "batch=1.5"], f"--sweep batch: 1.5 {_WHOLE}"),
        (["--out", "{file}"], f"--out {{file}}: {_NO_FOLDER}"),
        (["--out", "{file}/sub"], f"--out {{file}}/sub: {_NO_FOLDER}"),
    ],
    ids=["sweep-batch-text", "sweep-batch-fraction", "out-is-a-file", "out-under-a-file"],
)
def test_a_bad_sweep_or_out_is_one_line_naming_the_option_before_profiling(
    option: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("a file where the run folder would go\n")
    argv = [
        "profile",
        "physicsnemo-block",
        "--device",
        "cpu",
        "--skip-detailed",
        "--iterations",
        "1",
        "--out",
        str(tmp_path),
    ]
    argv += [o.replace("{file}", str(file)) for o in option]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == f"perfgate profile: {message.replace('{file}', str(file))}\n"
    assert list(tmp_path.iterdir()) == [file]  # nothing profiled, no run folder


def test_cli_cuda_on_a_cpu_machine_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert (
        cli.main(["profile", "physicsnemo-block", "--device", "cuda", "--out", str(tmp_path)]) == cli.EXIT_UNAVAILABLE
    )
    assert "no CUDA device" in capsys.readouterr().err


def _args(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def test_command_line_round_trips() -> None:
    args = _args(
        [
            "profile",
            "vjepa2-encoder",
            "--size",
            "tiny",
            "--num-frames",
            "8",
            "--option",
            "img_size=(64)",
            "--sweep",
            "batch=1,2",
            "--skip-detailed",
            "--iterations",
            "7",
        ]
    )
    line = profile_cmd.command_line(args)
    again = _args(shlex.split(line)[1:])
    assert vars(again) == vars(args) | {"_run": again._run}
    assert profile_cmd.parse_options(["a=1", "b=(2, 3)", "c=name", "d=None"]) == {
        "a": 1,
        "b": (2, 3),
        "c": "name",
        "d": None,
    }
    assert profile_cmd.parse_sweep("img-size=256,384") == ("img_size", (256, 384))


def test_torch_trace_reruns_the_command_with_the_variable_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_call(argv: list[str], env: dict[str, str]) -> int:
        seen.update(argv=argv, env=env)
        return 0

    monkeypatch.delenv("TORCH_TRACE", raising=False)
    monkeypatch.setattr(profile_cmd.subprocess, "call", fake_call)
    code = cli.main(["profile", "physicsnemo-block", "--variant", "compile", "--torch-trace", str(tmp_path / "tt")])
    assert code == 0
    assert seen["env"]["TORCH_TRACE"] == str((tmp_path / "tt").resolve())
    assert seen["argv"][1:] == ["-m", "perfgate", "profile", "physicsnemo-block", "--variant", "compile"]


def test_evidence_for_a_regressed_case(tmp_path: Path) -> None:
    case = Case(model="physicsnemo-block", size="tiny", variant="baseline", device="cpu")
    wl = build_workload(case.spec, case.size, "cpu")
    import contextlib

    step = make_step(wl, wl.module, wl.inputs, contextlib.nullcontext)
    ev = evidence.capture_evidence(step, "cpu", tmp_path / case.id, steps=2)
    assert json.loads(Path(ev.trace).read_text())["traceEvents"]
    assert ev.memory_snapshot is None and "memory_snapshot" not in ev.to_json()  # CUDA only
    ev = replace(ev, reproduce=evidence.reproduce_commands(case))
    assert ev.reproduce is not None and ev.reproduce.pytest.startswith(
        "python -m pytest 'benchmarks/test_models.py::test_step[physicsnemo-block-tiny-baseline]'"
    )
    assert ev.reproduce.profile == "perfgate profile physicsnemo-block --size tiny --variant baseline --device cpu"
    v = Verdict(
        case="benchmarks/test_models.py::test_step[x]",
        metric="latency",
        verdict="regression",
        message="median 2 ms vs 1 ms",
    )
    named = evidence.with_evidence(v, ev)
    assert named.message.startswith("median 2 ms vs 1 ms [trace: ") and ev.trace in named.message
    assert "reproduce: python -m pytest" in named.message and named.verdict == "regression"


def test_reproduce_commands_carry_options() -> None:
    case = Case(model="owl-world-model", size="tiny", variant="compile", device="cuda", options=(("cache_frames", 0),))
    cmds = evidence.reproduce_commands(
        case, nodeid="benchmarks/test_models.py::test_step[owl-world-model-tiny-cacheframes0-compile]"
    )
    assert "test_step[owl-world-model-tiny-cacheframes0-compile]" in cmds.pytest
    assert cmds.profile.endswith("--device cuda --option cache_frames=0")


def test_suite_integration_telemetry_flops_and_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark suite's side (runner / session): each case's extra_info gets telemetry and
    FLOPs, and a failing case's verdict names its trace."""
    from perfgate import gate
    from perfgate.cases.runner import RunOptions
    from perfgate.measure.stats import StopRule
    from perfgate.run.config import RunConfig
    from perfgate.run.runner import Host, Runner

    opts = RunOptions(
        stop=StopRule(min_rounds=3, max_rounds=3, budget_s=1.0), warm_compile=False, telemetry_interval_s=0.02
    )
    config = RunConfig(
        device="cpu",
        baselines_root=tmp_path / "baselines",
        run_options=opts,
        gate_enabled=False,
        trace="regressed",
        evidence_dir=tmp_path / "evidence",
    )
    runner = Runner(config=config, host=Host.detect(config))
    from perfgate.run import runner as runner_mod

    released, release = [], runner_mod._release
    monkeypatch.setattr(runner_mod, "_release", lambda result: (released.append(result.step), release(result)))
    case = Case(model="physicsnemo-block", size="tiny", variant="baseline", device="cpu")
    fullname = f"benchmarks/test_models.py::test_step[{case.id}]"
    regression = Verdict(case=fullname, metric="latency", verdict=gate.REGRESSION, message="median 9 ms vs 1 ms")
    monkeypatch.setattr(gate, "absolute_checks", lambda *args, **kwargs: [regression])  # a failed budget, say
    outcome = runner.run(case, fullname)
    assert outcome.record is not None, outcome.traceback
    info, verdicts = outcome.record.to_extra_info(), outcome.verdicts
    assert info["telemetry"]["source"] == "psutil" and info["telemetry"]["n_samples"] >= 1
    assert info["gflop_per_step"] == pytest.approx(0.014680064) and fp32_roofline(info)
    ev, (v,) = info["evidence"], verdicts
    assert json.loads(Path(ev["trace"]).read_text())["traceEvents"]
    assert list(ev) == ["trace", "ops_table", "top_ops", "reproduce"] and ev["reproduce"]["pytest"] in v.message
    assert json.dumps(CaseRecord.from_extra_info(info).to_extra_info()) == json.dumps(info)  # read back as written
    assert ev["trace"] in v.message and "reproduce: python -m pytest" in v.message
    assert released and released[-1] is not None  # the step (the model) is released past the case
