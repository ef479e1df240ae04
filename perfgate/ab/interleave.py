"""Interleaved A/B in one process: the base and the head revision's model code, round by round.

Two revisions' processes differ by more than the slowdowns worth catching (on the development VM
the same case read -22% to +25% from one fresh process to the next), while the step times of two
models measured in the same rounds of one process move together. So `perfgate ab` (mode
`interleaved`) loads both revisions' model files into one process (the base's under an alias
module name), builds each case twice with the same seed, and times them in alternating rounds
of the suite's own loop (perfgate.measure.rounds), the order random each round, an untimed call
before each timed one (as the step after the reference workload): the per-round ratio head/base,
which the stop rule judges, cancels the machine's speed, the median ratio of a process is the
figure, and a few fresh processes average what one process has alone (memory layout). Measured:
two builds of the same model read within +-0.7% of each other in each of 6 fresh processes (owl
world model, audio decoder, Wan VAE, tiny, 2 s each).

What it cannot see: a change outside the model files (the harness, torch, an op both sides
share), which slows both sides alike. Mode `processes` (perfgate.ab.run) compares whole revisions.

Run as `python -m perfgate.ab.interleave JOB.json` in the head's checkout (`perfgate ab` does):
one fresh process, every case given, one JSON result (`write_results`: a `Measured` or `NotMeasured`
per case, written after each). A case that breaks the device context (a sticky CUDA fault) is the
last: the worker stops, and the driver tells whose it was in fresh processes, one side each (a job
with `alone`: `RanAlone` per case). The job is a `Job` as JSON (`Job.write`): a worker's input,
not a command line, so it has no parser (argparse lives in perfgate/commands/).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from perfgate.ab.job import NO_BASE_FILE, CaseResult, Job, Measured, NotMeasured, RanAlone, blame, write_results
from perfgate.cases.conversions import VariantError
from perfgate.measure.core import make_timer, private_copy
from perfgate.measure.memory import MemoryTracker, Resident
from perfgate.measure.rounds import timed_rounds
from perfgate.measure.stats import StopRule

if TYPE_CHECKING:
    from perfgate.cases.workload import ModelSpec

INJECT_HEAD = "PERFGATE_INJECT_HEAD"  # local:K, for `perfgate gate-quality --ab`: the head's model does K% more work
INJECT_HEAD_SIZED = "PERFGATE_INJECT_HEAD_SIZED"  # {case: spec} file: the head's step slowed as sized by instructions


@dataclasses.dataclass(kw_only=True)
class Interleaved:
    samples_base_ms: list[float]
    samples_head_ms: list[float]
    ratios: list[float]  # head / base per round
    contention_cores: float
    peak_base_mib: float | None
    peak_head_mib: float | None
    out_base: Any = dataclasses.field(default=None, repr=False)
    out_head: Any = dataclasses.field(default=None, repr=False)

    @property
    def median_ratio(self) -> float:
        return float(statistics.median(self.ratios))


def measure_interleaved(
    base: Callable[[], Any],
    head: Callable[[], Any],
    device: torch.device | str,
    *,
    stop: StopRule = StopRule(),
    warmup_rounds: int = 5,
    seed: int = 0,
    resident: Mapping[str, Resident] | None = None,
    graphs: bool = False,
) -> Interleaved:
    """Alternate the two steps round by round (random order, an untimed call before each timed one)
    until the median ratio is known to `stop.precision`, or a bound of `stop` is hit.

    Each side's peak memory is what a process of its own would read (`PeakMemory.alone`): what
    `resident[side]` holds (its build, given) and its untimed calls here left, plus its step's peak
    over what was allocated on entry; the reserved figures for a CUDA-graph variant (`graphs`).
    Every device sync is the side's whose work it waits for (a CUDA fault is reported at the next
    sync, not by the launch that made it): each warm-up call is followed by one, the timer's are
    the timed side's, and each side's memory pass is its own."""
    device = torch.device(device)
    base, head = (s if isinstance(s, OnSide) else OnSide(n, s) for n, s in (("base", base), ("head", head)))
    timer = _SideTimer(make_timer(device))
    res = resident or {side: Resident(device=device) for side in ("base", "head")}
    with res["base"].adding():
        out_base = base.tagged(private_copy, _synced(base, device))  # for accuracy, as measure() keeps it
    with res["head"].adding():
        out_head = head.tagged(private_copy, _synced(head, device))
    for _ in range(warmup_rounds):  # a graph's capture, a compiled step's caches: what the side keeps
        with res["base"].adding():
            _synced(base, device)
        with res["head"].adding():
            _synced(head, device)
    # Each side called once untimed right before it is timed, as the suite times a step after the
    # reference workload; the order drawn each round, so neither side always runs second.
    r = timed_rounds(
        [("base", base), ("head", head)],
        timer,
        lambda t: t["head"] / t["base"],
        stop=stop,
        untimed_first={"base", "head"},
        order=random.Random(seed),
    )
    peaks = [step.tagged(_peak_mib, step, device, res[side], graphs) for side, step in (("base", base), ("head", head))]
    return Interleaved(
        samples_base_ms=r.samples_ms["base"],
        samples_head_ms=r.samples_ms["head"],
        ratios=r.judged,
        contention_cores=r.contention_cores,
        peak_base_mib=peaks[0],
        peak_head_mib=peaks[1],
        out_base=out_base,
        out_head=out_head,
    )


def _sync(device: torch.device) -> None:
    """Wait for the device's work (a no-op off a GPU): where a CUDA fault of that work is raised."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _synced(step: OnSide, device: torch.device) -> Any:
    """One call of a side's step and a device sync after it, both the side's."""
    out = step()
    step.tagged(_sync, device)
    return out


