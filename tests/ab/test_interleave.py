"""measure_interleaved on the shared timed-rounds loop, with a fake clock advanced by the steps: the
base and the head alternate in a random order each round, each right after an untimed call of itself,
and the stop rule judges head/base."""

from __future__ import annotations

import pytest

from perfgate.ab.interleave import measure_interleaved
from perfgate.measure.stats import StopRule
from tests import fake_clock
from tests.fake_clock import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return fake_clock.install(monkeypatch)


def test_base_and_head_alternate_randomly_each_after_its_untimed_call(clock):
    log: list[str] = []

    def side(name: str, ms: float):
        def step() -> str:
            log.append(name)
            clock.takes(ms)
            return name

        return step

    stop = StopRule(precision=0.01, min_rounds=12, max_rounds=40, budget_s=float("inf"))
    m = measure_interleaved(side("base", 2.0), side("head", 5.0), "cpu", stop=stop, warmup_rounds=3, seed=3)
    assert log[:8] == ["base", "head"] * 4  # outputs, then the warm-up rounds
    timed = log[8 : 8 + 4 * 12]
    per_round = [timed[i : i + 4] for i in range(0, len(timed), 4)]
    assert all(r[0] == r[1] and r[2] == r[3] and {r[0], r[2]} == {"base", "head"} for r in per_round)
    assert {r[0] for r in per_round} == {"base", "head"}  # both orders drawn
    assert log[8 + 4 * 12 :] == ["base"] * 2 + ["head"] * 2  # the peak memory of each side alone
    # Exact ratios are as precise as can be: the stop rule, judging head/base, stops at its minimum.
    assert m.ratios == [2.5] * 12 and m.median_ratio == 2.5
    assert m.samples_base_ms == [2.0] * 12 and m.samples_head_ms == [5.0] * 12
    assert (m.out_base, m.out_head) == ("base", "head")


def test_the_device_time_window_fits_its_blocks_to_the_step() -> None:
    """A worker's device-time window (GPU only) is sized by the step it times: the Self Forcing
    block's 393 ms step gets the 3 blocks a t test needs (12 s), the world model's 12 ms graph the
    10 the GPU quality run uses, and a 50 ms step what fits two seconds."""
    from perfgate.ab.interleave import device_blocks_for

    assert [device_blocks_for(s) for s in (0.393, 0.012, 0.05, 0.0)] == [3, 10, 4, 10]


def test_each_sides_first_output_is_kept_though_the_step_overwrites_it(clock):
    """A CUDA-graph step returns the same static buffer each call, overwritten in place (and
    cudagraph trees free it on the next call): accuracy must read each side's first output."""
    import torch

    def overwriting(ms: float):
        buf = torch.zeros(3)
        calls = [0]

        def step() -> torch.Tensor:
            calls[0] += 1
            buf.fill_(calls[0])
            clock.takes(ms)
            return buf

        return step

    stop = StopRule(precision=0.01, min_rounds=3, max_rounds=3, budget_s=float("inf"))
    m = measure_interleaved(overwriting(2.0), overwriting(3.0), "cpu", stop=stop, warmup_rounds=2, seed=1)
    assert m.out_base.tolist() == [1.0] * 3 and m.out_head.tolist() == [1.0] * 3


def _fake_worker(monkeypatch, clock, sides: dict[str, tuple[float, float, float]], *, graphs: bool = False):
    """One interleaved worker's case on a fake CUDA device (tests/fake_cuda_memory.py), through
    measure_case: each side built (weights MiB, a graph's pool MiB reserved at capture) and stepped
    (activations MiB, freed at the step's end; none outside the pool for a graph) in one process."""
    from types import SimpleNamespace

    from perfgate.ab import interleave
    from perfgate.cases import accuracy
    from perfgate.measure.core import CpuTimer
    from tests import fake_cuda_memory
    from tests.fake_cuda_memory import Block

    alloc = fake_cuda_memory.install(monkeypatch)

    def build(side, case, spec, device):
        weights_mib, act_mib, pool_mib = sides[spec]
        weights = Block(alloc, weights_mib)
        alloc.pool(round(pool_mib * 2**20))

        def step() -> str:
            act = Block(alloc, 0 if graphs else act_mib)
            clock.takes(1.0)
            del act
            return "out"

        return SimpleNamespace(step=step, weights=weights, reference=None, workload=SimpleNamespace(output_kind="x"))

    monkeypatch.setattr(interleave, "base_spec", lambda spec, head, base: "base")
    monkeypatch.setattr(interleave, "_build", build)
    monkeypatch.setattr(interleave, "_warm_libraries", lambda device: None)  # real GEMMs: a GPU's
    monkeypatch.setattr(interleave, "make_timer", lambda device: CpuTimer())
    monkeypatch.setattr(interleave, "device_window", lambda *a: (None, None))
    monkeypatch.setattr(accuracy, "metrics", lambda out, ref, kind: {})
    case = SimpleNamespace(
        spec="head", device="cuda", variant_obj=SimpleNamespace(uses_cuda_graphs=graphs), model="m", variant="v"
    )
    stop = StopRule(min_rounds=3, max_rounds=3, budget_s=float("inf"))
    return interleave.measure_case("c", {"c": case}, None, None, stop)


@pytest.mark.parametrize(
    ("base", "head", "graphs", "peaks", "verdict"),
    [
        ((1000, 50, 0), (1000, 50, 0), False, (1050, 1050), "unchanged"),
        ((1000, 50, 0), (2000, 50, 0), False, (1050, 2050), "regression"),  # the head's weights doubled
        ((1000, 50, 100), (1000, 50, 100), True, (1100, 1100), "unchanged"),
        ((1000, 50, 100), (1000, 50, 200), True, (1100, 1200), "regression"),  # its graph's pool doubled
    ],
)
def test_each_sides_peak_is_what_a_process_of_its_own_reads(clock, monkeypatch, base, head, graphs, peaks, verdict):
    """Both models live in the worker, so the absolute CUDA peak holds both sides' weights (3050 MiB
    on either side of a 1000/2000 MiB pair, "unchanged"): each side reads its own build and untimed
    calls' memory plus its step's peak over entry, the reserved figures for a graph variant, as
    the stored record of a process of its own; judge_memory's 5% + 16 MiB then tells the change."""
    from perfgate.ab import verdicts as ab
    from perfgate.gate.policy import Policy

    row = _fake_worker(monkeypatch, clock, {"base": base, "head": head}, graphs=graphs)
    assert (row.peak_base_mib, row.peak_head_mib) == pytest.approx(peaks)
    got = {v.metric: v for v in ab.interleaved_verdicts("x[c]", [row] * 3, Policy(), final=True) or []}
    assert got["memory"].verdict == verdict, got["memory"].message
