"""The instruction gate's sized slowdowns, timed: the time gates meet the same slowdowns
(`perfgate gate-quality --ab --sized-by`). Deterministic: calls counted, nothing timed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from perfgate.ab import interleave
from perfgate.ab import quality as quality_ab
from perfgate.ab import run as ab_run
from perfgate.cases import runner
from perfgate.cases.runner import RunOptions
from perfgate.cli import EXIT_BAD_INPUT, main
from perfgate.counts.suite import NO_COUNTS_ENV
from perfgate.gate.policy import Policy
from perfgate.quality import inject

ROOT = Path(__file__).resolve().parents[2]
# The real producer's output: the instruction gate's quality run of 2026-11-26 (perfgate.counts.quality --out).
COUNTS_QUALITY = ROOT / "docs" / "data" / "counts-quality-2026-11-26.jsonl"


@pytest.fixture
def linear_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """F.linear counting its real calls; the injection doubles calls of this one."""
    calls: list[int] = []
    real = torch.nn.functional.linear

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "linear", counted)
    return calls


def test_a_sized_op_slowdown_is_on_only_inside_its_step_and_counts_across_steps(linear_calls):
    lin, x = nn.Linear(4, 4), torch.ones(1, 4)
    plain = torch.nn.functional.linear
    step = inject.sized_step({"kind": "op", "op": "linear", "every": 3}, lambda: lin(x), lin)
    for _ in range(6):
        step()
    assert len(linear_calls) == 6 + 2  # every third call of the six done twice
    assert torch.nn.functional.linear is plain  # off between steps
    linear_calls.clear()
    lin(x)  # another case, the reference workload: untouched
    assert len(linear_calls) == 1


def test_a_sized_local_slowdown_repeats_the_leaf_after_every_nth_step():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    calls = []
    model[2].register_forward_pre_hook(lambda m, a: calls.append(1))
    x = torch.ones(1, 4)
    step = inject.sized_step({"kind": "local", "leaf": "2", "every": 2, "times": 3}, lambda: model(x), model)
    calls.clear()  # finding the leaf's input ran one step
    for _ in range(4):
        step()
    assert len(calls) == 4 + 2 * 3


def test_the_plugin_builds_each_named_case_with_its_slowdown_and_others_without(tmp_path, monkeypatch, linear_calls):
    cases = {c.id: c for c in interleave.all_cases("cpu")}
    slowed, plain = cases["physicsnemo-block-tiny-baseline"], cases["physicsnemo-block-tiny-bf16"]
    plan = tmp_path / "linear-2.json"
    plan.write_text(json.dumps({slowed.id: {"kind": "op", "op": "linear", "every": 2}}))
    monkeypatch.setenv(inject.SIZED_ENV, str(plan))
    monkeypatch.setattr(runner, "build_case", runner.build_case)  # undone after the test
    inject.pytest_configure(None)
    opts = RunOptions(count_flops=False, telemetry_interval_s=None, reference=False, warm_compile=False)
    per_step = {}
    for case in (slowed, plain):
        built = runner.build_case(case, opts)
        linear_calls.clear()
        built.step()
        built.step()
        per_step[case.variant] = len(linear_calls) / 2
    # The tiny block calls F.linear 4 times a step: every second call twice is 6 a step.
    assert per_step == {"baseline": 6.0, "bf16": 4.0}


def test_the_interleaved_worker_slows_the_head_alone(tmp_path, monkeypatch, linear_calls):
    case_id = "physicsnemo-block-tiny-baseline"
    plan = tmp_path / "linear-1.json"
    plan.write_text(json.dumps({case_id: {"kind": "op", "op": "linear", "every": 1}}))
    monkeypatch.setenv(interleave.INJECT_HEAD_SIZED, str(plan))
    seen = {}

    def measure(base_step, head_step, device, **kw):
        for side, step in (("base", base_step), ("head", head_step)):
            linear_calls.clear()
            step()
            seen[side] = len(linear_calls)
        raise RuntimeError("stop here: what was built is what this test reads")

    monkeypatch.setattr(interleave, "measure_interleaved", measure)
    cases = {c.id: c for c in interleave.all_cases("cpu")}
    row = interleave.measure_case(case_id, cases, ROOT, ROOT, stop=None)  # what it raised: the case's row
    assert row.error == "RuntimeError: stop here: what was built is what this test reads"
    assert seen == {"base": 4, "head": 8}


def test_conditions_from_the_instruction_gates_own_quality_run(tmp_path):
    conditions = quality_ab.sized_conditions(COUNTS_QUALITY, tmp_path)
    assert conditions[0] == quality_ab.Condition("local", 0.0)  # unchanged code first
    sized = {(c.kind, c.slowdown_pct): c for c in conditions[1:]}
    assert set(sized) == {(k, t) for k in ("linear", "sdpa", "local") for t in (1.0, 2.0, 5.0)}
    linear1, local1 = sized[("linear", 1.0)], sized[("local", 1.0)]
    # Op slowdowns are changes outside the model files (processes mode), leaf ones the model's own.
    assert (linear1.mode, local1.mode) == ("processes", "interleaved")
    assert linear1.head_env() == {inject.SIZED_ENV: linear1.sized} == linear1.stored_env()
    assert local1.head_env() == {interleave.INJECT_HEAD_SIZED: local1.sized}
    assert local1.stored_env() == {inject.SIZED_ENV: local1.sized}
    assert conditions[0].head_env() == {} == conditions[0].stored_env()
    # Each file holds that slowdown's specs per case, as the counting worker applied them.
    assert json.loads(Path(linear1.sized).read_text())["physicsnemo-block-tiny-baseline"]["every"] == 52
    assert json.loads(Path(local1.sized).read_text())["vjepa2-encoder-tiny-baseline"]["leaf"] == "blocks.0.norm1"


def test_sized_by_a_file_without_sizes_is_one_line_and_exit_4(tmp_path, capsys):
    unchanged_only = tmp_path / "counts.jsonl"
    unchanged_only.write_text(COUNTS_QUALITY.read_text().splitlines()[1] + "\n")
    assert main(["gate-quality", "--ab", "--sized-by", str(unchanged_only)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--sized-by {unchanged_only}" in err and "perfgate count-quality" in err


def test_a_bad_sized_file_names_itself(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{bad}: not"):
        inject.load_sized(bad)


class _Stop(Exception):
    pass


def test_the_time_gates_sub_runs_count_no_instructions(tmp_path, monkeypatch):
    # This repository's [tool.perfgate.counts] would start a valgrind pass in every pytest process
    # of the experiment (it did: 183 s for one stored comparison of two tiny cases).
    cond = quality_ab.sized_conditions(COUNTS_QUALITY, tmp_path)[1]  # linear +1%: processes mode
    stored_envs, ab_calls = [], []

    real_run = subprocess.run

    def run(cmd, **kw):
        if "pytest" not in cmd:
            return real_run(cmd, **kw)  # git, finding the working tree
        stored_envs.append(kw["env"])
        return subprocess.CompletedProcess(cmd, 0)  # nothing measured: the environment is the point

    def measure(side, ids, selection, env=None):
        ab_calls.append((selection, env or {}))
        if len(ab_calls) == 2:
            raise _Stop
        return {}

    monkeypatch.delenv(NO_COUNTS_ENV, raising=False)  # the tests' own default (tests/conftest.py)
    monkeypatch.setattr(quality_ab.subprocess, "run", run)
    monkeypatch.setattr(ab_run, "measure", measure)
    quality_ab.stored(ROOT, ["physicsnemo-block-tiny-baseline"], cond, device="cpu")
    with pytest.raises(_Stop):
        quality_ab.processes(ROOT, ["physicsnemo-block-tiny-baseline"], cond, Policy(), max_pairs=1, device="cpu")
    assert len(stored_envs) == 2 and all(e[NO_COUNTS_ENV] == "1" for e in stored_envs)
    # The record run, then the slowed one.
    assert inject.SIZED_ENV not in stored_envs[0] and stored_envs[1][inject.SIZED_ENV] == cond.sized
    assert len(ab_calls) == 2 and all(env[NO_COUNTS_ENV] == "1" for _, env in ab_calls)
    (head_env,) = [env for selection, env in ab_calls if "perfgate.quality.inject" in selection]
    assert head_env[inject.SIZED_ENV] == cond.sized  # the head's processes alone are slowed


def test_a_wider_linear_gives_the_same_output_with_more_work_in_the_same_ops() -> None:
    """The slower-kernel slowdown (every Nth F.linear twice as wide, sliced back) on the repository's
    PhysicsNeMo block, whose qkv output is reshaped into heads: the same output, every
    Nth call widened (one counter across steps), each weight copied once, and per step the same
    aten ops that launch work (only views added: the GEMM does more, nothing else runs)."""
    from torch.profiler import ProfilerActivity, profile

    from models.physicsnemo_block import CONFIGS, PhysicsNeMoBlock, example_inputs

    torch.manual_seed(0)
    model = PhysicsNeMoBlock(CONFIGS["tiny"]).eval()
    (x,) = example_inputs(CONFIGS["tiny"])
    with torch.no_grad():
        want = model(x)
        original, linear, seen = inject._every_nth_wider(2)
        torch.nn.functional.linear = linear
        try:
            got = [model(x) for _ in range(3)]
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(x)
        finally:
            torch.nn.functional.linear = original
        with profile(activities=[ProfilerActivity.CPU]) as plain:
            model(x)
    for g in got:  # the same values up to the GEMM's rounding (a wider GEMM may block its sums otherwise)
        torch.testing.assert_close(g, want)
    assert (seen.calls, seen.doubled) == (16, 8)  # 4 linears a step, every 2nd widened
    # each weight's wider copy made once, and held by the counter after the patch is undone (a CUDA
    # graph captured under it reads them by address)
    assert [tuple(t.shape[0] for t in made[1:] if t is not None) for made in seen.made.values()] == [
        (384,),
        (128, 128),
        (512, 512),
        (128, 128),
    ]
    views = {"aten::slice", "aten::as_strided", "aten::alias"}

    def work_ops(p: profile) -> list[str]:
        return sorted(e.key for e in p.key_averages() if e.key not in views for _ in range(e.count))

    # the step's ops less the views: what the widening adds is the copies made at the first step only
    assert work_ops(prof) == work_ops(plain)
    with pytest.raises(ValueError, match="every must be >= 1"):
        inject._every_nth_wider(0)