def _peak_mib(step: Callable[[], Any], device: torch.device, resident: Resident, graphs: bool) -> float | None:
    """The side's peak memory over two calls of its step, as a process of its own would read it
    (`measure_interleaved`; its tracker's syncs included)."""
    with MemoryTracker(device) as mem:
        step()
        step()
    return mem.result.alone(resident).gated(graphs) if mem.result else None


class _SideTimer:
    """A timer whose syncs, before and after the step, are the timed side's: the one before waits
    for the side's own untimed call (timed_rounds makes it right before), the one after for the
    timed call."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer

    def time_ms(self, step: Callable[[], Any]) -> tuple[float, Any]:
        if isinstance(step, OnSide):
            return step.tagged(self.timer.time_ms, step)
        return self.timer.time_ms(step)


def context_lost(device: torch.device) -> str | None:
    """Why the device's context is broken ("Type: message"), or None. A CUDA fault (an illegal memory
    access, a device-side assert) is sticky: every later CUDA call in the process raises, whichever
    side makes it, so nothing run here after it can say whose it was."""
    try:
        _sync(device)
    except Exception as exc:  # noqa: BLE001 - what any CUDA call raises once the context is broken
        return _line(exc)
    return None


def _line(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"


def load_family(path: Path, alias: str) -> ModuleType:
    """A model family file loaded under another module name (the base revision's copy)."""
    spec = importlib.util.spec_from_file_location(alias, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: no model family file there")
    from perfgate.cases.workload import MODELS

    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    # A user's model file registers itself (module=__name__) when it runs; the base's copy would
    # register the same name from the alias module, which the registry refuses. So it runs against
    # an empty registry, and the head's entries are put back: base_spec points a copy at the alias.
    registered = dict(MODELS)
    MODELS.clear()
    try:
        spec.loader.exec_module(module)
    finally:
        MODELS.clear()
        MODELS.update(registered)
    return module


def base_spec(spec: ModelSpec, head_root: Path, base_root: Path) -> ModelSpec | None:
    """The head's model spec pointed at the base revision's copy of its family file (and of its
    factory, when the file defines it), or None when the base has no such file or factory (new)."""
    origin = importlib.util.find_spec(spec.module).origin
    rel = Path(origin).resolve().relative_to(head_root.resolve())
    path = base_root / rel
    if not path.is_file():
        return None
    alias = f"perfgate_ab_base.{spec.module}"
    base = sys.modules.get(alias) or load_family(path, alias)
    factory = spec.factory
    if factory is not None and getattr(factory, "__module__", None) == spec.module:
        # A factory defined in the family file: the base's own copy, else head's code would run on both sides.
        factory = getattr(base, factory.__qualname__, None)
        if factory is None:
            return None
    return dataclasses.replace(spec, module=alias, factory=factory)


class SideRaised(Exception):
    """One side's model code raised, building or stepping: which side ("base", "head", or "both" when
    each ran alone and only the pair failed), why, and after how many calls of the step that raised
    (0: while building); `error`: what was raised ("Type: message"). The driver measures a case
    only the base's code failed again (perfgate.ab.run); any other is the change's error."""

    def __init__(self, side: str, exc: BaseException, *, calls: int = 0) -> None:
        self.error = _line(exc)
        super().__init__(f"{side}: {self.error}")
        self.side, self.calls = side, calls


class OnSide:
    """`fn` with whatever it raises (but VariantError, a skip) tagged with its side, its calls counted."""

    def __init__(self, side: str, fn: Callable[..., Any], *, counted: bool = True) -> None:
        self.side, self.fn, self.counted, self.calls = side, fn, counted, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.tagged(self.fn, *args, **kwargs)

    def tagged(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn` run as this side's work (a sync waiting for its kernels): what it raises tagged."""
        try:
            return fn(*args, **kwargs)
        except (VariantError, SideRaised):
            raise
        except Exception as exc:
            raise SideRaised(self.side, exc, calls=self.calls if self.counted else 0) from exc


ALONE_MIN_S = 5.0  # a side run alone steps for as long as the pair ran, and at least this long


def measure_case(case_id: str, cases: dict[str, Any], head_root: Path, base_root: Path, stop: StopRule) -> CaseResult:
    """One case, both revisions, in this process: the figures `perfgate.ab.verdicts` judges, or why not.

    A raise blamed on the base is judged by `blame` from each side built afresh and run alone in
    this process, as many steps as the base had run and one more, for as long as the pair ran: the
    base's steps come first, so what fails both sides (the harness, a shared op) lands on the base.
    A case after which the device context is broken (a sticky CUDA fault, reported by whatever CUDA
    call came next, either side's) is `context_lost`: nothing here can say whose it was, and no
    later case can run in this process."""
    case = cases[case_id]
    device = torch.device(case.device)
    pair: dict[str, OnSide] = {}
    t0 = time.perf_counter()
    row: CaseResult
    try:
        row = _measure_both(case_id, cases, head_root, base_root, stop, pair)
    except VariantError:
        raise
    except Exception as exc:  # noqa: BLE001 - the case's result
        _drop_tracebacks(exc)  # the failed pair's models and activations freed before either is built again
        side, error = (exc.side, exc.error) if isinstance(exc, SideRaised) else (None, _line(exc))
        row = NotMeasured(case=case_id, error=f"{side}: {error}" if side else error, raised=True, side=side)
    calls = {side: step.calls for side, step in pair.items()}
    pair.clear()  # the steps hold their models: freed too
    if isinstance(row, NotMeasured) and row.side == "base" and context_lost(device) is None:
        steps, seconds = max(2, calls.get("base", 0) + 1), time.perf_counter() - t0
        spec_b = base_spec(case.spec, head_root, base_root)
        assert spec_b is not None  # the base's case was built: its family file is there
        alone = {s: _alone(s, case, spec, steps, seconds) for s, spec in (("head", case.spec), ("base", spec_b))}
        row = blame(
            case_id, (row.error or "").removeprefix("base: "), alone, steps, "with both sides built; each ran alone"
        )
    if (broken := context_lost(device)) is None:  # checked after every case: the device window swallows a fault
        return row
    return NotMeasured(
        case=case_id,
        error=(row.error if isinstance(row, NotMeasured) else None) or broken,
        context_lost=True,
        calls=max(calls.values(), default=0),
        seconds=time.perf_counter() - t0,
    )


def _drop_tracebacks(exc: BaseException) -> None:
    """Every traceback in the exception's chain dropped: a frame there holds a model, its inputs and
    its activations (on a GPU, memory the next build needs)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__


def _options() -> Any:
    from perfgate.cases.runner import RunOptions

    return RunOptions(count_flops=False, telemetry_interval_s=None, reference=False, warm_compile=False)


def _build(side: str, case: Any, spec: ModelSpec, device: torch.device) -> Any:
    """One side's case built (its workload, reference output and conversion), what it raises tagged."""
    from perfgate.cases.runner import build_case
    from perfgate.cases.steps import reference_output
    from perfgate.cases.workload import build_workload

    def build() -> Any:
        wl = build_workload(spec, case.size, device, seed=0, **dict(case.options))
        return build_case(case, _options(), prepared=(wl, reference_output(wl)))

    return OnSide(side, build, counted=False)()


def _warm_libraries(device: torch.device) -> None:
    """cuBLAS's and cuBLASLt's workspaces allocated before either side is built: the first GEMM of a
    process allocates them (megabytes, kept), which would count in the resident memory of whichever
    side was built first."""
    if device.type != "cuda":
        return
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.ones(8, 8, device=device, dtype=dtype)
        torch.nn.functional.linear(x, x, x[0])  # addmm with a bias: cuBLASLt where torch uses it
        torch.mm(x, x)


def _alone(side: str, case: Any, spec: ModelSpec, steps: int, seconds: float) -> RanAlone:
    """One side's case built afresh and stepped `steps` times, or until `seconds` (ALONE_MIN_S at
    least) ran out, then synchronised, alone in this process: what it ran and raised."""
    from perfgate.cases.runner import isolate

    device = torch.device(case.device)
    step = OnSide(side, isolate, counted=False)
    try:
        step(device)
        step = OnSide(side, _build(side, case, spec, device).step)
        deadline = time.perf_counter() + max(seconds, ALONE_MIN_S)
        while step.calls < steps and time.perf_counter() < deadline:
            step()
        step.tagged(_sync, device)
    except SideRaised as exc:
        return RanAlone(case=case.id, side=side, steps=step.calls if step.counted else 0, error=exc.error)
    return RanAlone(case=case.id, side=side, steps=step.calls)


def _measure_both(
    case_id: str, cases: dict[str, Any], head_root: Path, base_root: Path, stop: StopRule, pair: dict[str, OnSide]
) -> CaseResult:
    """The case measured; `pair` gets each side's step as soon as both are built (their calls)."""
    from perfgate.cases import accuracy
    from perfgate.cases.runner import isolate

    case = cases[case_id]
    head_spec = case.spec
    spec_b = base_spec(head_spec, head_root, base_root)
    if spec_b is None:
        return NotMeasured(case=case_id, error=NO_BASE_FILE)
    device = torch.device(case.device)
    isolate(device)
    _warm_libraries(device)
    built = {}
    resident = {side: Resident(device=device) for side in ("base", "head")}
    # Built in a random order: the model built second sits elsewhere in memory, and a fixed order
    # read as a steady -1% on the world model; random, it is noise that the processes average.
    for side, spec in random.sample([("base", spec_b), ("head", head_spec)], 2):
        with resident[side].adding():  # its weights, inputs, reference output, conversion
            built[side] = _build(side, case, spec, device)
    head_fn = built["head"].step
    if inject := os.environ.get(INJECT_HEAD):  # gate-quality: a slowdown in the head's model alone
        from perfgate.quality.inject import local_slowdown_step, parse

        kind, k = parse(inject)
        if kind != "local":
            raise ValueError(f"{INJECT_HEAD}={inject!r}: only local:K applies to one side of a process")
        head_fn = local_slowdown_step(head_fn, built["head"].converted.module, k)
    if sized := os.environ.get(INJECT_HEAD_SIZED):  # gate-quality: a slowdown sized by instructions
        from perfgate.quality.inject import load_sized, sized_step

        if spec := load_sized(sized).get(case_id):
            head_fn = sized_step(spec, head_fn, built["head"].converted.module)
    # Each step tagged with its side (one Python frame on both sides alike): an exception in the
    # rounds, the device window or the memory pass names the revision whose code raised it.
    base_step = pair["base"] = OnSide("base", built["base"].step)
    head_step = pair["head"] = OnSide("head", head_fn)
    m = measure_interleaved(
        base_step,
        head_step,
        device,
        stop=stop,
        seed=random.randrange(2**31),
        resident=resident,
        graphs=case.variant_obj.uses_cuda_graphs,
    )
    step_s = statistics.median(m.samples_base_ms + m.samples_head_ms) / 1000
    device_blocks, device_error = device_window(base_step, head_step, device, step_s)
    acc = {
        side: accuracy.metrics(out, built[side].reference, kind=built[side].workload.output_kind)
        for side, out in (("base", m.out_base), ("head", m.out_head))
    }
    return Measured(
        case=case_id,
        ratio=m.median_ratio,
        rounds=len(m.ratios),
        median_base_ms=statistics.median(m.samples_base_ms),
        median_head_ms=statistics.median(m.samples_head_ms),
        peak_base_mib=m.peak_base_mib,
        peak_head_mib=m.peak_head_mib,
        contention_cores=m.contention_cores,
        accuracy_base=acc["base"],
        accuracy_head=acc["head"],
        device=str(device),
        model=case.model,
        variant=case.variant,
        device_base_ms=device_blocks[0] if device_blocks else None,
        device_head_ms=device_blocks[1] if device_blocks else None,
        device_block_steps=DEVICE_BLOCK_STEPS if device_blocks else None,
        device_error=device_error,
    )


DEVICE_BLOCK_STEPS = 5  # steps of each side per block, as the GPU quality run's window (gpu_quality.Plan)
DEVICE_BLOCKS = (3, 10)  # blocks per window at least (a t test needs 3) and at most
DEVICE_WINDOW_S = 2.0  # the window's target length: a 393 ms step gets 3 blocks (12 s), a 12 ms one 10 (1.2 s)


def device_blocks_for(step_s: float) -> int:
    """Blocks of the device-time window for a step of `step_s` seconds: as many as fit the target
    length, within DEVICE_BLOCKS (each worker process adds its blocks to the pool judged)."""
    lo, hi = DEVICE_BLOCKS
    fit = int(DEVICE_WINDOW_S / (2 * DEVICE_BLOCK_STEPS * step_s)) if step_s > 0 else hi
    return max(lo, min(hi, fit))


def device_window(
    base: Callable[[], Any], head: Callable[[], Any], device: torch.device, step_s: float
) -> tuple[list[list[float]] | None, str | None]:
    """On a GPU, both sides' GPU busy ms per step in blocks of one profiler window in which they
    alternate, or why none was measured; (None, None) off a GPU. A window that fails loses the
    device-time verdict, not the case (a profiler that cannot trace here is the machine's problem,
    not the change's)."""
    from perfgate.measure.op_counts import interleaved_device_ms

    rng = random.Random(random.randrange(2**31))
    blocks_n = device_blocks_for(step_s)
    try:
        blocks = interleaved_device_ms([base, head], str(device), blocks_n, rng, block_steps=DEVICE_BLOCK_STEPS)
    except SideRaised:  # a side's model code, not the profiler: the case's failure
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return blocks, None


def all_cases(device: str) -> list[Any]:
    """Every case of every registered model at every size (ids name the size): what a case id given
    on the command line can be."""
    from perfgate.cases.selection import expand_cases
    from perfgate.cases.workload import MODELS, sizes

    return [
        c
        for name, spec in MODELS.items()
        for size in sizes(spec)
        for c in expand_cases(device, models=[name], sizes_=[size])
    ]


def main(argv: list[str] | None = None) -> int:
    (job_path,) = sys.argv[1:] if argv is None else argv
    args = Job.read(Path(job_path))
    from perfgate.cases.project import load_models
    from perfgate.measure.device import default_device, resolve

    load_models()
    if args.inductor_cache is not None:
        from perfgate.cases.variants import set_inductor_cache

        set_inductor_cache(args.inductor_cache)
    if os.environ.get("PERFGATE_INJECT"):  # gate-quality: an op both sides share made slower
        from perfgate.quality.inject import parse, slow_linear

        kind, k = parse(os.environ["PERFGATE_INJECT"])
        if kind == "shared":
            slow_linear(k)
    device = str(resolve(args.device or default_device()))
    known = {c.id: c for c in all_cases(device)}
    stop = StopRule(budget_s=args.budget_s, min_rounds=50, max_rounds=400, precision=0.005)
    results: list[CaseResult] = []
    for case_id in args.cases:
        results.append(_case(case_id, known, args, stop))
        write_results(args.out, results)  # after every case: a worker that dies loses only the case it was in
        if isinstance(results[-1], NotMeasured) and results[-1].context_lost:
            break  # every CUDA call here fails from now on: the cases left, no row, are measured in the next process
    return 0


def _case(case_id: str, known: dict[str, Any], job: Job, stop: StopRule) -> CaseResult:
    """One case of the job: measured (or, in a job with `alone`, run alone), skipped or failed."""
    if case_id not in known:
        return NotMeasured(case=case_id, error="no such case in the head revision")
    case = known[case_id]
    if reason := case.skip_reason():
        return NotMeasured(case=case_id, skipped=reason)
    try:
        if job.alone is None:
            return measure_case(case_id, known, job.head, job.base, stop)
        spec = case.spec if job.alone == "head" else base_spec(case.spec, job.head, job.base)
        assert spec is not None  # the pair built it: the base's family file is there
        return _alone(job.alone, case, spec, job.steps, job.budget_s)
    except VariantError as exc:  # found while building (no FP8 kernel here, no layer converted): a skip
        return NotMeasured(case=case_id, skipped=str(exc))
    except Exception as exc:  # noqa: BLE001 - one case's failure is its result, the others still run
        return NotMeasured(case=case_id, error=_line(exc), raised=True)


if __name__ == "__main__":
    sys.exit(main())
