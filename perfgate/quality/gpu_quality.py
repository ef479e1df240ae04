"""The GPU gate's quality, measured in one run (`scripts/gpu-check --quality`, `perfgate gpu-quality`).

For each case (compute-bound and launch-bound: PhysicsNeMo block fp32 and bf16, the world model's
eager and CUDA-graph cases on a GPU), in one process:

1. **Record** the case as a stored baseline would be: `passes` profiler windows and timed windows
   (wall-time samples, the GPU busy time per step, the kernel launches per step), their noise
   between passes kept in the baseline record by the runner's own rule
   (perfgate.gate.detectable.with_pass_noise: passes apart re-measure the last once, still apart
   flag the record unreliable), and flagged unreliable where the GPU's telemetry distrusts it.
   Unlike the runner's, the passes run back to back in one process (not one pytest process each).
2. **Compare**, `repeats` times each (unchanged code `unchanged_repeats` times, for a false-alarm
   bound; `kinds` picks the conditions), the recorded step and a second build of the case (the
   same seed: its own model, graph and memory, as the product's A/B compares two builds), unchanged
   or slowed:
   - GPU-side: every Nth `F.linear` done twice, N sized from the step's linear share so that the
     step's GPU work grows by 1%, 2%, 5% (perfgate.quality.inject.every_nth); for a CUDA-graph case
     the doubling is captured into a graph of its own (the replay calls no F.linear). The share is
     read from ONE window alternating the plain step and the step with every F.linear doubled
     (`sized_share`), N chosen by the size it realises (no rounding half to even) and, on an eager
     step, so that the stored profiler window holds whole periods. The sizes are targets: each
     comparison reports the size it realised (`realised_device_pct`, the device-time A/B window's
     median block log ratio; `realised_wall_pct`, the wall-time A/B's), and so does the table;
   - host-side: a busy-wait at the start of the step worth 1%, 2%, 5% of its wall time (the GPU
     idles meanwhile: what a slower Python path or dispatch does).
   - a slower kernel (kind "kernel", asked for by name): every Nth `F.linear` twice as wide in one
     launch, its extra half sliced off (perfgate.quality.inject), sized like the GPU-side kind: the
     same kernel launches doing more work, what only device time sees; dropped, with the reason in
     the set-up, where the wider step launches another number of kernels than the record.
   Each comparison is judged six ways, by the gate's own judges: wall time against the stored
   record (`judge_latency`), wall time by same-job A/B (the base and the current step interleaved
   round by round in one window, with the A/B minimum effect as tolerance), judged unpaired
   (`judge_latency_samples`) and by paired rounds (`perfgate.gate.paired`, as `perfgate ab`
   judges), device time against the record (`judge_device_time`, with the record's pass noise),
   device time by same-job A/B (the two steps alternating in one profiler window, each step's GPU
   busy time told apart by its launches; paired blocks of steps judged by their mean,
   `judge_device_time_rounds`) and kernel
   counts against the record (`judge_kernels`). Each comparison's raw rounds are kept,
   and the run is written after each comparison (a run cut short keeps what it judged).
3. **Tally**, per gate and condition: caught/total for slowdowns, false alarms/comparisons for the
   unchanged ones, and the wall time each comparison took. A kind is judged only by the gates it is
   meant to move (`EXPECTED`: a busy-wait adds no GPU work, a slower kernel keeps the launches); a
   regression on another gate is a false alarm, counted per gate with unchanged code's (`FALSE_ALARMS`).

On a CPU (`--device cpu`: the rehearsal the tests run) there is no device time and no kernel
count: those columns say so, and the GPU-side slowdown is sized from wall time instead.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.gate.decide import against_distrusted_baseline
from perfgate.gate.detectable import with_pass_noise
from perfgate.gate.instructions import judge_kernels
from perfgate.gate.metrics import judge_device_time, judge_latency, judge_latency_samples
from perfgate.gate.paired import judge_device_time_rounds, judge_rounds
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import REGRESSION, UNRELIABLE
from perfgate.record import CaseRecord, PassNoise, as_json

if TYPE_CHECKING:
    from perfgate.measure.telemetry import TelemetrySampler
    from perfgate.quality.inject import OpCalls

GATES = ("wall-stored", "wall-ab", "wall-ab-paired", "device-time", "device-time-ab", "kernels")
SIZES_PCT = (1.0, 2.0, 5.0)
# unchanged code, GPU-side (added kernels), host-side and slower-kernel (the same launches) slowdowns
KINDS = ("unchanged", "gpu", "host", "kernel")
DEFAULT_KINDS = ("unchanged", "gpu", "host")
WALL_GATES = frozenset({"wall-stored", "wall-ab", "wall-ab-paired"})
# Which gates each kind is meant to move. A regression on any other gate is a false alarm, not a
# catch: a busy-wait adds no GPU work (device time and kernel counts must not move), a slower kernel
# keeps the launches (kernel counts must not move), unchanged code moves nothing.
EXPECTED: dict[str, frozenset[str]] = {
    "unchanged": frozenset(),
    "gpu": frozenset(GATES),
    "kernel": frozenset(GATES) - {"kernels"},
    "host": WALL_GATES,
}
FALSE_ALARMS = "false-alarms"  # the tally's kind for a gate's false alarms over every comparison it should not move on
GPU_CASES = (
    ("physicsnemo-block", None, "baseline"),
    ("physicsnemo-block", None, "bf16"),
    ("owl-world-model", None, "baseline"),
    ("owl-world-model", None, "cudagraphs"),
)
CPU_CASES = (("physicsnemo-block", "tiny", "baseline"), ("physicsnemo-block", "tiny", "bf16"))


@dataclass(frozen=True, kw_only=True)
class Plan:
    device: str
    cases: tuple[tuple[str, str | None, str], ...]  # (model, size or None for the device's default, variant)
    sizes_pct: tuple[float, ...] = SIZES_PCT
    repeats: int = 4  # comparisons per condition
    unchanged_repeats: int | None = None  # comparisons of unchanged code (None: `repeats`): the false-alarm bound
    kinds: tuple[str, ...] = DEFAULT_KINDS  # which conditions: any of KINDS
    rounds: int = 30  # timed rounds per side of a comparison
    passes: int = 3  # of the stored record (its noise)
    profile_steps: int = 10  # steps per profiler window
    device_rounds: int = 10  # blocks of the device-time A/B window, its figures (each a mean of `device_block_steps`)
    # steps of each side per block: 5 holds a slowdown that hits one step in five (the bf16 block's
    # GPU-side +2%) in every block; single steps (1) read it in one round of five (docs/gpu-runs.md)
    device_block_steps: int = 5
    warmup_s: float = 1.0  # calls of the step before its record
    seed: int = 0
    trace_dir: str | None = None  # keep each case's profiler trace of `trace_steps` steps here (gzipped)
    trace_steps: int = 3

    def __post_init__(self) -> None:
        for name in ("repeats", "rounds", "profile_steps", "device_rounds", "device_block_steps", "trace_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.unchanged_repeats is not None and self.unchanged_repeats < 1:
            raise ValueError(f"unchanged_repeats must be at least 1, got {self.unchanged_repeats}")
        if not self.kinds or any(k not in KINDS for k in self.kinds):
            raise ValueError(f"kinds {','.join(self.kinds)!r}: choose from {','.join(KINDS)}")
        if self.passes < 2:
            raise ValueError(f"passes must be at least 2 (the record's noise is between them), got {self.passes}")


@dataclass(frozen=True, kw_only=True)
class Comparison:
    case: str
    kind: str  # one of KINDS
    size_pct: float  # the slowdown's target, 0 for unchanged
    repeat: int
    verdicts: dict[str, str | None]  # gate -> verdict (None: that gate has nothing to judge here)
    messages: dict[str, str]
    wall_s: float  # the comparison's own wall time: timed windows, profiler window, judging
    wall_change_pct: float  # the current step's median against the record's
    device_change_pct: float | None
    samples_ms: list[float] = field(default_factory=list)  # the current step's timed rounds
    ab_base_ms: list[float] = field(default_factory=list)  # the unchanged step's, round by round beside them
    device_ms: list[float] = field(default_factory=list)  # the current step's GPU busy time per round of one window
    ab_base_device_ms: list[float] = field(default_factory=list)  # the unchanged step's, beside them
    gpu_state: GpuState | None = None  # the GPU's clocks and power meanwhile
    # the size it realised, in %: the mean log ratio of the device-time A/B window's blocks (None on
    # a CPU), and of the wall-time A/B's paired rounds (what a host-side slowdown moves)
    realised_device_pct: float | None = None
    realised_wall_pct: float | None = None


@dataclass(kw_only=True)
class CaseSetup:
    case: str
    bound: str | None  # "launch-bound" / "device-bound" (device time over wall), None on a CPU
    wall_ms: float
    device_ms: float | None
    linear_every: dict[str, int] = field(default_factory=dict)  # size -> N of the GPU-side slowdown
    wider_every: dict[str, int] = field(default_factory=dict)  # size -> N of the slower-kernel slowdown
    shares: dict[str, float] = field(default_factory=dict)  # kind -> F.linear's share of the step (sized_share)
    linear_calls_per_step: int | None = None  # F.linear calls per step (None: a replayed graph, or no GPU-side kind)
    kernel_note: str | None = None  # why the slower-kernel slowdown did not run here
    record_gpu_state: GpuState | None = None  # the GPU while the record's passes ran
    record_remeasured: int | None = None  # 1: its passes disagreed and the last was measured again
    record_unreliable: str | None = None  # why the gate distrusts the record (passes apart, the GPU's telemetry)
    busy_wait_ms: dict[str, float] = field(default_factory=dict)  # size -> the host-side busy-wait
    pass_noise: dict[str, PassNoise] = field(default_factory=dict)  # by metric, as the record keeps it
    build_s: float = 0.0
    error: str | None = None


# --- timing and profiling -------------------------------------------------------------------------


def gpu_sampler(device: str) -> TelemetrySampler:
    """The telemetry sampler (perfgate.measure.telemetry) around a comparison's measurements:
    the GPU's SM clock, power and clock events through NVML; the CPU alone off a GPU. At the
    interval the suite's own timed runs sample (its default), so the comparisons carry the same
    sampling thread as the runs the gate judges, no more."""
    from perfgate.measure.telemetry import TelemetrySampler

    return TelemetrySampler(device)


@dataclass(frozen=True, kw_only=True)
class GpuState:
    """What the GPU did while a comparison (or the record) was measured, through NVML: kept per
    comparison so that a device-time change can be laid beside the clocks (2026-11-28: the unchanged
    bf16 block read -0.3..+7.8% against its record, the clocks unsampled)."""

    busy_sm_clock_mhz: float | None  # mean SM clock over the busy readings (work seen: telemetry.is_busy)
    gpu_power_w: float | None
    gpu_temp_c: float | None
    clock_events: dict[str, float]  # each reason but idle: its share of the readings
    unreliable: str | None  # the gate's own reason to distrust such timings (perfgate.gate.decide)
    samples: int | None


def gpu_state(sampler: TelemetrySampler) -> GpuState:
    """The sampler's summary as a GpuState (after the sampler stopped)."""
    from perfgate.gate.decide import telemetry_reason

    summary = sampler.summary()
    power, temp = summary.metric("gpu_power_w"), summary.metric("gpu_temp_c")
    return GpuState(
        busy_sm_clock_mhz=summary.busy_sm_clock_mhz.mean if summary.busy_sm_clock_mhz else None,
        gpu_power_w=power.mean if power else None,
        gpu_temp_c=temp.mean if temp else None,
        clock_events={k: v for k, v in (summary.clock_events or {}).items() if k != "gpu_idle"},
        unreliable=telemetry_reason(summary),
        samples=summary.n_samples,
    )


