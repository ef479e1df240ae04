"""`perfgate profile`'s report, typed: a `ProfileReport` of `PointReport`s, one per point of the sweep,
each with its sections (the benchmark, FLOPs, memory, layer breakdown, precision comparison, trace).

`run` builds it from the sections `memory`, `layers`, `precision` and `trace` return; the terminal
summary (perfgate.commands.profile) and the suggestions (`run.point_suggestions`) read it by attribute.
report.json is its JSON form, written once (`run.write_report`); the page is rendered from that form.
Every class is a `RecordBlock` (perfgate.record), read and written by the record's rules: a field's
key is its name unless `block_field(key=...)` says otherwise, a None is left out unless the field is
`always` written, and a report read back from a file writes the keys it held, in its order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfgate.profile.suggest import Suggestion
from perfgate.record import PeakBasis, RecordBlock, Telemetry, block_field


@dataclass(frozen=True, kw_only=True)
class BenchmarkTiming(RecordBlock):
    """The guide's simple benchmark of one point, from the runner's record: rounds, mean / median /
    std / min / max / p90 in ms, steps per second, throughput per second by unit, FPS where the model
    counts frames, the first call in s, the warm-up rounds, the timer, the samples and the other
    processes' busy cores while measuring."""

    n: int | None = block_field(always=True)
    mean_ms: float | None = block_field(always=True)
    median_ms: float | None = block_field(always=True)
    std_ms: float | None = block_field(always=True)
    min_ms: float | None = block_field(always=True)
    max_ms: float | None = block_field(always=True)
    p90_ms: float | None = block_field(always=True)
    steps_per_s: float | None = block_field(always=True)
    throughput: dict[str, float]
    fps: float | None = None
    first_call_s: float | None = block_field(always=True)
    warmup_rounds: int | None = block_field(always=True)
    timer: str | None = block_field(always=True)
    samples_ms: list[float]
    contention_cores: float | None = block_field(always=True)


@dataclass(frozen=True, kw_only=True)
class FlopsSection(RecordBlock):
    """The record's FLOPs and roofline fields (those set), then the count split by module and by
    operator in GFLOP per step and how it was counted."""

    gflop_per_step: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    peak_dtype: str | None = None
    peak_share: float | None = None
    peak_basis: dict[str, PeakBasis] | None = None
    peak_note: str | None = None
    attention_gflop: float | None = None
    flops_method: str | None = None
    by_module_gflop: dict[str, float]
    by_op_gflop: dict[str, float]
    method: str


@dataclass(frozen=True, kw_only=True)
class MemoryProfile(RecordBlock):
    """The memory of one step in MiB: peak (what it means on this device: `peak_semantics`), reserved
    (CUDA), weights, inputs, the device's (or system's) total, the system memory available (CPU),
    activations, and the share of the device's memory left at the peak (`headroom`, 0-1)."""

    method: str
    peak_mem_mib: float
    reserved_mem_mib: float | None = block_field(always=True)
    weights_mib: float
    inputs_mib: float
    device_total_mib: float
    available_mib: float | None = None
    activations_mib: float
    headroom: float
    peak_semantics: str


@dataclass(frozen=True, kw_only=True)
class LayerComponent(RecordBlock):
    """One top-level module of the forward: its class, time over rounds (mean, std, median in ms), share
    of the instrumented forward, the modules whose calls make it up, and its blocks if it is a ModuleList."""

    name: str
    class_name: str = block_field(key="class")
    mean_ms: float
    std_ms: float
    median_ms: float
    share: float | None = block_field(always=True)
    modules: int
    blocks: int | None = block_field(always=True)


@dataclass(frozen=True, kw_only=True)
class BlockTiming(RecordBlock):
    """One block of a list of repeated blocks: its index in the list, name and time over rounds in ms."""

    index: int
    name: str
    mean_ms: float
    std_ms: float
    median_ms: float


@dataclass(frozen=True, kw_only=True)
class BlockGroup(RecordBlock):
    """A list of repeated blocks (an nn.ModuleList at `path`): how many, their class, the mean and std of
    the blocks' medians in ms, the blocks' total (mean, ms) and its share of the forward, the slowest
    five blocks and every block."""

    path: str = block_field(key="list")
    n: int
    class_name: str = block_field(key="class")
    mean_ms: float
    std_ms: float
    total_ms: float
    share: float | None = block_field(always=True)
    slowest: list[BlockTiming]
    per_block: list[BlockTiming]


@dataclass(frozen=True, kw_only=True)
class ModuleShare(RecordBlock):
    """A kind of module found by name (attention, the patch embedding): which modules, their total time
    in ms and its share of the forward (None where none was found)."""

    modules: list[str]
    total_ms: float
    share: float | None = block_field(always=True)


