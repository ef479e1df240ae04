"""The measurement core: time a zero-argument step on a device.

One first call (compile, autotuning, graph capture) timed apart; warm-up until successive
samples settle; then timed rounds until the median's confidence interval is within the target
precision, bounded by a minimum and maximum number of rounds and a time budget. Raw samples are
kept: the gate tests significance on them.

On a CPU, each timed round can also time a fixed reference workload just before the step
(`reference_step`). The speed of a shared machine drifts by tens of percent between runs (other
tenants, clocks, memory placement); the step/reference ratio of a round cancels that drift, and
the gate judges latency on those ratios (`normalise` in the policy) while every reported
millisecond stays the step's own. Between-process CV of a 4 ms step's median on the development
VM: 17-24% raw, 2-3% as ratios (24 fresh processes); reference timings taken only before and
after the timed rounds, rather than in every round, left 10%: the drift is faster than a run.

The timed rounds are perfgate.measure.rounds' loop, the one interleaved A/B uses too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from perfgate.measure.memory import MemoryTracker, PeakMemory
from perfgate.measure.rounds import gc_paused, timed_rounds
from perfgate.measure.stats import StopRule, TimingSummary, summarize
from perfgate.record import ThrottledRounds


class CpuTimer:
    """Host wall clock; perf_counter_ns has 1 ns resolution here."""

    def time_ms(self, step: Callable[[], Any]) -> tuple[float, Any]:
        t0 = time.perf_counter_ns()
        out = step()
        return (time.perf_counter_ns() - t0) / 1e6, out


class CudaEventTimer:
    """CUDA events on the current stream, synchronised on the end event.

    A host clock would only time the kernel launches: work is asynchronous on the GPU.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def time_ms(self, step: Callable[[], Any]) -> tuple[float, Any]:
        torch.cuda.synchronize(self.device)
        stream = torch.cuda.current_stream(self.device)
        self._start.record(stream)
        out = step()
        self._end.record(stream)
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)), out


T = TypeVar("T")


def private_copy(output: T) -> T:
    """A step's output with every tensor copied: CUDA-graph variants (CudaGraphModule, cudagraph
    trees) overwrite it on the next call, so accuracy reads the copy."""
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), output)


def make_timer(device: torch.device | str) -> CpuTimer | CudaEventTimer:
    device = torch.device(device)
    if device.type == "cuda":
        return CudaEventTimer(device)
    if device.type == "cpu":
        return CpuTimer()
    raise ValueError(f"unsupported device {device}: perfgate times 'cpu' and 'cuda'")


def linear_gelu_chain(*, depth: int, width: int, batch: int, seed: int = 0) -> Callable[[], Any]:
    """A zero-argument step: `depth` Linear(width, width) + GELU layers on a fixed [batch, width]
    input, fp32, inference mode (the reference workload, and the gate-quality experiment's chain)."""
    gen = torch.Generator().manual_seed(seed)
    blocks: list[torch.nn.Module] = []
    for _ in range(depth):
        lin = torch.nn.Linear(width, width)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(width, width, generator=gen) / width**0.5)
            lin.bias.zero_()
        blocks += [lin, torch.nn.GELU()]
    chain = torch.nn.Sequential(*blocks).eval()
    x = torch.randn(batch, width, generator=gen)  # (B, W)

    def step() -> Any:
        with torch.inference_mode():
            return chain(x)  # (B, W)

    return step


# GEMMs and element-wise work like the models', 1.2-1.7 ms on 2 threads of the development VM: long
# enough to time well, short beside most steps. Changing it invalidates every recorded ratio.
REFERENCE_SHAPE = {"depth": 30, "width": 192, "batch": 24, "seed": 1}
_reference: Callable[[], Any] | None = None


def reference_step() -> Callable[[], Any]:
    """The process's reference workload (built once)."""
    global _reference
    if _reference is None:
        _reference = linear_gelu_chain(**REFERENCE_SHAPE)
    return _reference


@dataclass(frozen=True, kw_only=True)
class WarmupRule:
    """Warm up until the last `window` samples' median is within `tolerance` of the window before."""

    min_rounds: int = 3
    max_rounds: int = 50
    window: int = 3
    tolerance: float = 0.10
    budget_s: float = 10.0


def warmup_settled(samples: list[float], rule: WarmupRule) -> bool:
    """True when first-call effects are gone: two successive windows agree in median."""
    if len(samples) < max(rule.min_rounds, 2 * rule.window):
        return False
    last = float(np.median(samples[-rule.window :]))
    prev = float(np.median(samples[-2 * rule.window : -rule.window]))
    return abs(last - prev) <= rule.tolerance * prev