def interleaved_ms(
    steps: Sequence[Callable[[], Any]], device: Any, rounds: int, rng: random.Random
) -> list[list[float]]:
    """Per step, `rounds` wall-time samples (ms), the steps interleaved in a random order each round."""
    from perfgate.measure.core import make_timer

    timer = make_timer(device)
    out: list[list[float]] = [[] for _ in steps]
    for s in steps:
        s()  # an untimed call first
    order = list(range(len(steps)))
    for _ in range(rounds):
        rng.shuffle(order)
        for i in order:
            out[i].append(timer.time_ms(steps[i])[0])
    return out


def warm_up(step: Callable[[], Any], device: Any, seconds: float = 1.0, calls: int = 3) -> None:
    """Calls until `seconds` passed and at least `calls` were made (lazy initialisation, clocks)."""
    from perfgate.measure.core import make_timer

    timer = make_timer(device)
    end, n = time.perf_counter() + seconds, 0
    while n < calls or time.perf_counter() < end:
        timer.time_ms(step)
        n += 1


def profiled(step: Callable[[], Any], device: str, steps: int) -> tuple[float | None, float | None, dict, dict]:
    """(device ms per step, kernel launches per step, kernel ms per name, kernel launches per name)
    of one profiler window (perfgate.measure.op_counts); None on a CPU."""
    from perfgate.measure.op_counts import count_step

    oc = count_step(step, device, steps, warmup=0)
    return oc.device_ms_per_step, oc.kernels_per_step, oc.kernel_ms_per_step, oc.kernel_names_per_step


