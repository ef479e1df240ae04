"""`perfgate profile MODEL`: one run folder with everything the seeds' profilers report.

For each point of an optional sweep (one option, several values) it reports:
1. the simple benchmark: mean, median, std, min, max, FPS, with telemetry sampled throughout
   and FLOPs per step against a matmul peak measured on this machine;
2. the memory profile of one step (peak, weights, activations, headroom);
3. a layer-by-layer breakdown of the forward: per top-level module, per block (children of any
   nn.ModuleList) with mean and std, the slowest five blocks and each part's share;
4. a precision comparison: fp32 against bf16 and fp16 autocast, speed-ups read with the V-JEPA
   guide's bands, accuracy against fp32;
5. a torch.profiler trace for Perfetto / chrome://tracing and the top operators by self time;
   optionally NVTX ranges for Nsight Systems and a TORCH_TRACE folder for tlparse;
6. suggestions from `perfgate.suggest`.
`--skip-detailed` keeps 1 and 2 only (the guide's quick benchmark). The run folder holds
report.json, a self-contained report.html (rendered by perfgate.output.html) and the traces; progress goes
to stderr.

Layer-breakdown margin: per-module times come from forward pre/post hooks (host clock on the CPU,
CUDA events on the GPU) in rounds interleaved with un-instrumented forwards. The top-level parts
plus the root's own ops ("unattributed") add up exactly to the instrumented forward; the
instrumented forward exceeds the plain one by the hooks' cost, reported as `hook_overhead_pct`.
The breakdown is called consistent when the median over rounds of the parts' sum is within
BREAKDOWN_MARGIN (25%) of the plain forward's median; each hook pair costs a few microseconds of
host time, so tiny CPU models sit nearest that bound.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from perfgate import accuracy, flops, gate, suggest, telemetry
from perfgate.device import bind
from perfgate.gate.policy import GateSettings
from perfgate.record import CaseRecord
from perfgate.measure import StopRule, WarmupRule, make_timer, measure
from perfgate.memory import MIB, MemoryTracker
from perfgate.variants import VARIANTS, Cast, Env, Quantize, Variant, VariantError, get_variant
from perfgate.workload import Workload, build_workload, default_size, get_model, make_step, reference_output, sizes

BREAKDOWN_MARGIN = 0.25
PRECISIONS = {"fp32": "baseline", "bf16": "autocast-bf16", "fp16": "autocast-fp16"}


class ProfileError(ValueError):
    """Bad input for a profile (unknown model, size or option); the message says how to fix it."""


class ProfileUnavailable(RuntimeError):
    """The profile cannot run on this machine (no CUDA, a variant that needs what is missing)."""


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    model: str
    size: str | None = None  # None: the device's default size
    variant: str = "baseline"
    device: str = "cpu"
    iterations: int = 50
    warmup: int = 5
    batch: int = 1
    options: dict[str, Any] = field(default_factory=dict)
    sweep: tuple[str, tuple[Any, ...]] | None = None  # (option, values); also "size", "batch", "variant"
    skip_detailed: bool = False
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    precision_budget_s: float = 20.0  # per precision; fp16 is emulated slowly on many CPUs
    layer_rounds: int = 10
    trace_steps: int = 3
    top_ops: int = 15
    telemetry_interval_s: float = 0.1
    nvtx: bool = False
    seed: int = 0
    checkpoint: str | None = None
    out_dir: Path = Path(".perfgate/profiles")
    command: str = ""  # the command line that reproduces this profile


@dataclass(frozen=True, kw_only=True)
class Point:
    """One sweep point: what build_workload and the variant get."""

    size: str
    batch: int
    variant: str
    options: dict[str, Any]
    label: str  # "" without a sweep, else e.g. "img_size=256"

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in self.label) or "run"


def points(cfg: ProfileConfig) -> list[Point]:
    """The sweep's points in order (a single point without a sweep)."""
    spec = _spec(cfg.model)
    size = cfg.size or default_size(spec, torch.device(cfg.device).type)
    base = Point(size=size, batch=cfg.batch, variant=cfg.variant, options=dict(cfg.options), label="")
    if cfg.sweep is None:
        return [base]
    key, values = cfg.sweep
    if not values:
        raise ProfileError(f"--sweep {key}= names no values; give them as {key}=A,B,C")
    out = []
    for v in values:
        label = f"{key}={v}"
        if key == "size":
            out.append(dataclasses.replace(base, size=str(v), label=label))
        elif key == "batch":
            out.append(dataclasses.replace(base, batch=int(v), label=label))
        elif key == "variant":
            out.append(dataclasses.replace(base, variant=str(v), label=label))
        else:
            out.append(dataclasses.replace(base, options={**base.options, key: v}, label=label))
    return out


