"""The one timed-rounds loop: the suite's measurement (perfgate.measure.core) and interleaved A/B
(perfgate.ab.interleave) both time their rounds here.

A round calls N named steps, in the order given or in a random order drawn each round, each
optionally after an untimed call of itself (a short step timed right after another workload read
0.1-0.3 ms slower: cold caches, idle threads). The stop rule judges one value per kept round, a
function of that round's times (the step/reference or head/base ratio), so the machine's speed
cancels before precision is asked for. The garbage collector is off while timing (a collection
would land in a random sample), other processes' CPU use is measured (contention), and with a GPU
clock probe a throttled round is dropped whole.
"""

from __future__ import annotations

import contextlib
import gc
import random
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfgate.measure.stats import StopRule, stop_reason


def busy_cpu_s() -> tuple[float, float]:
    """(all processes' busy CPU seconds, this process's CPU seconds) so far."""
    import psutil

    t = psutil.cpu_times()
    busy = (
        t.user
        + t.system
        + getattr(t, "nice", 0.0)
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )
    own = psutil.Process().cpu_times()
    return busy, own.user + own.system + own.children_user + own.children_system


def contention(before: tuple[float, float], after: tuple[float, float], wall_s: float) -> float:
    """Other processes' CPU time during the measurement, in cores (0.5 = half a core busy).

    On a 2-core machine one busy neighbour slows a 2-thread run tenfold: such a sample is not a
    regression of the code but of the machine, and the gate calls it unreliable.
    """
    if wall_s <= 0:
        return 0.0
    other = (after[0] - before[0]) - (after[1] - before[1])
    return max(other, 0.0) / wall_s


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Collect now, then keep the collector off inside (restored as it was)."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Timer(Protocol):
    """perfgate.measure.core's CpuTimer or CudaEventTimer."""

    def time_ms(self, step: Callable[[], Any]) -> tuple[float, Any]: ...


class Probe(Protocol):
    """perfgate.measure.throttle.ClockProbe: why the GPU ran throttled since the last check, if it did."""

    rule: Any  # its ThrottleRule: recovery_delay_s

    def throttled(self) -> list[str]: ...


@dataclass(kw_only=True)
class Rounds:
    """Times per step name: `samples_ms` of the kept rounds, `all_ms` of every round (dropped too)."""

    samples_ms: dict[str, list[float]]
    all_ms: dict[str, list[float]]
    judged: list[float]  # the value the stop rule judged, per kept round
    stop: str  # precise, max_rounds, budget, throttled
    wall_s: float
    contention_cores: float
    dropped: int = 0  # rounds dropped as throttled
    drop_reasons: dict[str, int] = field(default_factory=dict)  # throttle reason: rounds


def timed_rounds(
    steps: Sequence[tuple[str, Callable[[], Any]]],
    timer: Timer,
    judge: Callable[[dict[str, float]], float],
    *,
    stop: StopRule,
    untimed_first: Collection[str] = (),
    order: random.Random | None = None,
    probe: Probe | None = None,
) -> Rounds:
    """Time rounds of `steps` until `stop` says so.

    Each round calls the steps in the given order, or in `order.sample`'s order when a generator is
    given; a step named in `untimed_first` is called once untimed right before its timed call.
    `judge(times)` turns a kept round's times (ms by name) into the value the stop rule judges.
    With `probe`, each round is checked after its samples (outside the timing): a throttled round is
    dropped, the next waits the probe's recovery delay, and `stop.max_rounds` drops end the loop.
    """
    names = [name for name, _ in steps]
    kept: dict[str, list[float]] = {n: [] for n in names}
    every: dict[str, list[float]] = {n: [] for n in names}
    judged: list[float] = []
    drops: dict[str, int] = {}
    n_dropped = 0
    with gc_paused():
        cpu0 = busy_cpu_s()
        t0 = time.perf_counter()
        reason = None
        while reason is None:
            times: dict[str, float] = {}
            for name, step in order.sample(steps, len(steps)) if order is not None else steps:
                if name in untimed_first:
                    step()
                times[name] = timer.time_ms(step)[0]
            for name in names:
                every[name].append(times[name])
            why = probe.throttled() if probe is not None else []
            if why:
                drops.update({w: drops.get(w, 0) + 1 for w in why})
                n_dropped += 1
                if n_dropped >= stop.max_rounds:
                    reason = "throttled"
                time.sleep(probe.rule.recovery_delay_s)
                continue
            for name in names:
                kept[name].append(times[name])
            judged.append(judge(times))
            reason = stop_reason(judged, time.perf_counter() - t0, stop)
            # No progress call in here: a redraw between rounds is work the next sample would pay for.
        wall_s = time.perf_counter() - t0
        cpu1 = busy_cpu_s()
    return Rounds(
        samples_ms=kept,
        all_ms=every,
        judged=judged,
        stop=reason,
        wall_s=wall_s,
        contention_cores=contention(cpu0, cpu1, wall_s),
        dropped=n_dropped,
        drop_reasons=drops,
    )