def record_of(samples: list[float], prof: tuple[float | None, float | None, dict, dict]) -> CaseRecord:
    return CaseRecord(
        samples_ms=list(samples),
        median_ms=statistics.median(samples),
        device_ms_per_step=prof[0],
        kernels_per_step=prof[1],
        kernel_ms_per_step=prof[2] or None,
        kernel_names_per_step=prof[3] or None,
    )


# --- slowdowns ------------------------------------------------------------------------------------


def busy_wait_step(step: Callable[[], Any], wait_ms: float) -> Callable[[], Any]:
    """`step` after a host busy-wait of `wait_ms` (the GPU idles meanwhile: a host-side slowdown)."""
    wait_s = wait_ms / 1000

    def slowed() -> Any:
        end = time.perf_counter() + wait_s
        while time.perf_counter() < end:
            pass
        return step()

    return slowed


def linear_share(plain: float, doubled: float) -> float:
    """The share of the step that F.linear is, from the step's time with every F.linear done twice."""
    return max(doubled / plain - 1.0, 1e-6) if plain > 0 else 1e-6


# --- the run --------------------------------------------------------------------------------------


Builder = Callable[[tuple[str, str | None, str]], tuple[str, Callable[[], Any], bool]]
"""(model, size, variant) -> (case id, its step, whether the step replays a captured CUDA graph).
Whatever is patched while it builds (an F.linear done twice) is captured into a graph it builds."""


