"""Slowdowns injected where users' regressions happen, to measure the gate (`perfgate gate-quality --ab`).

A pytest plugin (`-p perfgate.quality.inject`) driven by `PERFGATE_INJECT`:

- `local:K`: the model does K% more of its own work: after each step one of its leaf modules with
  parameters (a Linear, a convolution) runs again on the input it had, n times, the leaf and n
  chosen from timings so that the extra is closest to K% of the step's time. The reference
  workload and every other op are untouched: a model-local regression.
- `shared:K`: every ceil(100/K)-th call of `torch.nn.functional.linear` in the process is done
  twice, the model's and the reference workload's alike: a slower op that everything shares (the
  first version's blind spot, which normalising by the reference hides).

Never loaded by the suite itself.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

ENV = "PERFGATE_INJECT"


def parse(value: str) -> tuple[str, float]:
    kind, _, pct = value.partition(":")
    if kind not in ("local", "shared") or not pct:
        raise ValueError(f"{ENV}={value!r}: write local:K or shared:K (K a slowdown in %)")
    k = float(pct)
    if not 0 < k <= 100:
        raise ValueError(f"{ENV}={value!r}: K must be in (0, 100]")
    return kind, k


def slow_linear(k: float) -> Callable[[], None]:
    """Every ceil(100/k)-th F.linear call computed twice; returns the undo."""
    every = max(1, math.ceil(100 / k))
    original = torch.nn.functional.linear
    calls = [0]

    def linear(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls[0] += 1
        if calls[0] % every == 0:
            original(*args, **kwargs)
        return original(*args, **kwargs)

    torch.nn.functional.linear = linear
    return lambda: setattr(torch.nn.functional, "linear", original)


def _leaves(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (n, m)
        for n, m in module.named_modules()
        if not list(m.children()) and any(True for _ in m.parameters(recurse=False))
    ]


def _median_s(call: Callable[[], Any], calls: int = 30) -> float:
    call()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def leaf_inputs(step: Callable[[], Any], module: nn.Module) -> dict[str, tuple[nn.Module, tuple]]:
    """Each parameterised leaf module with the arguments it was called with in one step."""
    seen: dict[str, tuple[nn.Module, tuple]] = {}

    def keep(name: str) -> Callable[[nn.Module, tuple], None]:
        def hook(mod: nn.Module, args: tuple) -> None:  # returns None: a value would replace the input
            seen.setdefault(name, (mod, args))

        return hook

    handles = [m.register_forward_pre_hook(keep(name)) for name, m in _leaves(module)]
    try:
        step()
    finally:
        for h in handles:
            h.remove()
    return seen


def extra_work(step: Callable[[], Any], module: nn.Module, k: float) -> Callable[[], None]:
    """The model's own work worth k% of its step: one of its leaf modules called again on the input
    it had, n times; the leaf and n chosen from timings (medians of 30 calls) so that n x leaf time
    is closest to k% of the step's median time."""
    target = _median_s(step) * k / 100
    best: tuple[float, nn.Module, tuple, int] | None = None
    with torch.inference_mode():
        for mod, args in leaf_inputs(step, module).values():
            leaf_s = _median_s(lambda mod=mod, args=args: mod(*args))
            # At most 64 repeats (a loop of tiny calls would be Python overhead, not model work); a
            # leaf needing more competes at 64 with its larger miss, so a busy machine's skewed
            # medians still choose a leaf (they once excluded all and raised).
            n = min(64, max(1, round(target / leaf_s))) if leaf_s > 0 else 1
            miss = abs(n * leaf_s - target)
            if best is None or miss < best[0]:
                best = (miss, mod, args, n)
    if best is None:
        raise RuntimeError("no leaf module with parameters to repeat: cannot inject a model-local slowdown")
    _, mod, args, n = best

    def work() -> None:
        with torch.inference_mode():
            for _ in range(n):
                mod(*args)

    return work


def local_slowdown_step(step: Callable[[], Any], module: nn.Module, k: float) -> Callable[[], Any]:
    """`step` doing k% more of the model's own work (chosen on its first call)."""
    work: list[Callable[[], None]] = []

    def injected() -> Any:
        if not work:
            work.append(extra_work(step, module, k))
        out = step()
        work[0]()
        return out

    return injected


def pytest_configure(config: Any) -> None:
    value = os.environ.get(ENV)
    if not value:
        return
    kind, k = parse(value)
    if kind == "shared":
        slow_linear(k)
        return
    from perfgate.cases import runner

    make = runner.make_step

    def make_step(wl: Any, module: nn.Module, inputs: Any, context: Any) -> Callable[[], Any]:
        return local_slowdown_step(make(wl, module, inputs, context), module, k)

    runner.make_step = make_step  # the runner builds every case's step through this name
