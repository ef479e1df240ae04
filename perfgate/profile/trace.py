"""Traces of a step: a torch.profiler trace for Perfetto / chrome://tracing with the top operators
by self time, NVTX ranges for Nsight Systems, and where TORCH_TRACE wrote compile logs for tlparse.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from perfgate.profile.layers import range_names

SKIP_OPS = ("ProfilerStep", "perfgate.", "module:")  # our own ranges, not operators


class ModuleRanges:
    """Named ranges around module calls via forward hooks: torch.profiler ranges ("module:attn")
    so a trace reads by layer, or NVTX ranges for Nsight Systems."""

    def __init__(self, module: nn.Module, names: list[str], *, nvtx: Any = None) -> None:
        named = dict(module.named_modules())
        self._handles: list[Any] = []
        self._stack: list[Any] = []
        for name in names:
            m = named[name]
            if nvtx is not None:
                pre = lambda _m, _a, _n=name: nvtx.push(f"module:{_n}", None, None)  # noqa: E731
                post = lambda _m, _a, _o: nvtx.pop(None)  # noqa: E731
            else:
                pre, post = self._enter(name), self._exit
            self._handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post, always_call=True)]

    def _enter(self, name: str) -> Callable[..., None]:
        def pre(_m: nn.Module, _a: Any) -> None:
            rf = torch.profiler.record_function(f"module:{name}")
            rf.__enter__()
            self._stack.append(rf)

        return pre

    def _exit(self, _m: nn.Module, _a: Any, _o: Any) -> None:
        self._stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def top_operators(averages: Any, n: int, cuda: bool) -> list[dict[str, Any]]:
    """Operators by self time (device time on CUDA), our own ranges left out."""
    rows = []
    for e in averages:
        if e.key.startswith(SKIP_OPS):
            continue
        rows.append({
            "name": e.key,
            "calls": int(e.count),
            "self_cpu_ms": e.self_cpu_time_total / 1e3,
            "cpu_total_ms": e.cpu_time_total / 1e3,
            "self_device_ms": e.self_device_time_total / 1e3 if cuda else None,
        })
    key = "self_device_ms" if cuda else "self_cpu_ms"
    total = sum(r[key] for r in rows) or 1.0
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
) -> dict[str, Any]:
    """A torch.profiler trace of `steps` steps (after one profiled warm-up step) for Perfetto /
    chrome://tracing, the top operators by self time and their table as text."""
    from torch.profiler import ProfilerActivity, profile, schedule

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    ranges = ModuleRanges(module, range_names(module)) if module is not None else None
    try:
        with profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
            record_shapes=True,
            profile_memory=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(out_path)),
        ) as prof:
            for _ in range(1 + steps):
                with torch.profiler.record_function("perfgate.step"):
                    step()
                if cuda:
                    torch.cuda.synchronize(device)
                prof.step()
    finally:
        if ranges is not None:
            ranges.remove()
    averages = prof.key_averages()
    table_path = out_path.with_suffix(".ops.txt")
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    table_path.write_text(averages.table(sort_by=sort, row_limit=top_n) + "\n")
    return {
        "trace": str(out_path),
        "steps": steps,
        "ops_table": str(table_path),
        "top_ops": top_operators(averages, top_n, cuda),
        "sorted_by": "self device time" if cuda else "self CPU time",
        "module_ranges": ranges is not None,
        "open_with": "https://ui.perfetto.dev or chrome://tracing",
    }


def nvtx_section(step: Callable[[], Any], device: torch.device, module: nn.Module | None, steps: int, command: str, run_dir: Path) -> dict[str, Any]:
    """NVTX ranges per step, per module and (emit_nvtx) per op, for `nsys profile`."""
    from perfgate.profile import api

    backend = api._STATE.nvtx
    if backend is None or device.type != "cuda":
        why = "NVTX needs a CUDA build of torch" if torch.version.cuda is None else "NVTX ranges matter on a CUDA device"
        return {"skipped": why}
    ranges = ModuleRanges(module, range_names(module), nvtx=backend) if module is not None else None
    try:
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            for i in range(steps):
                with api.annotate(f"perfgate.step {i}"):
                    step()
                torch.cuda.synchronize(device)
    finally:
        if ranges is not None:
            ranges.remove()
    nsys = f"nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn --python-sampling=true -o {shlex.quote(str(run_dir / 'nsys'))} {command}"
    return {"steps": steps, "backend": backend.name, "nsys_command": nsys,
            "note": "the ranges are recorded only when the process runs under Nsight Systems"}


def torch_trace_section(run_dir: Path) -> dict[str, Any] | None:
    """Where TORCH_TRACE wrote compile logs and how to read them with tlparse."""
    root = os.environ.get("TORCH_TRACE")
    if not root:
        return None
    logs = sorted(str(p) for p in Path(root).glob("*.log"))
    return {
        "dir": root,
        "logs": logs,
        "tlparse": [f"tlparse {shlex.quote(p)} --overwrite" for p in logs],
        "note": "compile logs appear for compiled variants; eager runs write little or nothing",
    }