@dataclass(frozen=True, kw_only=True)
class LayerBreakdown(RecordBlock):
    """perfgate.profile.layers' breakdown of the forward: rounds, timer and scope; the plain and the
    instrumented forward's times in ms and the hooks' cost in %; the components; the root's own ops;
    the parts' sum against the plain forward (`sum_vs_plain`, within `margin`: `consistent`); the
    lists of blocks and the largest one's path; attention and the patch embedding; and, where the
    variant's module is not the eager one the hooks timed, a note saying so."""

    rounds: int
    timer: str
    scope: str
    plain_mean_ms: float
    plain_median_ms: float
    total_mean_ms: float
    total_std_ms: float
    total_median_ms: float
    hook_overhead_pct: float | None = block_field(always=True)
    components: list[LayerComponent]
    unattributed_ms: float
    parts_sum_ms: float
    parts_median_ms: float
    sum_vs_plain: float | None = block_field(always=True)
    margin: float
    consistent: bool
    blocks: list[BlockGroup]
    main_blocks: str | None = block_field(always=True)
    attention: ModuleShare
    patch_embedding: ModuleShare
    note: str | None = None

    def main_group(self) -> BlockGroup | None:
        """The largest list of blocks (`main_blocks`), if the forward has one."""
        return next((g for g in self.blocks if g.path == self.main_blocks), None)


@dataclass(frozen=True, kw_only=True)
class PrecisionRow(RecordBlock):
    """One precision of the comparison: the autocast variant, and why it was skipped or its rounds,
    times in ms and how its stop rule ended; for an inference step its accuracy against fp32 eager;
    for all but fp32 its speed-up over fp32 (medians) and that read in the device's bands."""

    variant: str
    skipped: str | None = None
    n: int | None = None
    mean_ms: float | None = None
    median_ms: float | None = None
    std_ms: float | None = None
    min_ms: float | None = None
    stop: str | None = block_field(default=None, with_="median_ms")
    accuracy: dict[str, float] | None = None
    speedup: float | None = None
    interpretation: str | None = None


@dataclass(frozen=True, kw_only=True)
class PrecisionComparison(RecordBlock):
    """fp32 against bf16 / fp16 autocast (perfgate.profile.precision): the rows by precision and the
    device's speed-up bands (band -> reading)."""

    autocast: bool
    rows: dict[str, PrecisionRow]
    bands: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class TraceSection(RecordBlock):
    """A torch.profiler trace of some steps (perfgate.profile.trace): the trace file and the ops table
    beside it (relative to the run folder in a report), the top operators by self time (rows of
    `trace.top_operators`), what they are sorted by, whether layers are named, and what opens it."""

    trace: str
    steps: int
    ops_table: str
    top_ops: list[dict[str, Any]]
    sorted_by: str
    module_ranges: bool
    open_with: str


@dataclass(frozen=True, kw_only=True)
class NvtxSection(RecordBlock):
    """NVTX ranges for Nsight Systems: why none were emitted, or the steps, the NVTX backend, the
    `nsys profile` command line and a note."""

    skipped: str | None = None
    steps: int | None = None
    backend: str | None = block_field(default=None, with_="nsys_command")
    nsys_command: str | None = None
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class TorchTraceSection(RecordBlock):
    """Where TORCH_TRACE wrote compile logs, the logs, the tlparse command for each and a note."""

    dir: str
    logs: list[str]
    tlparse: list[str]
    note: str


@dataclass(frozen=True, kw_only=True)
class Sweep(RecordBlock):
    """The option a report sweeps and its values, one point each."""

    option: str
    values: list[Any]


@dataclass(frozen=True, kw_only=True)
class PointReport(RecordBlock):
    """One point of a profile: what ran (label, size, batch, variant, options, parameters and their
    fp32 MiB, step kind, throughput unit and items per step, the variant's conversion info), the
    benchmark, the FLOPs (or why none), the telemetry summary and samples, why it is unreliable, the
    accuracy against fp32 eager (a non-baseline inference variant), the memory; unless the profile
    was the quick one the layer breakdown, precision comparison, trace (and NVTX when asked for);
    the suggestions."""

    label: str
    size: str
    batch: int
    variant: str
    options: dict[str, Any]
    params: int | None = block_field(always=True)
    weights_mib_fp32: float
    step_kind: str
    unit: str
    items_per_step: dict[str, float]
    variant_info: dict[str, Any]
    benchmark: BenchmarkTiming
    flops: FlopsSection | None = block_field(always=True)
    flops_error: str | None = block_field(always=True)
    telemetry: Telemetry | None = block_field(always=True)
    telemetry_timeline: list[dict[str, Any]] | None = block_field(always=True)
    unreliable: str | None = block_field(always=True)
    accuracy: dict[str, float] | None = None
    memory: MemoryProfile
    layers: LayerBreakdown | None = None
    precision: PrecisionComparison | None = None
    trace: TraceSection | None = None
    nvtx: NvtxSection | None = None
    suggestions: list[Suggestion]


@dataclass(frozen=True, kw_only=True)
class ProfileReport(RecordBlock):
    """A `perfgate profile` run: schema, tool, when (ISO time), the command that reproduces it, model,
    device, hardware, the machine's fingerprint and its id, the sweep (if any), the config, the
    points, and where TORCH_TRACE wrote compile logs (if it was set)."""

    schema: int
    tool: str
    created: str
    command: str
    model: str
    device: str
    hardware: str | None = block_field(always=True)
    fingerprint: dict[str, Any]
    fingerprint_id: str
    sweep: Sweep | None = block_field(always=True)
    config: dict[str, Any]
    points: list[PointReport]
    torch_trace: TorchTraceSection | None = block_field(always=True)
