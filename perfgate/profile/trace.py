"""Traces of a step, through the leave-in API's tools: a torch.profiler trace for Perfetto /
chrome://tracing with the top operators by self time, NVTX ranges for Nsight Systems, and where
TORCH_TRACE wrote compile logs for tlparse.

Steps and layers are named with `annotate` ("perfgate.step", "module:attn"): a torch.profiler range
while the torch tool runs, an NVTX range where NVTX exists.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEventAvg

from perfgate.profile.api import annotate
from perfgate.profile.layers import range_names
from perfgate.profile.profiler import NvtxTool, TorchProfilerTool
from perfgate.profile.report import NvtxSection, TorchTraceSection, TraceSection

SKIP_OPS = ("ProfilerStep", "perfgate.", "module:")  # our own ranges, not operators
# The device types whose rows torch's table sums as device time (profiler_util._build_table).
DEVICE_TYPES = (DeviceType.CUDA, DeviceType.PrivateUse1, DeviceType.MTIA, DeviceType.XPU)


def module_ranges(module: nn.Module, names: list[str]) -> Callable[[], None]:
    """An `annotate` range ("module:<name>") around every call of the named submodules, through
    forward hooks, so a trace reads by layer; returns the function that removes the hooks."""
    named = dict(module.named_modules())
    handles = []
    for name in names:
        rng = annotate(f"module:{name}")

        def pre(_m: nn.Module, _a: Any, _r: annotate = rng) -> None:  # None: the inputs stay as they are
            _r.__enter__()

        def post(_m: nn.Module, _a: Any, _o: Any, _r: annotate = rng) -> None:
            _r.__exit__(None, None, None)

        handles += [
            named[name].register_forward_pre_hook(pre),
            named[name].register_forward_hook(post, always_call=True),
        ]

    def remove() -> None:
        for h in handles:
            h.remove()

    return remove


def device_total_us(averages: Iterable[FunctionEventAvg]) -> float:
    """The device time the operator rows share, summed as torch's own table sums it
    (`torch.autograd.profiler_util._build_table`): the device-side rows but the user annotations,
    whose spans cover kernels counted on their own rows (and the legacy profiler's CPU rows, which
    carried their kernels' time). Operator rows are left out: under Kineto a kernel's time is on its
    own row and again, as self device time, on the row of the op that launched it, so a sum over
    every row counts the device time twice (the kept H100 profile, docs/profiling.md)."""
    total = 0.0
    for e in averages:
        if e.device_type == DeviceType.CPU:
            total += e.self_device_time_total if getattr(e, "is_legacy", False) else 0.0
        elif e.device_type in DEVICE_TYPES and not getattr(e, "is_user_annotation", False):
            total += e.self_device_time_total
    return total


def top_operators(averages: Any, n: int, cuda: bool) -> list[dict[str, Any]]:
    """Operators by self time (device time on CUDA), our own ranges and the device-side user
    annotations (spans, not work) left out. `share`: of the device total as torch's table gives it
    (`device_total_us`) on CUDA, so an op and the kernel it launched each show the same share; of
    the rows' self CPU time otherwise."""
    rows = []
    for e in averages:
        if e.key.startswith(SKIP_OPS) or (e.device_type != DeviceType.CPU and getattr(e, "is_user_annotation", False)):
            continue
        rows.append(
            {
                "name": e.key,
                "calls": int(e.count),
                "self_cpu_ms": e.self_cpu_time_total / 1e3,
                "cpu_total_ms": e.cpu_time_total / 1e3,
                "self_device_ms": e.self_device_time_total / 1e3 if cuda else None,
            }
        )
    key = "self_device_ms" if cuda else "self_cpu_ms"
    total = (device_total_us(averages) / 1e3 if cuda else sum(r[key] for r in rows)) or 1.0
    rows.sort(key=lambda r: -r[key])
    for r in rows:
        r["share"] = r[key] / total
    return rows[:n]


def trace_steps(
    step: Callable[[], Any],
    device: torch.device,
    out_path: Path,
    *,
    steps: int = 3,
    top_n: int = 15,
    module: nn.Module | None = None,
) -> TraceSection:
    """A torch.profiler trace of `steps` steps (after one profiled warm-up step) for Perfetto /
    chrome://tracing, the top operators by self time and their table as text."""
    cuda = device.type == "cuda"
    table_path = out_path.with_suffix(".ops.txt")
    tool = TorchProfilerTool(
        row_limit=top_n,
        cuda=cuda,
        warmup_steps=1,
        active_steps=steps,
        trace_file=out_path.name,
        table_file=table_path.name,
    )
    remove = module_ranges(module, range_names(module)) if module is not None else None
    tool.start(out_path.parent)
    try:
        for _ in range(1 + steps):
            with annotate("perfgate.step"):
                step()
            if cuda:
                torch.cuda.synchronize(device)
            tool.step()
    finally:
        tool.stop()
        if remove is not None:
            remove()
    return TraceSection(
        trace=str(out_path),
        steps=steps,
        ops_table=str(table_path),
        top_ops=top_operators(tool.averages, top_n, cuda),
        sorted_by="self device time" if cuda else "self CPU time",
        module_ranges=remove is not None,
        open_with="https://ui.perfetto.dev or chrome://tracing",
    )


def nvtx_section(
    step: Callable[[], Any], device: torch.device, module: nn.Module | None, steps: int, command: str, run_dir: Path
) -> NvtxSection:
    """NVTX ranges per step, per module and (the nvtx tool's emit_nvtx) per op, for `nsys profile`."""
    tool = NvtxTool()
    reason = tool.unavailable() or (None if device.type == "cuda" else "NVTX ranges matter on a CUDA device")
    if reason:
        return NvtxSection(skipped=reason)
    remove = module_ranges(module, range_names(module)) if module is not None else None
    tool.start(run_dir)
    try:
        for i in range(steps):
            with annotate(f"perfgate.step {i}"):
                step()
            torch.cuda.synchronize(device)
    finally:
        tool.stop()
        if remove is not None:
            remove()
    target = shlex.quote(str(run_dir / "nsys"))
    nsys = f"nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn --python-sampling=true -o {target} {command}"
    return NvtxSection(
        steps=steps,
        backend=tool.backend,
        nsys_command=nsys,
        note="the ranges are recorded only when the process runs under Nsight Systems",
    )


def torch_trace_section(run_dir: Path) -> TorchTraceSection | None:
    """Where TORCH_TRACE wrote compile logs and how to read them with tlparse."""
    root = os.environ.get("TORCH_TRACE")
    if not root:
        return None
    logs = sorted(str(p) for p in Path(root).glob("*.log"))
    return TorchTraceSection(
        dir=root,
        logs=logs,
        tlparse=[f"tlparse {shlex.quote(p)} --overwrite" for p in logs],
        note="compile logs appear for compiled variants; eager runs write little or nothing",
    )