def judge_all(
    case: str,
    base: CaseRecord,
    cur: CaseRecord,
    ab_base: list[float],
    s: GateSettings,
    device_rounds: tuple[list[float], list[float]] | None = None,
    *,
    block_steps: int = 1,
    record_gpu_unreliable: str | None = None,
) -> tuple[dict[str, str | None], dict[str, str]]:
    """Every gate's verdict on one comparison (`device_rounds`: the unchanged and the current step's
    GPU busy times per step, block by block of `block_steps` steps of one profiler window; None on
    a CPU; `record_gpu_unreliable`: why the GPU's telemetry distrusted the record while it was
    recorded, so stored device time is not judged against it, as perfgate.gate.decide.compare does)."""
    out: dict[str, str | None] = {}
    msgs: dict[str, str] = {}
    v = judge_latency(case, cur, base, s)
    out["wall-stored"], msgs["wall-stored"] = v.verdict, v.message
    ab_settings = GateSettings(latency_tolerance=s.ab_min_effect, alpha=s.alpha)
    v = judge_latency_samples(case, cur.samples_ms, ab_base, ab_settings)
    out["wall-ab"], msgs["wall-ab"] = v.verdict, v.message
    v = judge_rounds(case, cur.samples_ms, ab_base, s)
    out["wall-ab-paired"], msgs["wall-ab-paired"] = v.verdict, v.message
    dv = judge_device_time(case, cur, base, s)
    if dv is not None and record_gpu_unreliable:
        dv = against_distrusted_baseline(dv, record_gpu_unreliable)
    out["device-time"] = dv.verdict if dv else None
    msgs["device-time"] = dv.message if dv else "no device time here (a CPU run)"
    da = (
        judge_device_time_rounds(case, device_rounds[1], device_rounds[0], s, block_steps=block_steps)
        if device_rounds
        else None
    )
    out["device-time-ab"] = da.verdict if da else None
    msgs["device-time-ab"] = da.message if da else "no device time here (a CPU run)"
    kv = judge_kernels(case, cur, base, s)
    out["kernels"] = kv.verdict if kv else None
    msgs["kernels"] = kv.message if kv else "no kernel count here (a CPU run)"
    if cur.unreliable:  # perfgate.gate.decide.compare: a run the telemetry distrusts has no stored timing verdicts
        for gate in ("wall-stored", "device-time"):
            if out[gate] is not None:
                out[gate], msgs[gate] = UNRELIABLE, cur.unreliable
    return out, msgs


