"""The result of one benchmark case: one typed record the runner fills and every reader imports.

`extra_info` in pytest-benchmark's JSON is its serialisation: `to_extra_info()` writes the keys
that are set (a CPU run has no CUDA figure, an eager case no compile keys), `from_extra_info()`
reads any file perfgate ever wrote, keeping keys it does not know in `extra`. The lists other
modules used to keep by hand (the keys a smoke run must record, the metrics `perfgate history`
offers, the per-rank figures that are no metrics) derive from the fields' metadata here.

The record's JSON objects (the energy window, the throttled rounds, the roofline's peaks, the
instruction count, the noise between recording passes, the telemetry summary, the pooled
re-measurement, a failing case's evidence) are small typed blocks (`RecordBlock`), read and written
by the same rules as the record itself: a field's type says whether its value is a block (or a
table of blocks), `_f`'s metadata whether a None is written, keys a block does not know stay in
its `extra`, and a block read from a file writes back the keys the file held, in its order.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Self, Union, get_args, get_origin, get_type_hints

# Field metadata: required (every measured case records it: the smoke check asks for these),
# always (written even when None: the runner sets it for every case), history (label, better:
# "lower" or "higher") for the metrics `perfgate history` and the report offer, unit where the
# name cannot say it, key (the files' key, where it is not the field's name), with (a block's
# field written, None too, whenever the named field is set: a pair the producer writes together).


def _f(
    default: Any = None,
    *,
    required: bool = False,
    always: bool = False,
    history: tuple[str, str] | None = None,
    unit: str | None = None,
    key: str | None = None,
    with_: str | None = None,
) -> Any:
    meta: dict[str, Any] = {"required": required, "always": always or required}
    if key is not None:
        meta["key"] = key  # the result files' key, where it is not the field's name
    if with_ is not None:
        meta["with"] = with_
    if history:
        meta["history"] = history
    if unit is not None:
        meta["unit"] = unit
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def block_field(
    *, default: object = MISSING, always: bool = False, key: str | None = None, with_: str | None = None
) -> Any:
    """A field of a RecordBlock declared outside this module (perfgate.profile.report): written even
    when None (`always`), under another key than its name (`key`), or whenever the field `with_` is
    set; required unless it has a `default`."""
    meta: dict[str, Any] = {"always": always}
    if key is not None:
        meta["key"] = key
    if with_ is not None:
        meta["with"] = with_
    return field(metadata=meta) if default is MISSING else field(default=default, metadata=meta)


# --- the record's JSON objects, typed ------------------------------------------------------------

_UNREADABLE = object()  # a value whose shape is not its field's type: kept as read, in `extra`


@dataclass(frozen=True, kw_only=True)
class RecordBlock:
    """A JSON object inside a record, typed. `extra`: keys this version does not know, kept as they
    were; `written`: the keys of the object a file held, in its order (None: built here; then the
    fields' metadata decide, as for the record), not compared: a block read back from a file equals
    the one that was written."""

    extra: dict[str, Any] = field(default_factory=dict)
    written: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        known, extra = _read(cls, obj)
        return cls(**known, extra=extra, written=tuple(obj))

    def to_json(self) -> dict[str, Any]:
        return _write(self, self.extra, self.written)


@dataclass(frozen=True, kw_only=True)
class EnergyWindow(RecordBlock):
    """The energy counter's window after the timed rounds (`CaseRecord.energy`, perfgate.measure.energy):
    its source ("nvml" or "rapl"), the joules over `window_s` seconds and `steps` steps, and the
    error bound of the per-step figure (one step over the steps in the window, in %)."""

    source: str
    joules: float
    window_s: float
    steps: int
    error_bound_pct: float

    @property
    def j_per_step(self) -> float:
        return self.joules / self.steps


@dataclass(frozen=True, kw_only=True)
class ThrottledRounds(RecordBlock):
    """The timed rounds a GPU ran throttled (`CaseRecord.throttle`, perfgate.measure.throttle): how
    many were dropped and kept, the clock-event reasons with their round counts, whether too few
    clean rounds remain, and the rule (the SM clock's least share of its maximum, the pause after
    a throttled round in seconds)."""

    dropped: int
    kept: int
    reasons: dict[str, int]
    too_few: bool
    clock_ratio_min: float
    recovery_delay_s: float


@dataclass(frozen=True, kw_only=True)
class PeakBasis(RecordBlock):
    """One family of the step's ops in the roofline (`CaseRecord.peak_basis`, by family; perfgate.cases.flops):
    its GFLOP per step and the peak measured for it: TFLOP/s, dtype, op family, the problem timed,
    its best time of one call in seconds, the device, and whether fp32 ran as TF32 (None where that
    does not apply; written as null)."""

    gflop: float
    tflops: float
    dtype: str
    op: str
    shape: str
    seconds: float
    device: str
    tf32: bool | None = _f(None, always=True)


@dataclass(frozen=True, kw_only=True)
class InstructionCount(RecordBlock):
    """The callgrind window behind `instructions_per_step` (`CaseRecord.instructions`, perfgate.counts):
    instructions in `steps` steps, the valgrind version, the virtual CPU and the count key (counts
    compare only under one key), the count pass's cases, wall seconds and processes; for a suspect
    recounted in a second process its count per step and the spread between the two in % (or why
    it was not recounted). Every field may be missing from a file's block: None."""

    total: int | None = None
    steps: int | None = None
    valgrind: str | None = _f(None, always=True)
    virtual_cpu: dict[str, Any] | None = None
    key: str | None = None
    pass_cases: int | None = None
    pass_wall_s: float | None = None
    pass_processes: int | None = None
    repeat_per_step: float | None = None
    spread_pct: float | None = None
    repeat_error: str | None = None


@dataclass(frozen=True, kw_only=True)
class MinMeanMax(RecordBlock):
    """One telemetry metric over the samples (its unit is in the metric's name: `_pct`, `_mhz`, `_mib`)."""

    min: float
    mean: float
    max: float


@dataclass(frozen=True, kw_only=True)
class TelemetryGpu(RecordBlock):
    """The GPU the telemetry sampler read through NVML (`Telemetry.gpu`): None where a figure could
    not be read (the reason is in `unsupported`, by figure)."""

    index: int | None = _f(None, always=True)
    name: str | None = _f(None, always=True)
    max_sm_clock_mhz: float | None = _f(None, always=True)
    total_mem_mib: float | None = _f(None, always=True)
    unsupported: dict[str, str] | None = _f(None, always=True)
    n_samples: int | None = _f(None, always=True)


@dataclass(frozen=True, kw_only=True)
class Telemetry(RecordBlock):
    """The telemetry sampler's summary while the case was timed (`CaseRecord.telemetry`,
    perfgate.measure.telemetry): the sampling interval in seconds, the samples taken, the source
    ("psutil" or "nvml+psutil") and each metric's min / mean / max. On a CUDA device also the GPU
    read (or why none could be: `gpu_unavailable`, the two written together); where the GPU
    reported clock-event masks, each reason's share of them; where it reported a utilisation or a
    mask, the busy samples (NVML saw work and no GpuIdle: perfgate.measure.telemetry.is_busy; until
    2026-11-29 every sample without GpuIdle, which with a CUDA context open was every sample) and
    the SM clock over them; the most other processes seen computing on the GPU."""

    interval_s: float | None = None
    n_samples: int | None = None
    source: str | None = None
    metrics: dict[str, MinMeanMax] | None = None
    gpu: TelemetryGpu | None = _f(None, with_="gpu_unavailable")
    gpu_unavailable: str | None = _f(None, with_="gpu")
    clock_events: dict[str, float] | None = None
    busy_samples: int | None = None
    busy_sm_clock_mhz: MinMeanMax | None = None
    gpu_other_processes_max: int | None = None

    def metric(self, name: str) -> MinMeanMax | None:
        return (self.metrics or {}).get(name)


@dataclass(frozen=True, kw_only=True)
class PassNoise(RecordBlock):
    """One gated metric's noise between the recording passes (`CaseRecord.pass_noise`, by metric:
    latency, device_time, instructions; perfgate.gate.detectable): the passes that had it, their
    relative spread and the smallest change the gate tells from it (both in %), over every pass
    measured; for latency the pass left out as a slow phase when deciding whether the passes agree
    (1-based, in recording order, the replaced pass not counted), where one was."""

    passes: int
    spread_pct: float
    detects_pct: float
    dropped_pass: int | None = None


@dataclass(frozen=True, kw_only=True)
class Pooled(RecordBlock):
    """A re-measured case's runs judged once, pooled (`CaseRecord.pooled`, perfgate.gate.decide): how
    many runs, their samples concatenated, the reference samples (None unless every run had them)
    and why any run was unreliable (both written as null)."""

    runs: int
    samples_ms: list[float]
    reference_ms: list[float] | None = _f(None, always=True)
    unreliable: str | None = _f(None, always=True)


@dataclass(frozen=True, kw_only=True)
class Reproduce(RecordBlock):
    """The command lines that re-run a failing case (`Evidence.reproduce`, perfgate.profile.evidence):
    the pytest case alone and a full `perfgate profile` of it."""

    pytest: str
    profile: str


@dataclass(frozen=True, kw_only=True)
class Evidence(RecordBlock):
    """What was captured of a failing case (`CaseRecord.evidence`, perfgate.profile.evidence): its
    profiler trace, the ops table beside it and the top operators (perfgate.profile.trace's rows),
    on CUDA an allocator snapshot, and the commands that reproduce it."""

    trace: str
    ops_table: str
    top_ops: list[dict[str, Any]]
    memory_snapshot: str | None = None
    reproduce: Reproduce | None = None


@dataclass(frozen=True, kw_only=True)
class CaseRecord:
    # What ran.
    model: str = _f("", required=True)
    size: str = _f("", required=True)
    variant: str = _f("", required=True)
    options: dict[str, Any] = _f({}, always=True)
    device: str = _f("", required=True)
    dtype: str = _f("float32", required=True)
    params: int | None = _f(None, required=True)
    # The step kind (ModelSpec.step_kind: inference, train, ...). The result files keep the key
    # `step` that every committed baseline and history run holds; in code "step" is the timed callable.
    step_kind: str = _f("inference", always=True, key="step")
    # Phases.
    convert_s: float | None = _f(None, always=True)
    first_call_s: float | None = _f(None, required=True, history=("first call", "lower"))
    warm_compile_s: float | None = _f(None, history=("warm compile time", "lower"))
    warmup_rounds: int | None = _f(None, always=True)
    rounds: int | None = _f(None, always=True)
    stop: str | None = _f(None, always=True)
    timer: str | None = _f(None, always=True)
    # Timing: raw samples (what the gate tests) and their summary.
    samples_ms: list[float] = _f([], required=True)
    reference_ms: list[float] | None = _f()  # CPU: the reference workload, timed in the same rounds
    reference_median_ms: float | None = _f()
    normalised_median: float | None = _f(None, history=("latency / reference workload (the CPU gate's ratio)", "lower"))
    n: int | None = _f(None, always=True)
    mean_ms: float | None = _f(None, history=("mean latency", "lower"), always=True)
    std_ms: float | None = _f(None, history=("latency std", "lower"), always=True)
    min_ms: float | None = _f(None, history=("min latency", "lower"), always=True)
    max_ms: float | None = _f(None, history=("max latency", "lower"), always=True)
    median_ms: float | None = _f(None, required=True, history=("median latency", "lower"))
    p90_ms: float | None = _f(None, required=True, history=("p90 latency", "lower"))
    p99_ms: float | None = _f(None, required=True, history=("p99 latency", "lower"))
    tail_note: str | None = _f()  # why p90 / p99 are None: too few samples (perfgate.measure.stats.TAIL_MIN_SAMPLES)
    iqr_ms: float | None = _f(None, always=True)
    noise_iqr_rel: float | None = _f(None, always=True)
    median_ci_lo_ms: float | None = _f(None, always=True)
    median_ci_hi_ms: float | None = _f(None, always=True)
    # Memory.
    peak_mem_mib: float | None = _f(None, required=True, history=("peak memory", "lower"))
    reserved_mem_mib: float | None = _f(None, history=("reserved memory", "lower"), always=True)
    mem_method: str | None = _f(None, always=True)
    # Accuracy against the fp32 eager output.
    accuracy: dict[str, float] = _f({}, required=True)
    tolerance: dict[str, Any] = _f({}, always=True)
    # Throughput in the model's units.
    throughput: dict[str, float] = _f({}, required=True)
    unit: str = _f("", required=True)
    items_per_step: dict[str, float] = _f({}, always=True)
    fps: float | None = _f(None, history=("frames per second", "higher"), unit="frames/s")
    # The variant's conversion.
    compile_mode: str | None = _f()
    inductor_freezing: bool | None = _f()  # CPU compile with inductor's freezing (cases.conversions.Compile)
    autocast: str | None = _f()
    cuda_graph: bool | None = _f()
    quantized_linears: int | None = _f()
    linears: int | None = _f()
    engine_build_s: float | None = _f(None, history=("TensorRT engine build", "lower"))
    engine_load_s: float | None = _f()
    engine_mib: float | None = _f()
    cudagraph_skips: int | None = _f()
    graph_breaks: int | None = _f(None, history=("graph breaks", "lower"))
    compile_cache: dict[str, int] | None = _f()
    # Energy from the hardware's cumulative counter (perfgate.measure.energy), or why there is none.
    energy_j_per_step: float | None = _f(None, history=("energy per step", "lower"), unit="J")
    energy_j_per_frame: float | None = _f(None, history=("energy per frame", "lower"), unit="J")
    frames_per_j: float | None = _f(None, history=("frames per joule", "higher"), unit="frames/J")
    energy: EnergyWindow | None = _f()
    energy_skipped: str | None = _f()
    # FLOPs and the roofline.
    gflop_per_step: float | None = _f()
    achieved_tflops: float | None = _f()
    peak_tflops: float | None = _f()
    peak_dtype: str | None = _f()
    peak_share: float | None = _f()
    peak_basis: dict[str, PeakBasis] | None = _f()  # by op family ("linear", "bmm", "conv")
    peak_note: str | None = _f()
    attention_gflop: float | None = _f()
    flops_method: str | None = _f()
    flops_error: str | None = _f()
    # Counts (perfgate.counts): instructions of a window of steps under callgrind (CPU), aten op
    # calls and CUDA kernel launches per step (torch profiler); or why a case has none.
    instructions_per_step: float | None = _f(None, history=("instructions per step (callgrind)", "lower"))
    instructions: InstructionCount | None = _f()
    instructions_skipped: str | None = _f()
    instructions_functions: dict[str, list[int]] | None = _f()  # {function: [self, inclusive]} of the window
    aten_ops_per_step: dict[str, float] | None = _f()
    kernels_per_step: float | None = _f(None, history=("CUDA kernel launches per step", "lower"))
    kernel_names_per_step: dict[str, float] | None = _f()
    # The GPU's busy time per step from the same profiler window (kernels, copies and memsets,
    # overlaps merged: perfgate.measure.device_time), each activity name's time, and the host's
    # share beside it (the timed median minus the device time; "launch-bound" when the GPU idles
    # most of the step).
    device_ms_per_step: float | None = _f(None, history=("GPU busy time per step", "lower"))
    kernel_ms_per_step: dict[str, float] | None = _f()
    host_ms_per_step: float | None = _f()
    bound: str | None = _f()  # "launch-bound" or "device-bound"
    # The noise the record was taken with (perfgate.gate.detectable): per metric the relative
    # spread between its passes, the passes, and the smallest change the gate can tell from it.
    pass_noise: dict[str, PassNoise] | None = _f()  # by metric ("latency", "device_time", "instructions")
    # Telemetry summary and reliability.
    telemetry: Telemetry | None = _f()
    contention_cores: float | None = _f()
    throttle: ThrottledRounds | None = _f()  # GPU: rounds dropped as throttled, why, how many remain
    unreliable: str | None = _f()
    # Why this record is kept out of a baseline being recorded (its passes still disagree after the
    # re-measurement, perfgate.gate.detectable): the case's previous baseline keeps gating it.
    not_recorded: str | None = _f()
    # In-run comparisons and the gate's bookkeeping.
    speedup: float | None = _f(None, history=("speedup over eager baseline", "higher"), unit="x")
    speedup_basis: str | None = _f()
    speedup_note: str | None = _f()  # why a case has no speedup (the eager run was unreliable, or none ran)
    remeasured: int | None = _f()
    # The case's wall time in its process, build to verdict (re-measurements included): what
    # --perfgate-shard balances the shards by.
    case_wall_s: float | None = _f(None, unit="s")
    pooled: Pooled | None = _f()  # a re-measured case's runs, pooled (perfgate.gate.decide)
    evidence: Evidence | None = _f()  # a failing case's trace and how to reproduce it (--perfgate-trace)
    # A distributed run (perfgate.dist.ranks): each rank's own block (perfgate.plugin.torchrun), and
    # on the aggregate the slowest rank, how throughput combined, per-rank figures and stragglers.
    rank: int | None = _f()
    world_size: int | None = _f()
    local_rank: int | None = _f()
    local_world_size: int | None = _f()
    dist_backend: str | None = _f()
    num_threads: int | None = _f()
    host: str | None = _f()
    rank_device: str | None = _f()
    slowest_rank: int | None = _f()
    missing_ranks: list[int] | None = _f()
    throughput_aggregation: str | None = _f()  # "sum" (data-parallel steps) or "slowest"
    across_ranks: dict[str, dict[str, float]] | None = _f()  # dotted metric -> min / max / mean over ranks
    ranks: list[RankSummary] | None = _f()  # one summary per rank (perfgate.dist.ranks.rank_summary)
    stragglers: list[Straggler] | None = _f()  # perfgate.dist.ranks.find_stragglers
    straggler_threshold_pct: float | None = _f()
    # Keys this version does not know (another tool's, a distributed run's): kept as they were.
    extra: dict[str, Any] = field(default_factory=dict, metadata={"required": False, "always": False})

    @classmethod
    def from_extra_info(cls, info: Mapping[str, Any]) -> CaseRecord:
        known, extra = _read(cls, info)
        return cls(**known, extra=extra)

    def to_extra_info(self) -> dict[str, Any]:
        """The keys that are set, in field order, then the unknown ones."""
        return _write(self, self.extra, None)

    @property
    def throughput_primary(self) -> float | None:
        """Items per second in the model's primary unit."""
        v = self.throughput.get(self.unit)
        return float(v) if isinstance(v, (int, float)) else None


@dataclass(frozen=True)
class RankBlock:
    """What a torchrun rank records about itself: the file's top-level `perfgate_dist` block, and
    the same fields in each of its case records (perfgate.plugin.torchrun writes both)."""

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    dist_backend: str | None = None
    num_threads: int | None = None
    host: str | None = None
    rank_device: str | None = None

    @classmethod
    def from_json(cls, block: Mapping[str, Any]) -> RankBlock:
        return cls(**{f.name: block.get(f.name) for f in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class RankSummary(RecordBlock):
    """One rank's figures on an aggregated record (`CaseRecord.ranks`, built by
    perfgate.dist.ranks.rank_summary): its median, then what its own record wrote of these (the
    record's always-written figures even when None), as the rank table reads them."""

    rank: int
    median_ms: float
    mean_ms: float | None = block_field(default=None, always=True)
    min_ms: float | None = block_field(default=None, always=True)
    max_ms: float | None = block_field(default=None, always=True)
    p90_ms: float | None = block_field(default=None, always=True)
    std_ms: float | None = block_field(default=None, always=True)
    rounds: int | None = block_field(default=None, always=True)
    peak_mem_mib: float | None = block_field(default=None, always=True)
    first_call_s: float | None = block_field(default=None, always=True)
    contention_cores: float | None = None
    fps: float | None = None
    device: str | None = block_field(default=None, always=True)
    num_threads: int | None = None
    host: str | None = None
    unreliable: str | None = None
    throughput: dict[str, float] = field(default_factory=dict)
    accuracy: dict[str, Any] = field(default_factory=dict)


# A rank whose median is this much above the median of rank medians is a straggler (perfgate.dist.ranks).
DEFAULT_STRAGGLER_PCT = 10.0


@dataclass(frozen=True, kw_only=True)
class Straggler(RecordBlock):
    """A rank whose median is well above the median of the rank medians (`CaseRecord.stragglers`)."""

    rank: int
    median_ms: float
    median_of_ranks_ms: float
    excess_pct: float


# --- reading and writing the record and its blocks: one mechanism ------------------------------------


# A field's container of blocks: None (one block), dict (a table of them by name) or list.
_Plan = dict[str, tuple[Field[Any], type["RecordBlock"] | None, type | None]]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """A record's or block's file keys -> (field, block type, its container): from the fields'
    types (`EnergyWindow | None`, `dict[str, PeakBasis] | None`, `list[LayerComponent]`)."""
    if cls in _PLANS:
        return _PLANS[cls]
    hints = get_type_hints(cls)
    out = {}
    for f in fields(cls):
        if f.name in ("extra", "written"):
            continue
        t = hints[f.name]
        if get_origin(t) in (Union, types.UnionType):
            t = next((a for a in get_args(t) if a is not type(None)), t)
        container = get_origin(t) if get_origin(t) in (dict, list) else None
        inner = get_args(t)[-1] if container and get_args(t) else t
        block = inner if isinstance(inner, type) and issubclass(inner, RecordBlock) else None
        out[f.metadata.get("key", f.name)] = (f, block, container)
    _PLANS[cls] = out
    return out


def _decode(block: type[RecordBlock], container: type | None, value: Any) -> Any:
    """`value` as read from a file as its field's block (or table or list of blocks), or _UNREADABLE.
    A block given already (a producer's fields) is taken as it is."""
    if value is None or isinstance(value, block):
        return value
    try:
        if container is None:
            return block.from_json(value) if isinstance(value, Mapping) else _UNREADABLE
        if (
            container is dict
            and isinstance(value, Mapping)
            and all(isinstance(v, (Mapping, block)) for v in value.values())
        ):
            return {k: v if isinstance(v, block) else block.from_json(v) for k, v in value.items()}
        if container is list and isinstance(value, list) and all(isinstance(v, (Mapping, block)) for v in value):
            return [v if isinstance(v, block) else block.from_json(v) for v in value]
    except TypeError:  # a block without one of its fields: not perfgate's
        pass
    return _UNREADABLE


def as_json(value: object) -> Any:
    """A field's value as the files hold it: a block (or a table or list of them) as its JSON object."""
    if isinstance(value, RecordBlock):
        return value.to_json()
    if isinstance(value, dict) and any(isinstance(v, RecordBlock) for v in value.values()):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list) and any(isinstance(v, RecordBlock) for v in value):
        return [as_json(v) for v in value]
    return value


def _read(cls: type, obj: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A JSON object's fields by name (blocks read as their type) and the keys `cls` does not know,
    or whose value does not have its field's shape (those kept as they were)."""
    plan, known, extra = _plan(cls), {}, {}
    for k, v in obj.items():
        f, block, container = plan.get(k, (None, None, None))
        value = v if f is None or block is None else _decode(block, container, v)
        if f is None or value is _UNREADABLE:
            extra[k] = v
        else:
            known[f.name] = value
    return known, extra


def _write(obj: object, extra: Mapping[str, Any], written: tuple[str, ...] | None) -> dict[str, Any]:
    """A record's or block's JSON object: the keys a file held in its order (`written`) and any
    field set since, or (built here) the fields that are set or `always` written, in field order;
    then the keys it did not know."""
    plan = _plan(type(obj))

    def wanted(f: Field[Any]) -> bool:
        if getattr(obj, f.name) is not None or f.metadata.get("always"):
            return True
        return "with" in f.metadata and getattr(obj, f.metadata["with"]) is not None

    if written is None:
        keys = [k for k, (f, _, _) in plan.items() if wanted(f)]
    else:
        keys = [
            *written,
            *(k for k, (f, _, _) in plan.items() if k not in written and getattr(obj, f.name) is not None),
        ]
    out = {
        k: extra[k] if k in extra else as_json(getattr(obj, plan[k][0].name)) for k in keys if k in plan or k in extra
    }
    return {**out, **{k: v for k, v in extra.items() if k not in out}}


# The result files' keys of the record's fields (a field's name unless its metadata names the key).
_FIELD_OF_KEY = {f.metadata.get("key", f.name): f.name for f in fields(CaseRecord) if f.name != "extra"}
FIELD_NAMES = frozenset(_FIELD_OF_KEY)  # the keys, as the files spell them


def speedup_basis(rec: CaseRecord) -> str:
    """What a speedup over eager compares: the reference-normalised medians where the case has them
    (a CPU: eager and variant run minutes apart, and the ratio cancels the machine's drift between
    them), else the milliseconds."""
    return "normalised_median" if rec.normalised_median is not None else "median_ms"


def speedup(eager: CaseRecord, rec: CaseRecord, basis: str | None = None) -> float | None:
    """The one speedup rule: eager's figure over the case's, on `basis` (default: speedup_basis of
    the case, and None unless eager's is the same). None when either figure is missing or not positive."""
    if basis is None and speedup_basis(eager) != speedup_basis(rec):
        return None
    basis = basis or speedup_basis(rec)
    e, c = getattr(eager, basis), getattr(rec, basis)
    return e / c if isinstance(e, (int, float)) and isinstance(c, (int, float)) and e > 0 and c > 0 else None


REQUIRED_KEYS = tuple(f.metadata.get("key", f.name) for f in fields(CaseRecord) if f.metadata.get("required"))
HISTORY_FIELDS = {
    f.name: (*f.metadata["history"], f.metadata.get("unit")) for f in fields(CaseRecord) if "history" in f.metadata
}


def default_of(name: str) -> Any:
    f = next(f for f in fields(CaseRecord) if f.name == name)
    if f.default is not MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _positive_times(v: Any) -> bool:
    return (
        isinstance(v, list)
        and bool(v)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in v)
    )


def _finite(v: Any, *, low: float = -math.inf) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= low


def value_problems(info: Mapping[str, Any]) -> list[str]:
    """What is wrong with the values of one case's extra_info, one phrase each (empty when sound):
    a NaN sample used to judge a 300x slower case "unchanged", inf "improvement", zero a crash."""
    out = []
    samples = info.get("samples_ms")
    if not _positive_times(samples):
        out.append("samples_ms must be a non-empty list of positive finite milliseconds")
    ref = info.get("reference_ms")
    if ref is not None and (not _positive_times(ref) or not isinstance(samples, list) or len(ref) != len(samples)):
        out.append("reference_ms must be positive finite milliseconds pairing with samples_ms")
    for key in ("peak_mem_mib", "reserved_mem_mib"):
        if info.get(key) is not None and not _finite(info[key], low=0.0):
            out.append(f"{key} must be a finite number >= 0, got {info[key]!r}")
    for key in ("median_ms", "speedup"):
        if info.get(key) is not None and not (_finite(info[key]) and info[key] > 0):
            out.append(f"{key} must be a positive finite number, got {info[key]!r}")
    acc = info.get("accuracy")
    if acc is not None and not isinstance(acc, Mapping):
        out.append("accuracy must be a table of numbers")
    elif isinstance(acc, Mapping):
        for k, v in acc.items():
            ok = (_finite(v) or (k == "psnr_db" and v == math.inf)) and (
                k != "rel_l2" or v >= 0
            )  # PSNR of an exact output is inf
            if not ok:
                out.append(f"accuracy.{k} must be a finite number, got {v!r}")
    pooled = info.get("pooled")
    if pooled is not None and (not isinstance(pooled, Mapping) or not _positive_times(pooled.get("samples_ms"))):
        out.append("pooled.samples_ms must be a non-empty list of positive finite milliseconds")
    out += pass_noise_problems(info.get("pass_noise"))
    return out


def pass_noise_problems(noise: object) -> list[str]:
    """What is wrong with a `pass_noise` field as read (`PassNoise` per metric; perfgate.gate.detectable),
    one phrase each: a string or null detects_pct ended a run in a traceback, NaN or a negative one
    claimed a precision no case has, a block of another shape read silently as "one pass"."""
    if noise is None:
        return []
    again = " (re-record the case in passes: scripts/record-baselines --passes 3)"
    if not isinstance(noise, Mapping) or not all(isinstance(b, Mapping) for b in noise.values()):
        return [f"pass_noise must be a table of metric -> {{passes, spread_pct, detects_pct}}, got {noise!r}{again}"]
    out = []
    for metric, block in noise.items():
        if not isinstance(block, Mapping):
            continue  # refused above
        passes = block.get("passes")
        if not isinstance(passes, int) or isinstance(passes, bool) or passes < 2:
            out.append(f"pass_noise.{metric}.passes must be a whole number >= 2, got {passes!r}{again}")
        for key in ("spread_pct", "detects_pct"):
            if not _finite(block.get(key), low=0.0):
                out.append(f"pass_noise.{metric}.{key} must be a finite number >= 0, got {block.get(key)!r}{again}")
        dropped = block.get("dropped_pass")
        if dropped is not None and (not isinstance(dropped, int) or isinstance(dropped, bool) or dropped < 1):
            out.append(f"pass_noise.{metric}.dropped_pass must be a whole number >= 1, got {dropped!r}{again}")
    return out
