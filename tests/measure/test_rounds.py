"""The one timed-rounds loop (perfgate.measure.rounds) with a fake clock advanced by the steps: the
order of the calls in a round, what the stop rule judges, dropped rounds, gc and contention."""

from __future__ import annotations

import gc
import random
from dataclasses import dataclass

import pytest

from perfgate.measure import rounds as rounds_mod
from perfgate.measure.core import CpuTimer
from perfgate.measure.rounds import contention, timed_rounds
from perfgate.measure.stats import StopRule
from perfgate.measure.throttle import ThrottleRule
from tests import fake_clock
from tests.fake_clock import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return fake_clock.install(monkeypatch)


FIXED = StopRule(min_rounds=6, max_rounds=6, budget_s=float("inf"))


def _logged(name: str, ms: float, clock: FakeClock, log: list[str]):
    def step() -> None:
        log.append(name)
        clock.takes(ms)

    return step


def test_a_random_order_each_round_each_step_right_after_its_untimed_call(clock):
    log: list[str] = []
    steps = [("base", _logged("base", 2.0, clock, log)), ("head", _logged("head", 3.0, clock, log))]
    r = timed_rounds(
        steps,
        CpuTimer(),
        lambda t: t["head"] / t["base"],
        stop=StopRule(min_rounds=20, max_rounds=20, budget_s=float("inf")),
        untimed_first={"base", "head"},
        order=random.Random(7),
    )
    per_round = [log[i : i + 4] for i in range(0, len(log), 4)]
    assert len(per_round) == 20
    assert all(rnd[0] == rnd[1] and rnd[2] == rnd[3] and {rnd[0], rnd[2]} == {"base", "head"} for rnd in per_round)
    firsts = [rnd[0] for rnd in per_round]
    # The orders interleave/measure_interleaved drew before the shared loop: same generator, same draws.
    rng = random.Random(7)
    assert firsts == [rng.sample(["base", "head"], 2)[0] for _ in range(20)]
    assert set(firsts) == {"base", "head"}
    assert r.samples_ms == {"base": [2.0] * 20, "head": [3.0] * 20} and r.judged == [1.5] * 20


def test_the_given_order_is_kept_and_only_the_named_steps_get_an_untimed_call(clock):
    log: list[str] = []
    steps = [("reference", _logged("reference", 2.0, clock, log)), ("step", _logged("step", 4.0, clock, log))]
    r = timed_rounds(steps, CpuTimer(), lambda t: t["step"] / t["reference"], stop=FIXED, untimed_first={"step"})
    assert log == ["reference", "step", "step"] * 6
    assert r.samples_ms == {"reference": [2.0] * 6, "step": [4.0] * 6} and r.stop == "max_rounds"


def test_the_stop_rule_judges_the_rounds_ratios_not_the_raw_times(clock):
    # The machine's speed swings threefold every round; both steps move with it, so the ratio is 2.
    log: list[str] = []

    def side(name: str, ms: float):
        def step() -> None:
            speed = (1.0, 3.0)[(len(log) // 2) % 2]  # one round = two calls here
            log.append(name)
            clock.takes(ms * speed)

        return step

    stop = StopRule(precision=0.01, min_rounds=5, max_rounds=50, budget_s=float("inf"))
    steps = [("base", side("base", 1.0)), ("head", side("head", 2.0))]
    r = timed_rounds(steps, CpuTimer(), lambda t: t["head"] / t["base"], stop=stop)
    assert r.stop == "precise" and r.judged == [2.0] * 5  # exact ratios: precise at the minimum
    assert r.samples_ms["base"] == [1.0, 3.0, 1.0, 3.0, 1.0]
    raw = timed_rounds(steps, CpuTimer(), lambda t: t["head"], stop=stop)
    assert raw.stop == "max_rounds" and len(raw.judged) == 50  # the raw times never get precise


@dataclass
class ScriptedProbe:
    answers: list[list[str]]
    rule: ThrottleRule = ThrottleRule(recovery_delay_s=0.0)

    def throttled(self) -> list[str]:
        return self.answers.pop(0) if self.answers else []


def test_a_throttled_round_is_dropped_whole_and_counted(clock):
    log: list[str] = []
    steps = [("reference", _logged("reference", 2.0, clock, log)), ("step", _logged("step", 4.0, clock, log))]
    probe = ScriptedProbe([[], ["hw_thermal_slowdown"], ["sm_clock_below_75%", "hw_thermal_slowdown"]])
    judged_rounds: list[dict[str, float]] = []
    r = timed_rounds(steps, CpuTimer(), lambda t: judged_rounds.append(t) or t["step"], stop=FIXED, probe=probe)
    assert r.dropped == 2 and r.drop_reasons == {"hw_thermal_slowdown": 2, "sm_clock_below_75%": 1}
    assert len(r.samples_ms["step"]) == len(r.samples_ms["reference"]) == len(r.judged) == len(judged_rounds) == 6
    assert len(r.all_ms["step"]) == len(r.all_ms["reference"]) == 8  # dropped rounds too
    assert log == ["reference", "step"] * 8  # the probe is read after a round, not inside it


def test_max_rounds_of_drops_stop_the_loop(clock):
    steps = [("step", lambda: clock.takes(1.0))]
    probe = ScriptedProbe([["hw_slowdown"]] * 100)
    r = timed_rounds(steps, CpuTimer(), lambda t: t["step"], stop=StopRule(min_rounds=3, max_rounds=5), probe=probe)
    assert r.stop == "throttled" and r.dropped == 5 and r.samples_ms["step"] == [] and len(r.all_ms["step"]) == 5


def test_gc_is_off_while_timing_and_restored_after(clock):
    seen: list[bool] = []
    steps = [("step", lambda: seen.append(gc.isenabled()))]
    assert gc.isenabled()
    timed_rounds(steps, CpuTimer(), lambda t: 1.0, stop=FIXED, untimed_first={"step"})
    assert seen == [False] * 12 and gc.isenabled()
    gc.disable()
    try:  # a caller that had it off finds it off
        timed_rounds(steps, CpuTimer(), lambda t: 1.0, stop=FIXED)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_contention_is_other_processes_cpu_over_the_rounds_wall_time(clock, monkeypatch):
    # 3 s of all-process CPU time, 1 s of it ours, over the rounds' 6 x 0.5 s of wall time.
    cpu = iter([(10.0, 5.0), (13.0, 6.0)])
    monkeypatch.setattr(rounds_mod, "busy_cpu_s", lambda: next(cpu))
    r = timed_rounds([("step", lambda: clock.takes(500.0))], CpuTimer(), lambda t: 1.0, stop=FIXED)
    assert r.wall_s == 3.0 and r.contention_cores == pytest.approx(2.0 / 3.0)


def test_contention_counts_only_other_processes():
    # 3 s of all-process CPU time, 1 s of it ours, over 2 s of wall time: one other core busy.
    assert contention((10.0, 5.0), (13.0, 6.0), 2.0) == pytest.approx(1.0)
    assert contention((10.0, 5.0), (11.0, 6.0), 2.0) == 0.0