def run(
    plan: Plan,
    build: Builder,
    settings: GateSettings = GateSettings(),
    progress: Callable[[str], None] = lambda _: None,
    checkpoint: Callable[[QualityRun], None] | None = None,
) -> QualityRun:
    """Every case of the plan recorded, compared and judged; the rows and the tally. `checkpoint`
    gets the run so far after each case (a run cut short by its time limit keeps what it did)."""
    import torch

    rng = random.Random(plan.seed)
    cuda = plan.device.startswith("cuda")
    setups: list[CaseSetup] = []
    rows: list[Comparison] = []
    t_start = time.perf_counter()
    for spec in plan.cases:
        t0 = time.perf_counter()
        try:
            case, step, graphed = build(spec)
        except Exception as exc:  # noqa: BLE001 - a case that cannot run here is reported, not fatal
            setups.append(CaseSetup(case="-".join(x for x in spec if x), bound=None, wall_ms=0, device_ms=None,
                                    error=f"{type(exc).__name__}: {exc}"))  # fmt: skip
            continue
        progress(f"{case}: warming up, then recording ({plan.passes} passes)")
        warm_up(step, plan.device, plan.warmup_s)
        base, record_state = _record(plan, step, rng, settings)
        noise = base.pass_noise or {}
        if plan.trace_dir is not None:  # a real trace of a few steps, for tests that read one offline
            from perfgate.measure.op_counts import count_step

            keep = Path(plan.trace_dir) / f"{case}.trace.json.gz"
            count_step(step, plan.device, plan.trace_steps, warmup=0, keep=keep)
            progress(f"{case}: kept a {plan.trace_steps}-step profiler trace in {keep}")
        from perfgate.measure.device_time import host_share

        wall = base.median_ms or 0.0
        dev = base.device_ms_per_step
        setup = CaseSetup(
            case=case,
            bound=host_share(wall, dev).bound if dev is not None and wall > 0 else None,
            wall_ms=wall,
            device_ms=dev,
            pass_noise=noise,
            record_gpu_state=record_state,
            record_remeasured=base.remeasured,
            record_unreliable=base.unreliable,
        )
        # The current side is a second build of the case (the same seed): its own model, graph and
        # memory, as the product's A/B compares two builds, not one step with itself. The slowed
        # sides wrap it (a graph case's are builds of their own, captured under the patch).
        twin = build(spec)[1]
        warm_up(twin, plan.device, plan.warmup_s)
        gpu_steps: dict[float, Callable[[], Any]] = {}
        host_steps: dict[float, Callable[[], Any]] = {}
        kernel_steps: dict[float, Callable[[], Any]] = {}
        if "gpu" in plan.kinds:
            gpu_steps = _gpu_slowed(plan, spec, build, twin, graphed, setup, rng)
        if "kernel" in plan.kinds:
            try:
                kernel_steps = _gpu_slowed(
                    plan, spec, build, twin, graphed, setup, rng, same_launch=True, launches=base.kernels_per_step
                )
            except Exception as exc:  # noqa: BLE001 - a model whose code cannot take a wider output loses this kind only
                setup.kernel_note = f"could not inject: {type(exc).__name__}: {str(exc)[:120]}"
        if "host" in plan.kinds:
            for k in plan.sizes_pct:
                setup.busy_wait_ms[f"{k:g}"] = wall * k / 100
                host_steps[k] = busy_wait_step(twin, wall * k / 100)
        setup.build_s = time.perf_counter() - t0
        setups.append(setup)
        conditions: list[tuple[str, float, Callable[[], Any]]] = []
        if "unchanged" in plan.kinds:
            conditions.append(("unchanged", 0.0, twin))
        conditions += [("gpu", k, slowed) for k, slowed in gpu_steps.items()]
        conditions += [("host", k, slowed) for k, slowed in host_steps.items()]
        conditions += [("kernel", k, slowed) for k, slowed in kernel_steps.items()]
        for row in _compare(plan, case, step, base, conditions, rng, settings, progress, record_state.unreliable):
            rows.append(row)
            if checkpoint is not None:  # after each comparison: a run cut short keeps all it judged
                checkpoint(
                    QualityRun(
                        plan=plan, setups=setups, rows=rows, tally=tally(rows), wall_s=time.perf_counter() - t_start
                    )
                )
        del step, twin, gpu_steps, host_steps, kernel_steps, conditions
        if cuda:
            torch.cuda.empty_cache()
    return QualityRun(plan=plan, setups=setups, rows=rows, tally=tally(rows), wall_s=time.perf_counter() - t_start)


