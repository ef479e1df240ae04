"""Evidence for a failed benchmark case: a profiler trace of its step (and on CUDA an allocator
snapshot for pytorch.org/memory_viz), the commands that reproduce it, and the verdict naming both.
The benchmark session imports this module only."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from perfgate.profile.profiler import CudaMemoryTool
from perfgate.profile.trace import trace_steps
from perfgate.record import Evidence, Reproduce

if TYPE_CHECKING:
    from perfgate.cases.runner import Case
    from perfgate.gate.verdicts import Verdict


def capture_evidence(
    step: Callable[[], Any],
    device: torch.device | str,
    out_dir: Path,
    *,
    steps: int = 3,
    top_n: int = 10,
    memory_snapshot: bool = True,
) -> Evidence:
    """A profiler trace of a benchmark case's step (and on CUDA an allocator snapshot) in
    `out_dir`: the evidence a verdict points to (`reproduce_commands` add how to re-run it)."""
    device = torch.device(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = trace_steps(step, device, out_dir / "trace.json", steps=steps, top_n=top_n)
    snapshot = None
    if memory_snapshot and device.type == "cuda":
        tool = CudaMemoryTool(file="memory_snapshot.pickle")
        tool.start(out_dir)
        try:
            step()
            torch.cuda.synchronize(device)
        finally:
            (path,) = tool.stop()
        snapshot = str(path)
    return Evidence(trace=trace.trace, ops_table=trace.ops_table, top_ops=trace.top_ops[:5], memory_snapshot=snapshot)


def reproduce_commands(case: Case, nodeid: str | None = None) -> Reproduce:
    """The commands that re-run one benchmark case: the pytest case alone, and a full profile of it."""
    opts = dict(case.options)
    node = nodeid or f"benchmarks/test_models.py::test_step[{case.id}]"
    pytest_cmd = (
        f"python -m pytest {shlex.quote(node)} --perfgate-device {case.device} --perfgate-models {case.model} "
        f"--perfgate-sizes {case.size} --perfgate-variants {shlex.quote(case.variant)} -v"
    )
    profile_cmd = (
        f"perfgate profile {case.model} --size {case.size} --variant {shlex.quote(case.variant)} --device {case.device}"
    )
    profile_cmd += "".join(f" --option {shlex.quote(f'{k}={v}')}" for k, v in opts.items())
    return Reproduce(pytest=pytest_cmd, profile=profile_cmd)


def with_evidence(verdict: Verdict, evidence: Evidence) -> Verdict:
    """The verdict with its message naming the trace and the reproduce command."""
    parts = [f"trace: {evidence.trace}"]
    if evidence.memory_snapshot:
        parts.append(f"memory snapshot: {evidence.memory_snapshot}")
    if evidence.reproduce:
        parts.append(f"reproduce: {evidence.reproduce.pytest}")
    msg = (verdict.message + " " if verdict.message else "") + "[" + "; ".join(parts) + "]"
    return dataclasses.replace(verdict, message=msg)