@dataclass(kw_only=True)
class Measurement:
    samples_ms: list[float]
    first_call_s: float
    warmup_rounds: int
    stop: str
    memory: PeakMemory
    device: str
    timer: str
    contention_cores: float = 0.0
    reference_ms: list[float] | None = None  # the reference workload's time in each round (CPU)
    throttle: ThrottledRounds | None = (
        None  # GPU: rounds dropped as throttled (perfgate.measure.throttle.throttle_block)
    )
    output: Any = field(default=None, repr=False)

    @property
    def summary(self) -> TimingSummary:
        return summarize(self.samples_ms)


def measure(
    step: Callable[[], Any],
    device: torch.device | str,
    *,
    stop: StopRule = StopRule(),
    warmup: WarmupRule = WarmupRule(),
    progress: Callable[[str], None] | None = None,
    reference: Callable[[], Any] | None = None,
    first_call: str = "first call",
    probe: Any = None,
) -> Measurement:
    """Measure `step` on `device`; returns raw samples in ms and the first-call time in s.

    With `reference` (CPU only) every round times the reference, runs the step once untimed and
    then times it; the stop rule asks for precision of the step/reference ratio, the quantity the
    gate then judges, and the peak memory is tracked over two further steps alone.

    `progress` hears of each phase as it begins (`first_call` names the first call's) and how the
    timed rounds ended; never during them, where a terminal redraw would land between samples.

    With `probe` (a perfgate.measure.throttle.ClockProbe, CUDA) every round is checked after its sample is
    taken: a throttled round is dropped and the next waits the probe's recovery delay; after
    `stop.max_rounds` drops the measurement stops, and if fewer than `stop.min_rounds` rounds
    remain all are kept, flagged `too_few` (the gate then calls the case unreliable).
    """
    say = progress or (lambda _: None)
    device = torch.device(device)
    if reference is not None and device.type != "cpu":
        raise ValueError(f"a reference workload normalises CPU timings only, not {device}")
    timer = make_timer(device)
    if reference is not None:
        for _ in range(5):  # its own first calls and allocations, out of the first round
            reference()
    say(first_call)
    first_ms, output = timer.time_ms(step)
    output = private_copy(output)

    say(f"warming up (first call {first_ms / 1e3:.1f} s)")
    warm: list[float] = []
    t0 = time.perf_counter()
    while len(warm) < warmup.max_rounds and not warmup_settled(warm, warmup):
        warm.append(timer.time_ms(step)[0])
        if time.perf_counter() - t0 > warmup.budget_s and len(warm) >= warmup.min_rounds:
            break

    budget = f", up to about {stop.budget_s:g} s" if math.isfinite(stop.budget_s) else ""
    rounds = f"{stop.min_rounds}" if stop.min_rounds == stop.max_rounds else f"{stop.min_rounds}-{stop.max_rounds}"
    say(f"timing rounds ({rounds} rounds{budget})")
    if reference is None:
        with MemoryTracker(device) as mem:
            r = timed_rounds([("step", step)], timer, lambda t: t["step"], stop=stop, probe=probe)
    else:
        # The reference timed, the step once untimed, the step timed: every recorded ratio has this
        # order. Right after the reference a short step measured 0.1-0.3 ms slower (cold caches, idle
        # threads; physicsnemo tiny +37%): the untimed call warms them again.
        r = timed_rounds(
            [("reference", reference), ("step", step)],
            timer,
            lambda t: t["step"] / t["reference"],
            stop=stop,
            untimed_first={"step"},
            probe=probe,
        )
    samples = r.samples_ms["step"]
    say(f"timed {len(samples)} rounds in {r.wall_s:.1f} s ({r.stop})")
    if reference is not None:
        with gc_paused(), MemoryTracker(device) as mem:  # the step's peak alone: the reference's must not count
            for _ in range(2):
                step()
    assert mem.result is not None
    throttle = None
    if probe is not None:
        from perfgate.measure.throttle import throttle_block

        throttle = throttle_block(r.drop_reasons, r.dropped, len(samples), stop.min_rounds, probe.rule)
        if throttle.too_few:
            samples = r.all_ms["step"]  # too few clean rounds: report them all; the case is unreliable
    return Measurement(
        samples_ms=samples,
        first_call_s=first_ms / 1e3,
        warmup_rounds=len(warm),
        stop=r.stop,
        memory=mem.result,
        device=str(device),
        timer=type(timer).__name__,
        contention_cores=r.contention_cores,
        reference_ms=r.samples_ms.get("reference"),
        throttle=throttle,
        output=output,
    )