def _record(
    plan: Plan, step: Callable[[], Any], rng: random.Random, settings: GateSettings
) -> tuple[CaseRecord, GpuState]:
    """The stored record of `step` and the GPU's state meanwhile: `plan.passes` passes, their noise
    kept by the runner's rule (perfgate.gate.detectable.with_pass_noise: passes that disagree
    re-measure the last once, and still disagreeing flag the record unreliable), flagged unreliable
    too where the GPU's telemetry distrusts these timings, as the runner's record is."""

    def one_pass() -> CaseRecord:
        samples = interleaved_ms([step], plan.device, plan.rounds, rng)[0]
        return record_of(samples, profiled(step, plan.device, plan.profile_steps))

    with gpu_sampler(plan.device) as tel:
        passes = [one_pass() for _ in range(plan.passes)]
        base = with_pass_noise(passes[:-1], passes[-1], settings.latency_tolerance, one_pass)
    state = gpu_state(tel)
    if state.unreliable:
        base = replace(base, unreliable="; ".join(x for x in (base.unreliable, state.unreliable) if x))
    return base, state


def _compare(
    plan: Plan,
    case: str,
    step: Callable[[], Any],
    base: CaseRecord,
    conditions: list[tuple[str, float, Callable[[], Any]]],
    rng: random.Random,
    settings: GateSettings,
    progress: Callable[[str], None],
    record_gpu_unreliable: str | None = None,
) -> Iterator[Comparison]:
    """Each condition `plan.repeats` times (unchanged code `plan.unchanged_repeats` times) against the
    recorded `base`: stored and A/B, judged, one comparison at a time."""
    wall, dev = base.median_ms or 0.0, base.device_ms_per_step
    unchanged = plan.unchanged_repeats or plan.repeats
    # interleaved by repeat, so that a run cut short has some of every condition
    schedule = [
        (c, r)
        for r in range(max(plan.repeats, unchanged))
        for c in conditions
        if r < (unchanged if c[0] == "unchanged" else plan.repeats)
    ]
    for (kind, k, current), r in schedule:
        progress(f"{case}: {kind} {k:g}% #{r + 1}")
        t1 = time.perf_counter()
        from perfgate.measure.op_counts import interleaved_device_ms

        # The sampler spans every window judged here, the device-time A/B's too: the clocks it keeps
        # are laid beside that window's change.
        with gpu_sampler(plan.device) as tel:
            ab_base, cur_samples = interleaved_ms([step, current], plan.device, plan.rounds, rng)
            cur = record_of(cur_samples, profiled(current, plan.device, plan.profile_steps))
            try:
                device_rounds = interleaved_device_ms(
                    [step, current], plan.device, plan.device_rounds, rng, block_steps=plan.device_block_steps
                )
                device_error = None
            except Exception as exc:  # noqa: BLE001 - this window never ran on a GPU yet: it may lose its gate, not the run
                device_rounds, device_error = None, f"{type(exc).__name__}: {exc}"
        state = gpu_state(tel)
        if state.unreliable:  # as the gate does a run its GPU's telemetry distrusts: stored timings not judged
            cur = replace(cur, unreliable=state.unreliable)
        verdicts, msgs = judge_all(
            case,
            base,
            cur,
            ab_base,
            settings,
            (device_rounds[0], device_rounds[1]) if device_rounds else None,
            block_steps=plan.device_block_steps,
            record_gpu_unreliable=record_gpu_unreliable,
        )
        if device_error is not None:
            msgs["device-time-ab"] = f"not measured: {device_error}"
        yield Comparison(
            case=case,
            kind=kind,
            size_pct=k,
            repeat=r,
            verdicts=verdicts,
            messages=msgs,
            wall_s=time.perf_counter() - t1,
            wall_change_pct=((cur.median_ms or 0) / wall - 1) * 100 if wall else math.nan,
            device_change_pct=(cur.device_ms_per_step / dev - 1) * 100
            if dev and cur.device_ms_per_step is not None
            else None,
            samples_ms=list(cur_samples),
            ab_base_ms=list(ab_base),
            device_ms=device_rounds[1] if device_rounds else [],
            ab_base_device_ms=device_rounds[0] if device_rounds else [],
            gpu_state=state,
            realised_device_pct=realised_pct(device_rounds[0], device_rounds[1]) if device_rounds else None,
            realised_wall_pct=realised_pct(ab_base, cur_samples),
        )


@dataclass(frozen=True, kw_only=True)
class QualityRun:
    plan: Plan
    setups: list[CaseSetup]
    rows: list[Comparison]
    tally: list[TallyRow]
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.plan.device,
            "plan": asdict(self.plan),
            "setups": [{**asdict(s), "pass_noise": as_json(s.pass_noise)} for s in self.setups],
            "rows": [asdict(r) for r in self.rows],
            "tally": [asdict(t) for t in self.tally],
            "wall_s": self.wall_s,
        }


