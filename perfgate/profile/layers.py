"""The layer-by-layer breakdown of a forward: per top-level module, per block (children of any
nn.ModuleList) with mean and std, the slowest five blocks and each part's share.

Margin: per-module times come from forward pre/post hooks (host clock on the CPU, CUDA events on
the GPU) in rounds interleaved with un-instrumented forwards. The top-level parts plus the root's
own ops ("unattributed") add up exactly to the instrumented forward; the instrumented forward
exceeds the plain one by the hooks' cost, reported as `hook_overhead_pct`. The breakdown is called
consistent when the median over rounds of the parts' sum is within BREAKDOWN_MARGIN (25%) of the
plain forward's median; each hook pair costs a few microseconds of host time, so tiny CPU models
sit nearest that bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from perfgate.measure.core import make_timer
from perfgate.profile.report import BlockGroup, BlockTiming, LayerBreakdown, LayerComponent, ModuleShare

BREAKDOWN_MARGIN = 0.25


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
        if (
            path
            and _attention_name(path, m)
            and not _is_container(m)
            and not any(path.startswith(a + ".") for a in attention)
        ):
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
) -> LayerBreakdown:
    """Per-module forward times, in rounds alternating plain and instrumented forwards."""
    plan = layer_plan(module)
    named = dict(module.named_modules())
    root = "<forward>"
    named[root] = module
    hooked = (
        {root}
        | {n for ms in plan.top.values() for n in ms}
        | {n for g in plan.blocks.values() for ms in g.values() for n in ms}
        | set(plan.attention)
    )
    plain_ms, per_round = _rounds(module, inputs, device, context, named, hooked, rounds=rounds, warmup=warmup)

    def series(names: list[str]) -> list[float]:
        return [sum(r.get(n, 0.0) for n in names) for r in per_round]

    total_mean, total_std = _mean_std(series([root]))
    plain_mean, _ = _mean_std(plain_ms)
    components = _components(plan, named, series, total_mean)
    parts_sum = sum(c.mean_ms for c in components)
    # The consistency check uses medians over rounds: on a shared machine one stalled round
    # would otherwise decide it.
    parts_median = float(np.median([sum(r.get(n, 0.0) for ms in plan.top.values() for n in ms) for r in per_round]))
    plain_median = float(np.median(plain_ms))
    total_median = float(np.median(series([root])))
    block_groups = _block_groups(plan, named, series, total_mean)
    attn_ms = sum(_mean_std(series([n]))[0] for n in plan.attention)
    patch_ms = sum(c.mean_ms for c in components if c.name in plan.patch)
    largest = max(block_groups, key=lambda g: g.total_ms, default=None)
    return LayerBreakdown(
        rounds=rounds,
        timer="cuda events" if device.type == "cuda" else "host perf_counter",
        scope="forward of the eager module under the variant's context (inference mode)",
        plain_mean_ms=plain_mean,
        plain_median_ms=plain_median,
        total_mean_ms=total_mean,
        total_std_ms=total_std,
        total_median_ms=total_median,
        hook_overhead_pct=(total_median / plain_median - 1.0) * 100.0 if plain_median else None,
        components=sorted(components, key=lambda c: -c.mean_ms),
        unattributed_ms=total_mean - parts_sum,  # the root's own ops: residual adds, reshapes
        parts_sum_ms=parts_sum,
        parts_median_ms=parts_median,
        sum_vs_plain=parts_median / plain_median if plain_median else None,
        margin=BREAKDOWN_MARGIN,
        consistent=bool(plain_median and abs(parts_median / plain_median - 1.0) <= BREAKDOWN_MARGIN),
        blocks=block_groups,
        main_blocks=largest.path if largest else None,
        attention=ModuleShare(
            modules=plan.attention,
            total_ms=attn_ms,
            share=attn_ms / total_mean if total_mean and plan.attention else None,
        ),
        patch_embedding=ModuleShare(
            modules=plan.patch,
            total_ms=patch_ms,
            share=patch_ms / total_mean if total_mean and plan.patch else None,
        ),
    )


def _rounds(
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    device: torch.device,
    context: Callable[[], Any],
    named: dict[str, nn.Module],
    hooked: set[str],
    *,
    rounds: int,
    warmup: int,
) -> tuple[list[float], list[dict[str, float]]]:
    """The plain forward's times and, per round, each hooked module's time in an instrumented forward."""
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
    return plain_ms, per_round


def _components(
    plan: LayerPlan, named: dict[str, nn.Module], series: Callable[[list[str]], list[float]], total_mean: float
) -> list[LayerComponent]:
    """Each top-level component's time over rounds and its share of the forward."""
    components: list[LayerComponent] = []
    for comp, members in plan.top.items():
        mean, std = _mean_std(series(members))
        components.append(
            LayerComponent(
                name=comp,
                class_name=type(named[comp]).__name__,
                mean_ms=mean,
                std_ms=std,
                median_ms=float(np.median(series(members))),
                share=mean / total_mean if total_mean else None,
                modules=len(members),
                blocks=len(m) if isinstance(m := named[comp], nn.ModuleList) else None,
            )
        )
    return components


def _block_groups(
    plan: LayerPlan, named: dict[str, nn.Module], series: Callable[[list[str]], list[float]], total_mean: float
) -> list[BlockGroup]:
    """Each list of repeated blocks: per block, the spread across blocks, the slowest five."""
    block_groups: list[BlockGroup] = []
    for path, members in plan.blocks.items():
        per_block: list[BlockTiming] = []
        for i, (n, calls) in enumerate(members.items()):
            mean, std = _mean_std(series(calls))
            per_block.append(
                BlockTiming(index=i, name=n, mean_ms=mean, std_ms=std, median_ms=float(np.median(series(calls))))
            )
        # Across-block statistics use each block's median over rounds, so one stalled round does
        # not make a block look slow; the total uses means, like the components' shares.
        avg, spread = _mean_std([b.median_ms for b in per_block])
        total = sum(b.mean_ms for b in per_block)
        block_groups.append(
            BlockGroup(
                path=path,
                n=len(members),
                class_name=type(named[next(iter(members))]).__name__,
                mean_ms=avg,
                std_ms=spread,
                total_ms=total,
                share=total / total_mean if total_mean else None,
                slowest=sorted(per_block, key=lambda b: -b.median_ms)[:5],
                per_block=per_block,
            )
        )
    return block_groups


def range_names(module: nn.Module) -> list[str]:
    """Top-level modules and blocks: the layers a trace is read by."""
    plan = layer_plan(module)
    return list(
        dict.fromkeys(
            [n for ms in plan.top.values() for n in ms]
            + [n for g in plan.blocks.values() for ms in g.values() for n in ms]
        )
    )