def _spec(model: str) -> Any:
    try:
        return get_model(model)
    except KeyError as exc:
        raise ProfileError(str(exc.args[0])) from None


# --- progress ---------------------------------------------------------------------------------


class Progress:
    """`perfgate profile: [3/7] layer breakdown` lines on stderr, with the elapsed time."""

    def __init__(self, total: int, stream: Any = None, prefix: str = "perfgate profile") -> None:
        self.total, self.i, self.t0 = total, 0, time.perf_counter()
        self.stream, self.prefix = stream, prefix

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    def stage(self, name: str) -> None:
        self.i += 1
        self._write(f"{self.prefix}: [{self.i}/{self.total}] {name} ({time.perf_counter() - self.t0:.1f} s)")

    def note(self, text: str) -> None:
        self._write(f"{self.prefix}:       {text}")


# --- benchmark --------------------------------------------------------------------------------


def fixed_rounds(iterations: int) -> StopRule:
    """Exactly `iterations` timed rounds, as the guide's benchmark does."""
    return StopRule(min_rounds=iterations, max_rounds=iterations, budget_s=math.inf)


def warmup_rounds(n: int) -> WarmupRule:
    return WarmupRule(min_rounds=n, max_rounds=n, window=max(1, min(3, n // 2 or 1)), budget_s=math.inf)


def benchmark_summary(samples_ms: list[float], throughput: dict[str, float]) -> dict[str, Any]:
    """The guide's simple benchmark: mean, median, std, min, max and FPS, plus tails."""
    x = np.asarray(samples_ms, dtype=float)
    med = float(np.median(x))
    out: dict[str, Any] = {
        "n": int(x.size),
        "mean_ms": float(x.mean()),
        "median_ms": med,
        "std_ms": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min_ms": float(x.min()),
        "max_ms": float(x.max()),
        "p90_ms": float(np.percentile(x, 90)),
        "steps_per_s": 1e3 / float(x.mean()),  # the guide's "FPS" is forward passes per second
        "throughput": {unit: n / (med / 1e3) for unit, n in throughput.items()},
    }
    if "frames" in throughput:
        out["fps"] = out["throughput"]["frames"]
    return out


# --- memory -----------------------------------------------------------------------------------


def tensor_mib(tensors: Any) -> float:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)) / MIB


def memory_profile(step: Callable[[], Any], module: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device) -> dict[str, Any]:
    """Peak memory of one step, the weights' and inputs' share of it, and the headroom left."""
    with MemoryTracker(device) as mem:
        step()
    assert mem.result is not None
    weights = tensor_mib(list(module.parameters()) + list(module.buffers()))
    out: dict[str, Any] = {
        "method": mem.result.method,
        "peak_mem_mib": mem.result.peak_mem_mib,
        "reserved_mem_mib": mem.result.reserved_mem_mib,
        "weights_mib": weights,
        "inputs_mib": tensor_mib(inputs),
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        out["device_total_mib"] = total / MIB
        # Absolute allocator peak: weights and inputs are inside it.
        out["activations_mib"] = max(mem.result.peak_mem_mib - weights - out["inputs_mib"], 0.0)
        out["headroom"] = 1.0 - (mem.result.reserved_mem_mib or mem.result.peak_mem_mib) / (total / MIB)
        out["peak_semantics"] = "absolute CUDA allocator peak (weights included)"
    else:
        import psutil

        vm = psutil.virtual_memory()
        out["device_total_mib"] = vm.total / MIB
        out["available_mib"] = vm.available / MIB
        # The CPU peak is the RSS high-water growth during the step: the activations.
        out["activations_mib"] = mem.result.peak_mem_mib
        out["headroom"] = max(vm.available / MIB - mem.result.peak_mem_mib, 0.0) / (vm.total / MIB)
        out["peak_semantics"] = "growth of the process's RSS high-water mark during one step"
    return out


# --- layer breakdown --------------------------------------------------------------------------


def _is_container(m: nn.Module) -> bool:
    return isinstance(m, (nn.ModuleList, nn.ModuleDict))


def _attention_name(name: str, module: nn.Module) -> bool:
    low = (name.rsplit(".", 1)[-1] + " " + type(module).__name__).lower()
    return "attn" in low or "attention" in low


@dataclass
class LayerPlan:
    """Which modules the breakdown times, by qualified name."""

    top: dict[str, list[str]]  # component -> the modules whose calls make it up
    blocks: dict[str, dict[str, list[str]]]  # ModuleList path -> {block (a child): the modules whose calls make it up}
    attention: list[str]  # outermost attention modules
    patch: list[str]  # top-level components named *patch*


def _callable_modules(name: str, m: nn.Module) -> list[str]:
    """`name` itself, or for a ModuleList / ModuleDict (which have no forward, so their hooks never
    fire) the modules inside it that are called, found recursively."""
    if not _is_container(m):
        return [name]
    return [leaf for n, c in m.named_children() for leaf in _callable_modules(f"{name}.{n}", c)]


def layer_plan(module: nn.Module) -> LayerPlan:
    children = dict(module.named_children())
    top = {name: _callable_modules(name, child) for name, child in children.items()}
    blocks = {
        path: {f"{path}.{n}": _callable_modules(f"{path}.{n}", c) for n, c in m.named_children()}
        for path, m in module.named_modules()
        if path and isinstance(m, nn.ModuleList) and len(m) > 0
    }
    attention: list[str] = []
    for path, m in module.named_modules():
        if path and _attention_name(path, m) and not _is_container(m) and not any(path.startswith(a + ".") for a in attention):
            attention.append(path)
    patch = [n for n, c in children.items() if "patch" in n.lower() or "patch" in type(c).__name__.lower()]
    return LayerPlan(top=top, blocks=blocks, attention=attention, patch=patch)


class _HookTimer:
    """Forward pre/post hooks recording each module call's start and end.

    CPU: perf_counter_ns. CUDA: events on the current stream (no synchronisation inside the
    forward, so kernels keep overlapping the host as they do un-instrumented).
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.calls: dict[str, list[tuple[Any, Any]]] = {}
        self._open: dict[str, list[Any]] = {}
        self._handles: list[Any] = []

    def _now(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter_ns()

    def attach(self, named: dict[str, nn.Module], names: set[str]) -> None:
        for name in names:
            m = named[name]

            def pre(_mod: nn.Module, _args: Any, _name: str = name) -> None:
                self._open.setdefault(_name, []).append(self._now())

            def post(_mod: nn.Module, _args: Any, _out: Any, _name: str = name) -> None:
                self.calls.setdefault(_name, []).append((self._open[_name].pop(), self._now()))

            self._handles.append(m.register_forward_pre_hook(pre))
            self._handles.append(m.register_forward_hook(post, always_call=True))

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def take_ms(self) -> dict[str, float]:
        """Milliseconds per module summed over its calls in this forward; resets the record."""
        if self.cuda:
            torch.cuda.synchronize()
            out = {n: sum(s.elapsed_time(e) for s, e in c) for n, c in self.calls.items()}
        else:
            out = {n: sum(e - s for s, e in c) / 1e6 for n, c in self.calls.items()}
        self.calls.clear()
        return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    x = np.asarray(values, dtype=float)
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def layer_breakdown(
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    context: Callable[[], Any],
    *,
    rounds: int = 10,
    warmup: int = 2,
) -> dict[str, Any]:
    """Per-module forward times, in rounds alternating plain and instrumented forwards."""
    plan = layer_plan(module)
    named = dict(module.named_modules())
    root = "<forward>"
    named[root] = module
    hooked = {root} | {n for ms in plan.top.values() for n in ms} | {n for g in plan.blocks.values() for ms in g.values() for n in ms} | set(plan.attention)
    timer = _HookTimer(device)
    plain_timer = make_timer(device)

    def forward() -> Any:
        with torch.inference_mode(), context():
            return module(*inputs)

    for _ in range(warmup):
        forward()
    plain_ms: list[float] = []
    per_round: list[dict[str, float]] = []
    for _ in range(rounds):
        plain_ms.append(plain_timer.time_ms(forward)[0])
        timer.attach(named, hooked)
        try:
            forward()
        finally:
            timer.detach()
        per_round.append(timer.take_ms())

    def series(names: list[str]) -> list[float]:
        return [sum(r.get(n, 0.0) for n in names) for r in per_round]

    total_mean, total_std = _mean_std(series([root]))
    plain_mean, _ = _mean_std(plain_ms)
    components = []
    for comp, members in plan.top.items():
        mean, std = _mean_std(series(members))
        components.append({"name": comp, "class": type(named[comp]).__name__, "mean_ms": mean, "std_ms": std,
                           "median_ms": float(np.median(series(members))),
                           "share": mean / total_mean if total_mean else None, "modules": len(members),
                           "blocks": len(named[comp]) if isinstance(named[comp], nn.ModuleList) else None})
    parts_sum = sum(c["mean_ms"] for c in components)
    # The consistency check uses medians over rounds: on a shared machine one stalled round
    # would otherwise decide it.
    parts_median = float(np.median([sum(r.get(n, 0.0) for ms in plan.top.values() for n in ms) for r in per_round]))
    plain_median = float(np.median(plain_ms))
    total_median = float(np.median(series([root])))
    block_groups = []
    for path, members in plan.blocks.items():
        per_block = []
        for i, (n, calls) in enumerate(members.items()):
            mean, std = _mean_std(series(calls))
            per_block.append({"index": i, "name": n, "mean_ms": mean, "std_ms": std, "median_ms": float(np.median(series(calls)))})
        # Across-block statistics use each block's median over rounds, so one stalled round does
        # not make a block look slow; the total uses means, like the components' shares.
        medians = [b["median_ms"] for b in per_block]
        avg, spread = _mean_std(medians)
        total = sum(b["mean_ms"] for b in per_block)
        block_groups.append({
            "list": path, "n": len(members), "class": type(named[next(iter(members))]).__name__,
            "mean_ms": avg, "std_ms": spread, "total_ms": total, "share": total / total_mean if total_mean else None,
            "slowest": sorted(per_block, key=lambda b: -b["median_ms"])[:5], "per_block": per_block,
        })
    attn_ms = sum(_mean_std(series([n]))[0] for n in plan.attention)
    patch_ms = sum(c["mean_ms"] for c in components if c["name"] in plan.patch)
    largest = max(block_groups, key=lambda g: g["total_ms"], default=None)
    return {
        "rounds": rounds,
        "timer": "cuda events" if device.type == "cuda" else "host perf_counter",
        "scope": "forward of the eager module under the variant's context (inference mode)",
        "plain_mean_ms": plain_mean,
        "plain_median_ms": plain_median,
        "total_mean_ms": total_mean,
        "total_std_ms": total_std,
        "total_median_ms": total_median,
        "hook_overhead_pct": (total_median / plain_median - 1.0) * 100.0 if plain_median else None,
        "components": sorted(components, key=lambda c: -c["mean_ms"]),
        "unattributed_ms": total_mean - parts_sum,  # the root's own ops: residual adds, reshapes
        "parts_sum_ms": parts_sum,
        "parts_median_ms": parts_median,
        "sum_vs_plain": parts_median / plain_median if plain_median else None,
        "margin": BREAKDOWN_MARGIN,
        "consistent": bool(plain_median and abs(parts_median / plain_median - 1.0) <= BREAKDOWN_MARGIN),
        "blocks": block_groups,
        "main_blocks": largest["list"] if largest else None,
        "attention": {"modules": plan.attention, "total_ms": attn_ms, "share": attn_ms / total_mean if total_mean and plan.attention else None},
        "patch_embedding": {"modules": plan.patch, "total_ms": patch_ms, "share": patch_ms / total_mean if total_mean and plan.patch else None},
    }


# --- torch profiler trace ---------------------------------------------------------------------


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


def range_names(module: nn.Module) -> list[str]:
    """Top-level modules and blocks: the layers a trace is read by."""
    plan = layer_plan(module)
    return list(dict.fromkeys([n for ms in plan.top.values() for n in ms] + [n for g in plan.blocks.values() for ms in g.values() for n in ms]))


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
    from perfgate import profiling

    backend = profiling._STATE.nvtx
    if backend is None or device.type != "cuda":
        why = "NVTX needs a CUDA build of torch" if torch.version.cuda is None else "NVTX ranges matter on a CUDA device"
        return {"skipped": why}
    ranges = ModuleRanges(module, range_names(module), nvtx=backend) if module is not None else None
    try:
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            for i in range(steps):
                with profiling.annotate(f"perfgate.step {i}"):
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


# --- precision comparison ---------------------------------------------------------------------


def _mutates(variant: Variant) -> bool:
    """Cast and quantise steps change the module in place."""
    return any(isinstance(s, (Cast, Quantize)) for s in variant.steps)


def precision_comparison(
    wl: Workload,
    device: torch.device,
    precisions: tuple[str, ...],
    *,
    iterations: int,
    warmup: int,
    budget_s: float,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """fp32 against bf16 / fp16 autocast on the same module and inputs, with the guide's reading."""
    env = Env.detect(device)
    ref = reference_output(wl) if wl.spec.step == "inference" else None
    rows: dict[str, dict[str, Any]] = {}
    fp32_ms = None
    for p in precisions:
        vname = PRECISIONS[p]
        v = get_variant(vname)
        reason = v.unavailable(env)
        if reason:
            rows[p] = {"variant": vname, "skipped": reason}
            continue
        if progress:
            progress.note(f"{p} ({vname})")
        conv = v.convert(wl.module, wl.inputs)
        step = make_step(wl, conv.module, conv.inputs, v.context(device.type))
        m = measure(step, device, stop=StopRule(min_rounds=min(5, iterations), max_rounds=iterations, budget_s=budget_s), warmup=warmup_rounds(min(warmup, 3)))
        s = benchmark_summary(m.samples_ms, wl.throughput)
        row: dict[str, Any] = {"variant": vname, **{k: s[k] for k in ("n", "mean_ms", "median_ms", "std_ms", "min_ms")}, "stop": m.stop}
        if ref is not None:
            row["accuracy"] = accuracy.metrics(m.output, ref, kind=wl.output_kind)
        if p == "fp32":
            fp32_ms = s["median_ms"]
        rows[p] = row
    for p, row in rows.items():
        if fp32_ms and "median_ms" in row and p != "fp32":
            row["speedup"] = fp32_ms / row["median_ms"]
            row["interpretation"] = suggest.speedup_band(row["speedup"])
    return {"autocast": True, "rows": rows, "bands": {"< 1.5x": "CPU-bound or memory-bound", "1.5-2x": "good GPU utilisation", "> 2x": "excellent tensor core usage"}}


# --- one point --------------------------------------------------------------------------------


def _stages(cfg: ProfileConfig) -> int:
    return 3 + (0 if cfg.skip_detailed else 3 + int(cfg.nvtx))


def profile_point(pt: Point, cfg: ProfileConfig, device: torch.device, run_dir: Path, progress: Progress) -> dict[str, Any]:
    spec = _spec(cfg.model)
    if pt.size not in sizes(spec):
        raise ProfileError(f"model {cfg.model!r} has no size {pt.size!r}; sizes: {', '.join(sizes(spec))}")
    try:
        variant = get_variant(pt.variant)
    except KeyError as exc:
        raise ProfileError(str(exc.args[0])) from None
    reason = variant.unavailable(Env.detect(device))
    if reason:
        raise ProfileUnavailable(f"variant {pt.variant!r} cannot run here: {reason}")
    title = f"{cfg.model} {pt.size}{' ' + pt.label if pt.label else ''} {pt.variant}"

    progress.stage(f"{title}: build, FLOPs")
    try:
        wl = build_workload(spec, pt.size, device, batch=pt.batch, seed=cfg.seed, checkpoint=cfg.checkpoint, **pt.options)
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{cfg.model}: {exc} (fix --option / --sweep)") from None
    ref = reference_output(wl) if variant.name != "baseline" and spec.step == "inference" else None
    try:
        count: flops.FlopCount | None = flops.count_step_flops(wl.module, wl.inputs, step=spec.step)
        flops_error = None
    except Exception as exc:  # noqa: BLE001 - a model FlopCounterMode cannot run still gets profiled
        count, flops_error = None, f"{type(exc).__name__}: {exc}"
    try:
        prepared = variant.prepare(wl.module, wl.inputs)
        conv = variant.finish(prepared)
    except VariantError as exc:
        raise ProfileUnavailable(f"variant {pt.variant!r}: {exc}") from None
    step = make_step(wl, conv.module, conv.inputs, variant.context(device.type))

    progress.stage(f"{title}: benchmark ({cfg.iterations} iterations)")
    with telemetry.TelemetrySampler(device, interval_s=cfg.telemetry_interval_s) as tel:
        m = measure(step, device, stop=fixed_rounds(cfg.iterations), warmup=warmup_rounds(cfg.warmup), progress=progress.note)
    bench = benchmark_summary(m.samples_ms, wl.throughput)
    bench |= {"first_call_s": m.first_call_s, "warmup_rounds": m.warmup_rounds, "timer": m.timer, "samples_ms": m.samples_ms, "contention_cores": m.contention_cores}
    tel_summary = tel.summary()
    unreliable = gate.unreliable_reason(CaseRecord(device=str(device), contention_cores=m.contention_cores, telemetry=tel_summary),
                                        GateSettings())
    roof = None
    if count is not None:
        roof = {**flops.flops_extra_info(count, bench["median_ms"], device, conv.info),
                "by_module_gflop": {k: v / 1e9 for k, v in count.by_module.items()}, "by_op_gflop": {k: v / 1e9 for k, v in count.by_op.items()},
                "method": count.method}
    point: dict[str, Any] = {
        "label": pt.label, "size": pt.size, "batch": pt.batch, "variant": pt.variant, "options": wl.options,
        "params": wl.params, "weights_mib_fp32": wl.params * 4 / MIB, "step": spec.step, "unit": wl.unit, "items_per_step": wl.throughput,
        "variant_info": conv.info, "benchmark": bench, "flops": roof, "flops_error": flops_error,
        "telemetry": tel_summary, "telemetry_timeline": tel.timeline(), "unreliable": unreliable,
    }
    if ref is not None:
        point["accuracy"] = accuracy.metrics(m.output, ref, kind=wl.output_kind)

    progress.stage(f"{title}: memory")
    point["memory"] = memory_profile(step, conv.module, conv.inputs, device)

    if not cfg.skip_detailed:
        progress.stage(f"{title}: layer breakdown ({cfg.layer_rounds} rounds)")
        layers = layer_breakdown(prepared.module, prepared.inputs, device, variant.context(device.type), rounds=cfg.layer_rounds)
        if conv.module is not prepared.module:
            layers["note"] = "hooks cannot see inside a compiled graph or an engine: this is the eager module the variant was built from"
        point["layers"] = layers

        progress.stage(f"{title}: precision comparison ({', '.join(cfg.precisions)})")
        pwl = build_workload(spec, pt.size, device, batch=pt.batch, seed=cfg.seed, checkpoint=cfg.checkpoint, **pt.options) if _mutates(variant) else wl
        point["precision"] = precision_comparison(pwl, device, cfg.precisions, iterations=cfg.iterations, warmup=cfg.warmup,
                                                  budget_s=cfg.precision_budget_s, progress=progress)

        progress.stage(f"{title}: torch profiler trace ({cfg.trace_steps} steps)")
        eager = conv.module if conv.module is prepared.module else None
        point["trace"] = trace_steps(step, device, run_dir / f"trace-{pt.slug}.json", steps=cfg.trace_steps, top_n=cfg.top_ops, module=eager)
        point["trace"]["trace"] = os.path.relpath(point["trace"]["trace"], run_dir)
        point["trace"]["ops_table"] = os.path.relpath(point["trace"]["ops_table"], run_dir)
        if cfg.nvtx:
            progress.stage(f"{title}: NVTX ranges")
            point["nvtx"] = nvtx_section(step, device, eager, cfg.trace_steps, cfg.command, run_dir)
    point["suggestions"] = [s.as_dict() for s in point_suggestions(point, device.type)]
    return point


def point_suggestions(point: dict[str, Any], device_type: str) -> list[suggest.Suggestion]:
    """Feed one point's numbers to the rules in perfgate.suggest."""
    layers = point.get("layers") or {}
    main = next((g for g in layers.get("blocks", []) if g["list"] == layers.get("main_blocks")), None)
    rows = (point.get("precision") or {}).get("rows", {})
    speedups = {p: r["speedup"] for p, r in rows.items() if r.get("speedup")}
    gpu_util = ((point.get("telemetry") or {}).get("metrics") or {}).get("gpu_util_pct", {}).get("mean")
    mem = point.get("memory") or {}
    return suggest.suggest(
        device_type=device_type,
        blocks_share_=main["share"] if main else None,
        n_blocks=main["n"] if main else 0,
        block_std_ms=main["std_ms"] if main else None,
        attention_share_=(layers.get("attention") or {}).get("share"),
        patch_embedding_share_=(layers.get("patch_embedding") or {}).get("share"),
        speedups=speedups,
        peak_mem_mib=mem.get("peak_mem_mib"),
        headroom=mem.get("headroom"),
        gpu_util_mean_pct=gpu_util,
        unreliable=point.get("unreliable"),
    )


# --- the run ----------------------------------------------------------------------------------


def new_run_dir(out_dir: Path, cfg: ProfileConfig, first: Point) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{cfg.model}-{first.size}-{first.variant}" + (f"-sweep-{cfg.sweep[0]}" if cfg.sweep else "")
    for i in range(1000):
        path = out_dir / (name if i == 0 else f"{name}-{i}")
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
    raise ProfileError(f"cannot create a run folder under {out_dir}")


def check_config(cfg: ProfileConfig) -> torch.device:
    try:
        device = torch.device(cfg.device)
    except RuntimeError as exc:
        raise ProfileError(f"--device {cfg.device!r}: {exc}") from None
    if device.type not in ("cpu", "cuda"):
        raise ProfileError(f"--device {cfg.device!r}: perfgate profiles 'cpu' and 'cuda'")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ProfileUnavailable(f"--device {cfg.device}: this machine has no CUDA device (torch.cuda.is_available() is False); use --device cpu")
    if cfg.iterations < 1:
        raise ProfileError(f"--iterations must be at least 1, got {cfg.iterations}")
    unknown = [p for p in cfg.precisions if p not in PRECISIONS]
    if unknown:
        raise ProfileError(f"--precisions {','.join(unknown)}: known precisions are {', '.join(PRECISIONS)}")
    if cfg.telemetry_interval_s <= 0:
        raise ProfileError(f"--telemetry-interval-ms must be positive, got {cfg.telemetry_interval_s * 1e3:g}")
    return bind(device)


def run_profile(cfg: ProfileConfig, *, stream: Any = None) -> tuple[Path, dict[str, Any]]:
    """Profile every point of `cfg` and write report.json and report.html into a new run folder."""
    from perfgate.fingerprint import fingerprint, fingerprint_id

    device = check_config(cfg)
    pts = points(cfg)
    for pt in pts:  # fail on a bad size or variant before minutes of profiling
        spec = _spec(cfg.model)
        if pt.size not in sizes(spec):
            raise ProfileError(f"model {cfg.model!r} has no size {pt.size!r}; sizes: {', '.join(sizes(spec))}")
        if pt.variant not in VARIANTS:
            raise ProfileError(f"unknown variant {pt.variant!r}; known: {', '.join(VARIANTS)}")
    run_dir = new_run_dir(Path(cfg.out_dir), cfg, pts[0])
    progress = Progress(total=len(pts) * _stages(cfg) + 1, stream=stream)
    progress.note(f"run folder {run_dir}")
    fp = fingerprint(device)
    report: dict[str, Any] = {
        "schema": 1,
        "tool": "perfgate profile",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "command": cfg.command,
        "model": cfg.model,
        "device": str(device),
        "hardware": fp.get("gpu_name") or fp.get("cpu_model"),
        "fingerprint": fp,
        "fingerprint_id": fingerprint_id(fp),
        "sweep": {"option": cfg.sweep[0], "values": list(cfg.sweep[1])} if cfg.sweep else None,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        "points": [],
    }
    for pt in pts:
        report["points"].append(profile_point(pt, cfg, device, run_dir, progress))
    report["torch_trace"] = torch_trace_section(run_dir)
    progress.stage("writing report.json and report.html")
    write_report(run_dir, report)
    return run_dir, report


def write_report(run_dir: Path, report: dict[str, Any]) -> None:
    from perfgate.output import files, html  # jinja2 and matplotlib load only when a report is written

    files.write_text(run_dir / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    files.write_text(run_dir / "report.html", html.profile_report(report))


# --- evidence for the benchmark suite ----------------------------------------------------------


def capture_evidence(
    step: Callable[[], Any],
    device: torch.device | str,
    out_dir: Path,
    *,
    steps: int = 3,
    top_n: int = 10,
    memory_snapshot: bool = True,
) -> dict[str, Any]:
    """A profiler trace of a benchmark case's step (and on CUDA an allocator snapshot for
    pytorch.org/memory_viz) in `out_dir`: the evidence a verdict points to."""
    device = torch.device(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = trace_steps(step, device, out_dir / "trace.json", steps=steps, top_n=top_n)
    evidence: dict[str, Any] = {"trace": trace["trace"], "ops_table": trace["ops_table"], "top_ops": trace["top_ops"][:5]}
    if memory_snapshot and device.type == "cuda":
        path = out_dir / "memory_snapshot.pickle"
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        try:
            step()
            torch.cuda.synchronize(device)
            torch.cuda.memory._dump_snapshot(str(path))
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        evidence["memory_snapshot"] = str(path)
    return evidence


def reproduce_commands(case: Any, nodeid: str | None = None) -> dict[str, str]:
    """The commands that re-run one benchmark case (a perfgate.runner.Case): the pytest case
    alone, and a full profile of it."""
    opts = dict(case.options)
    node = nodeid or f"benchmarks/test_models.py::test_step[{case.id}]"
    pytest_cmd = (
        f"python -m pytest {shlex.quote(node)} --perfgate-device {case.device} --perfgate-models {case.model} "
        f"--perfgate-sizes {case.size} --perfgate-variants {shlex.quote(case.variant)} -v"
    )
    profile_cmd = f"perfgate profile {case.model} --size {case.size} --variant {shlex.quote(case.variant)} --device {case.device}"
    profile_cmd += "".join(f" --option {shlex.quote(f'{k}={v}')}" for k, v in opts.items())
    return {"pytest": pytest_cmd, "profile": profile_cmd}


def with_evidence(verdict: Any, evidence: dict[str, Any]) -> Any:
    """The verdict with its message naming the trace and the reproduce command."""
    parts = [f"trace: {evidence['trace']}"]
    if evidence.get("memory_snapshot"):
        parts.append(f"memory snapshot: {evidence['memory_snapshot']}")
    if evidence.get("reproduce"):
        parts.append(f"reproduce: {evidence['reproduce']['pytest']}")
    msg = (verdict.message + " " if verdict.message else "") + "[" + "; ".join(parts) + "]"
    return dataclasses.replace(verdict, message=msg)