def _gpu_slowed(
    plan: Plan,
    spec: tuple[str, str | None, str],
    build: Builder,
    step: Callable[[], Any],
    graphed: bool,
    setup: CaseSetup,
    rng: random.Random,
    *,
    same_launch: bool = False,
    launches: float | None = None,
) -> dict[float, Callable[[], Any]]:
    """Per size, the step with every Nth F.linear done twice (GPU-side: added kernels), or, with
    `same_launch`, with every Nth F.linear twice as wide in one launch (a slower kernel; `launches`:
    the record's kernel launches per step, None on a CPU). N sized from ONE window alternating the
    plain step and the step with every F.linear slowed so (`sized_share`: on a CPU wall time, on a
    GPU device time), chosen by the size it realises and, on an eager step, so that the stored
    profiler window holds whole periods (perfgate.quality.inject.every_nth). A wider step that
    launches more kernels than the record is no same-launch slowdown: none is returned, and the
    set-up says why."""
    from perfgate.quality.inject import every_nth, slow_linear_wider, slow_op, wider_step

    patch = slow_linear_wider if same_launch else (lambda n: slow_op("linear", n))
    calls: int | None = None
    if graphed:  # every call slowed, captured into a graph of its own (its replay calls no F.linear)
        undo, seen = patch(1)
        try:
            slowed_case = _holding(build(spec)[1], seen)
        finally:
            undo()
    else:  # slowed only while it runs: the plain step beside it in one window stays plain
        slowed_case = wider_step(step, 1) if same_launch else _during(step, 1)
        calls = linear_calls(step)
    # One call first: the wider patch makes each weight's wider copy at its first call (a torch.cat,
    # a kernel of its own), which no window must count as the step's.
    slowed_case()
    slowed_kernels = None  # on a GPU, for a same-launch slowdown: what the slowed step launches
    if same_launch and plan.device.startswith("cuda"):
        slowed_kernels = profiled(slowed_case, plan.device, plan.profile_steps)[1]
    share = sized_share(plan, step, slowed_case, rng)
    del slowed_case  # a graph case's slowed copy: one model fewer on the device
    setup.shares["kernel" if same_launch else "gpu"] = share
    setup.linear_calls_per_step = calls
    if same_launch and slowed_kernels != launches:
        setup.kernel_note = (
            f"not a same-launch slowdown here: {slowed_kernels} kernel launches per step, not {launches}"
        )
        return {}
    every = setup.wider_every if same_launch else setup.linear_every
    # an eager step's doubled calls counted in the stored window: whole periods (a replayed graph
    # repeats the calls its capture doubled, the same in every step)
    window_calls = calls * plan.profile_steps if calls else None
    out: dict[float, Callable[[], Any]] = {}
    for k in plan.sizes_pct:
        n = every_nth(share, k / 100, window_calls=window_calls)
        every[f"{k:g}"] = n
        if graphed:  # the slowdown must be captured: a graph of its own, built under the patch
            undo, seen = patch(n)
            try:
                out[k] = _holding(build(spec)[1], seen)
            finally:
                undo()
        else:
            out[k] = wider_step(step, n) if same_launch else _during(step, n)
    return out


