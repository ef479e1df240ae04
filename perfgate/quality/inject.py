"""Slowdowns injected where users' regressions happen, to measure the gate (`perfgate gate-quality --ab`).

A pytest plugin (`-p perfgate.quality.inject`) driven by `PERFGATE_INJECT`:

- `local:K`: the model does K% more of its own work: after each step one of its leaf modules with
  parameters (a Linear, a convolution) runs again on the input it had, n times, the leaf and n
  chosen from timings so that the extra is closest to K% of the step's time. The reference
  workload and every other op are untouched: a model-local regression.
- `shared:K`: every ceil(100/K)-th call of `torch.nn.functional.linear` in the process is done
  twice, the model's and the reference workload's alike: a slower op that everything shares (the
  first version's blind spot, which normalising by the reference hides).

and by `PERFGATE_INJECT_SIZED` (a file of slowdowns sized by instructions, per case; see the end).

Never loaded by the suite itself.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
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
    if os.environ.get(SIZED_ENV):
        _sized_build_case()
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


# --- slowdowns sized by instructions (perfgate.counts.quality) ---------------------------------
#
# Under callgrind a slowdown can be sized by the work it adds rather than by timings: a calibration
# process counts the step, the step with the op done twice on every call (the op's share of the
# step) and each leaf module's call alone; the slowdown is then every Nth call (or step) chosen so
# that the step grows by the target. The worker applies them per case (`apply`).

OPS = {"linear": "linear", "sdpa": "scaled_dot_product_attention"}  # short name -> torch.nn.functional name


class OpCalls:
    """Calls of one patched op and how many of them were done twice (read around a window)."""

    def __init__(self) -> None:
        self.calls = 0
        self.doubled = 0
        # tensors the patch made: per weight (by id), (the weight, its wider copy, the wider bias or None)
        self.made: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}


def _every_nth_twice(op: str, every: int) -> tuple[str, Callable[..., Any], Callable[..., Any], OpCalls]:
    """(torch.nn.functional's name, the original, the op doing every `every`-th call twice, its counter)."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    name = OPS.get(op, op)
    original = getattr(torch.nn.functional, name)
    seen = OpCalls()

    def twice(*args: Any, **kwargs: Any) -> Any:
        seen.calls += 1
        if seen.calls % every == 0:
            seen.doubled += 1
            original(*args, **kwargs)
        return original(*args, **kwargs)

    return name, original, twice, seen


def slow_op(op: str, every: int) -> tuple[Callable[[], None], OpCalls]:
    """Every `every`-th call of torch.nn.functional.<op> (in this process, from now) done twice;
    returns the undo and the call counter."""
    name, original, twice, seen = _every_nth_twice(op, every)
    setattr(torch.nn.functional, name, twice)
    return (lambda: setattr(torch.nn.functional, name, original)), seen


def _every_nth_wider(every: int) -> tuple[Callable[..., Any], Callable[..., Any], OpCalls]:
    """(F.linear, one computing every `every`-th call with twice the output features and slicing
    the extra half off, its counter): the GPU does more work in the same GEMM launch, so the kernel
    count stays (a slower kernel, what only device time sees). The result is the same values (a
    view of the wider output). Each weight's wider copy is made at its first call, once (in the
    warm-up; a CUDA graph captured after it replays no copy)."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    original = torch.nn.functional.linear
    seen = OpCalls()
    wider = seen.made  # held by the counter: a CUDA graph captured under the patch reads these after its undo

    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        entry = wider.get(id(weight))
        if entry is None or entry[0] is not weight:  # keyed by identity: an id reused after a free is not this weight
            with torch.no_grad():
                entry = (weight, torch.cat([weight, weight]), None if bias is None else torch.cat([bias, bias]))
            wider[id(weight)] = entry
        seen.calls += 1
        if seen.calls % every == 0:
            seen.doubled += 1
            return original(x, entry[1], entry[2])[..., : weight.shape[0]]
        return original(x, weight, bias)

    return original, linear, seen


def slow_linear_wider(every: int) -> tuple[Callable[[], None], OpCalls]:
    """Every `every`-th call of torch.nn.functional.linear (in this process, from now) done with
    twice the output features in one launch; returns the undo and the call counter."""
    original, linear, seen = _every_nth_wider(every)
    torch.nn.functional.linear = linear
    return (lambda: setattr(torch.nn.functional, "linear", original)), seen


def wider_step(step: Callable[[], Any], every: int) -> Callable[[], Any]:
    """`step` with every `every`-th F.linear twice as wide while it runs (one counter across steps)."""
    original, linear, _ = _every_nth_wider(every)

    def injected() -> Any:
        torch.nn.functional.linear = linear
        try:
            return step()
        finally:
            torch.nn.functional.linear = original

    return injected


def every_nth(share: float, target: float, *, window_calls: int | None = None) -> int:
    """Every how many calls to do an op twice so that the step grows by `target` (a fraction), the
    op being `share` of the step (the step with every call doubled is 1 + share times the plain
    step): the step grows by share / N, N a whole number >= 1. N is the one whose share / N lies
    closest to the target (a tie goes to the larger N, the smaller slowdown), not share / target
    rounded: Python's round goes half to even (share 0.05 for 2% would give N = 2, +2.5%, where
    N = 3 gives +1.67%, the closer). With `window_calls` (the op's calls in the counted window), N
    divides it where such an N lands within a quarter of the target (or no farther than the closest
    N): the window then holds whole periods, the same number of doubled calls whatever the counter's
    phase. A share below the target cannot reach it (N = 1, every call: the step grows by the share)."""
    if share <= 0 or target <= 0:
        raise ValueError(f"share and target must be > 0, got {share} and {target}")

    def miss(n: int) -> float:
        return abs(share / n - target)

    def closest(candidates: Iterable[int]) -> int:
        return min(candidates, key=lambda n: (round(miss(n), 12), -n))

    ideal = math.floor(share / target)
    free = closest({max(1, ideal), ideal + 1})
    if window_calls is not None and window_calls >= 1:
        whole = closest(d for d in range(1, window_calls + 1) if window_calls % d == 0)
        if miss(whole) <= max(miss(free), target / 4):
            return whole
    return free


def local_plan(leaf_shares: dict[str, float], target: float, steps: int, max_times: int = 64) -> dict[str, Any]:
    """The model-local slowdown closest to `target` (a fraction of the step): one leaf module called
    again `times` times after every `every`-th step. `leaf_shares`: each leaf's one extra call as a
    fraction of the step's instructions. `every` divides the counted window (`steps`), so the window
    holds steps/every repeated steps whatever its phase; growth = times x share / every."""
    if not leaf_shares:
        raise ValueError("no leaf module with parameters: cannot size a model-local slowdown")
    best: tuple[float, int, str, int, int] | None = None
    for name, share in sorted(leaf_shares.items()):
        if share <= 0:
            continue
        for every in (d for d in range(1, steps + 1) if steps % d == 0):
            times = min(max_times, max(1, round(target * every / share)))
            miss = abs(times * share / every - target)
            key = (round(miss, 12), times, name, every)
            if best is None or key < best[:4]:
                best = (*key, every)
    if best is None:
        raise ValueError("every leaf module counted zero instructions: cannot size a model-local slowdown")
    _, times, name, _, every = best
    return {
        "kind": "local",
        "leaf": name,
        "every": every,
        "times": times,
        "predicted": times * leaf_shares[name] / every,
    }


def leaf_call(mod: nn.Module, args: tuple, times: int = 1) -> Callable[[], None]:
    """The extra model work of a local slowdown: the leaf called `times` times on its input."""

    def work() -> None:
        with torch.inference_mode():
            for _ in range(times):
                mod(*args)

    return work


def apply(
    spec: dict[str, Any], step: Callable[[], Any], module: nn.Module
) -> tuple[Callable[[], Any], Callable[[], None], Any]:
    """One case's sized slowdown: (the step to run, the undo, a counter to read around the window).
    spec: {"kind": "op", "op": "linear", "every": N} or {"kind": "local", "leaf": name, "every": N,
    "times": n} (from every_nth / local_plan)."""
    if spec["kind"] == "op":
        undo, seen = slow_op(spec["op"], int(spec["every"]))
        return step, undo, seen
    if spec["kind"] != "local":
        raise ValueError(f"unknown slowdown kind {spec['kind']!r}: op or local")
    leaves = leaf_inputs(step, module)
    if spec["leaf"] not in leaves:
        raise ValueError(f"no leaf module {spec['leaf']!r} in this model")
    work = leaf_call(*leaves[spec["leaf"]], times=int(spec["times"]))
    every, seen = int(spec["every"]), OpCalls()

    def injected() -> Any:
        out = step()
        seen.calls += 1
        if seen.calls % every == 0:
            seen.doubled += 1
            work()
        return out

    return injected, (lambda: None), seen


# --- the same sized slowdowns, timed (`perfgate gate-quality --ab --sized-by`) ----------------------
#
# The time gates meet the slowdowns the instruction gate was measured on: a JSON file {case id: spec}
# (one label's specs from perfgate.counts.quality's output) names them; `PERFGATE_INJECT_SIZED` slows
# every process that loads this plugin, `PERFGATE_INJECT_HEAD_SIZED` the head's model of an
# interleaved A/B worker (perfgate.ab.interleave).

SIZED_ENV = "PERFGATE_INJECT_SIZED"


def load_sized(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """{case id: spec} from a sized-slowdown file; a one-line error naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the sized slowdowns ({exc}); write {{case id: spec}} as JSON") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "kind" in v for v in data.values()):
        raise ValueError(f"{path}: not {{case id: spec}} (each spec a dict with its kind); see perfgate.counts.quality")
    return data


def sized_step(spec: dict[str, Any], step: Callable[[], Any], module: nn.Module) -> Callable[[], Any]:
    """`step` with its sized slowdown. An op's doubling is switched on only while the step runs, with
    one call counter across steps: what the counted window saw, and nothing else in the process (the
    other cases, the reference workload) is slowed by it."""
    if spec["kind"] != "op":
        return apply(spec, step, module)[0]
    name, original, twice, _ = _every_nth_twice(spec["op"], int(spec["every"]))

    def injected() -> Any:
        setattr(torch.nn.functional, name, twice)
        try:
            return step()
        finally:
            setattr(torch.nn.functional, name, original)

    return injected


def _sized_build_case() -> None:
    """Every case named in the `PERFGATE_INJECT_SIZED` file built with its slowdown."""
    from perfgate.cases import runner

    plan = load_sized(os.environ[SIZED_ENV])
    build = runner.build_case

    def build_case(case: Any, opts: Any, **kwargs: Any) -> Any:
        built = build(case, opts, **kwargs)
        if (spec := plan.get(case.id)) is not None:
            built.step = sized_step(spec, built.step, built.converted.module)
        return built

    runner.build_case = build_case  # run_case builds every case through this name