def sized_share(plan: Plan, plain: Callable[[], Any], slowed: Callable[[], Any], rng: random.Random) -> float:
    """F.linear's share of the step, from ONE window alternating the plain step and the step with
    every F.linear slowed (on a GPU each step's device time in one profiler window, told apart by its
    mark; on a CPU wall time), the median of the rounds' ratios: what drifts between windows (the
    unchanged bf16 block moved 2.7% window to window on an H200) hits both sides alike. Sizing it
    from the record's last pass against a later window of the slowed step carried that drift."""
    if plan.device.startswith("cuda"):
        from perfgate.measure.op_counts import interleaved_device_ms

        got = interleaved_device_ms([plain, slowed], plan.device, plan.profile_steps, rng)
    else:
        got = interleaved_ms([plain, slowed], plan.device, max(5, plan.rounds // 3), rng)
    ratios = [c / b for b, c in zip(*got, strict=True) if b > 0] if got else []
    return linear_share(1.0, statistics.median(ratios)) if ratios else 1e-6


def linear_calls(step: Callable[[], Any]) -> int:
    """How many times one call of `step` calls F.linear (0 for a replayed CUDA graph)."""
    from perfgate.quality.inject import slow_op

    undo, seen = slow_op("linear", 2**62)  # counted, never doubled
    try:
        step()
    finally:
        undo()
    return seen.calls


def realised_pct(base: Sequence[float], current: Sequence[float]) -> float | None:
    """The change one window measured, in %: the mean of its paired rounds' log ratios current/base,
    as the device-time A/B judges them (a slowdown in one step of five moves the mean, not the
    median; None without rounds: no device time on a CPU)."""
    logs = [math.log(c / b) for b, c in zip(base, current, strict=False) if b > 0 and c > 0]
    return (math.exp(statistics.fmean(logs)) - 1) * 100 if logs else None


def _holding(step: Callable[[], Any], seen: OpCalls) -> Callable[[], Any]:
    """A graph case's slowed step, holding what its patch made (`seen.made`): the graph replays
    kernels that read the wider weights by address, and the caching allocator would hand their
    memory to the next build once nothing referenced them."""
    return partial(_replay, step, seen)


def _replay(step: Callable[[], Any], held: OpCalls) -> Any:
    return step()


def _during(step: Callable[[], Any], every: int) -> Callable[[], Any]:
    """`step` with every `every`-th F.linear done twice while it runs (one counter across steps)."""
    from perfgate.quality.inject import sized_step

    return sized_step({"kind": "op", "op": "linear", "every": every}, step, None)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class TallyRow:
    gate: str
    kind: str  # one of KINDS, or FALSE_ALARMS: every comparison of a kind the gate is not meant to see move
    size_pct: float
    caught: int  # regressions (of a slowdown the gate should see) or false alarms (where it should not)
    total: int  # comparisons the gate judged
    not_judged: int  # comparisons where the gate had nothing to judge (no device time on a CPU)
    wall_s_per_comparison: float
    # whether this kind is meant to move this gate (EXPECTED): where not, `caught` counts false alarms,
    # which the gate's FALSE_ALARMS row adds up, and the detection table's cell reads '-'
    expected: bool = True
    # the size the comparisons realised (Comparison.realised_*): median and range over them, in %
    realised_device_pct: float | None = None
    realised_device_range: tuple[float, float] | None = None
    realised_wall_pct: float | None = None


def tally(rows: Sequence[Comparison]) -> list[TallyRow]:
    """Per gate, kind and size: regressions / comparisons judged (a false alarm where the kind is not
    meant to move the gate: unchanged code, a busy-wait's device time and kernel counts, a slower
    kernel's kernel counts); and per gate, FALSE_ALARMS: those false alarms over all such comparisons."""
    out = []
    keys = sorted({(r.kind, r.size_pct) for r in rows}, key=lambda x: (x[0] != "unchanged", x[0], x[1]))
    for gate in GATES:
        quiet = [r for r in rows if gate not in EXPECTED[r.kind]]
        for kind, k in keys:
            sel = [r for r in rows if r.kind == kind and r.size_pct == k]
            out.append(_tally_row(gate, kind, k, sel, expected=gate in EXPECTED[kind]))
            if kind == "unchanged" and quiet:  # beside the unchanged code's own
                out.append(_tally_row(gate, FALSE_ALARMS, 0.0, quiet, expected=False))
        if quiet and "unchanged" not in {k for k, _ in keys}:
            out.append(_tally_row(gate, FALSE_ALARMS, 0.0, quiet, expected=False))
    return out


def _tally_row(gate: str, kind: str, size_pct: float, sel: Sequence[Comparison], *, expected: bool) -> TallyRow:
    judged = [r for r in sel if r.verdicts.get(gate) is not None]
    return TallyRow(
        gate=gate,
        kind=kind,
        size_pct=size_pct,
        caught=sum(r.verdicts[gate] == REGRESSION for r in judged),
        total=len(judged),
        not_judged=len(sel) - len(judged),
        wall_s_per_comparison=sum(r.wall_s for r in sel) / len(sel) if sel else 0.0,
        expected=expected,
        **({} if kind == FALSE_ALARMS else _realised(sel)),
    )


def _realised(sel: Sequence[Comparison]) -> dict[str, Any]:
    dev = [r.realised_device_pct for r in sel if r.realised_device_pct is not None]
    wall = [r.realised_wall_pct for r in sel if r.realised_wall_pct is not None]
    return {
        "realised_device_pct": statistics.median(dev) if dev else None,
        "realised_device_range": (min(dev), max(dev)) if dev else None,
        "realised_wall_pct": statistics.median(wall) if wall else None,
    }
