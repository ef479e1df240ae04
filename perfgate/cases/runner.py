"""One benchmark case end to end, without pytest: build, convert, check accuracy, measure.

The pipeline, in two halves every caller shares:
- `build_case`: the workload and its fp32 eager reference output (`prepare`), the FLOP count of
  the eager step (`count_flops`), the variant's conversion (`convert`) and the step;
- `measure_case`: `measure` under the options' stop and warm-up rules with the telemetry sampler
  running (`measure_sampled`), then the typed `CaseRecord` (`case_record`, `compile_facts`).
`run_case` is the two in a row on a clean slate: what the suite runs. `perfgate profile` calls the
same two with fixed round counts and keeps the `BuiltCase` for layer hooks, memory and traces, so
its numbers are the suite's. The record's `to_extra_info()` is what lands in pytest-benchmark's JSON.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from perfgate.cases import accuracy, flops
from perfgate.cases.accuracy import Tolerance, tolerance_for
from perfgate.cases.conversions import Converted, Env, VariantError
from perfgate.cases.steps import is_training, make_step, reference_output
from perfgate.cases.variants import Variant, get_variant
from perfgate.cases.workload import ModelSpec, Workload, build_workload, get_model
from perfgate.measure import energy, telemetry, throttle
from perfgate.measure.core import Measurement, StopRule, WarmupRule, measure, reference_step
from perfgate.measure.device import bind
from perfgate.measure.stats import ratios, tail_note
from perfgate.record import CaseRecord, Telemetry


@dataclass(frozen=True, kw_only=True)
class Case:
    """A point of the parametrisation; `id` is the pytest id and the baseline key's tail."""

    model: str
    size: str
    variant: str
    device: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def id(self) -> str:
        opts = "".join(f"-{k.replace('_', '')}{v}" for k, v in self.options)
        return f"{self.model}-{self.size}{opts}-{self.variant}"

    @property
    def spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def variant_obj(self) -> Variant:
        return get_variant(self.variant)

    def skip_reason(self, env: Env | None = None) -> str | None:
        reason = self.variant_obj.unavailable(env or Env.detect(self.device))
        if reason is None and is_training(self.spec.step_kind) and self.variant_obj.inference_only:
            # CUDA graphs and TensorRT capture under inference mode (no grad); torchao freezes
            # quantised weights, so SGD would not update them: not the same training step.
            reason = f"{self.variant} is an inference-only optimisation; {self.model} times a training step"
        return reason


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    stop: StopRule = StopRule()
    warmup: WarmupRule = WarmupRule()
    seed: int = 0
    batch: int = 1
    checkpoint: str | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # [tool.perfgate.tolerance] overrides
    warm_compile: bool = True  # also time a second compile against the warm inductor cache
    telemetry_interval_s: float | None = 0.1  # background GPU/CPU sampler during measure(); None: off
    count_flops: bool = True  # GFLOP per step, achieved TFLOP/s and the share of a measured matmul peak
    energy_window_s: float = 1.0  # energy counter window after the timed rounds (perfgate.measure.energy); 0: off
    drop_throttled: bool = True  # CUDA: drop rounds the GPU ran throttled (perfgate.measure.throttle)
    reference: bool = True  # CPU: time the reference workload in every round (machine-speed normalisation)


@dataclass(kw_only=True)
class CaseResult:
    case: Case
    measurement: Measurement
    record: CaseRecord
    step: Callable[[], Any] | None = field(default=None, repr=False)  # for evidence traces of this case
    timeline: list[dict[str, Any]] | None = field(default=None, repr=False)  # telemetry samples while measuring

    @property
    def extra_info(self) -> dict[str, Any]:
        """The record as pytest-benchmark's extra_info."""
        return self.record.to_extra_info()


@dataclass(kw_only=True)
class BuiltCase:
    """A case ready to measure; the profiler also reads what the record does not hold."""

    case: Case
    device: torch.device
    workload: Workload
    reference: Any  # the fp32 eager output (the loss for a train step)
    flop_count: flops.FlopCount | None
    flops_error: str | None
    prepared: Converted  # the eager module after the variant's in-place conversions: forward hooks work on it
    converted: Converted  # what the step runs (the prepared module, a compiled graph or an engine)
    convert_s: float
    step: Callable[[], Any] = field(repr=False)

    @property
    def variant(self) -> Variant:
        return self.case.variant_obj


def isolate(device: torch.device) -> None:
    """Each case starts clean: no compiled graphs, no garbage, fresh CUDA cache and peaks."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


def _cache_hits() -> dict[str, int]:
    from torch._dynamo.utils import counters

    ind = counters["inductor"]
    return {
        "fxgraph_cache_hit": int(ind.get("fxgraph_cache_hit", 0)),
        "fxgraph_cache_miss": int(ind.get("fxgraph_cache_miss", 0)),
    }


def prepare(case: Case, opts: RunOptions) -> tuple[Workload, Any]:
    """The workload and its fp32 eager reference output."""
    device = torch.device(case.device)
    wl = build_workload(
        case.spec, case.size, device, batch=opts.batch, seed=opts.seed, checkpoint=opts.checkpoint, **dict(case.options)
    )
    return wl, reference_output(wl)


def count_flops(wl: Workload) -> tuple[flops.FlopCount | None, str | None]:
    """Model FLOPs of the eager fp32 step, or why FlopCounterMode could not count them."""
    try:
        return flops.count_step_flops(wl.module, wl.inputs, step_kind=wl.spec.step_kind), None
    except Exception as exc:  # noqa: BLE001 - a model FlopCounterMode cannot run is still benchmarked
        return None, f"{type(exc).__name__}: {exc}"


def convert(wl: Workload, variant: Variant) -> tuple[Converted, Converted, float]:
    """(prepared, converted, seconds): the variant's in-place conversions, then its compile / graph / engine."""
    t0 = time.perf_counter()
    prepared = variant.prepare(wl.module, wl.inputs)
    converted = variant.finish(prepared)
    return prepared, converted, time.perf_counter() - t0


def build_case(
    case: Case,
    opts: RunOptions,
    *,
    prepared: tuple[Workload, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuiltCase:
    """Workload and reference output, FLOP count, conversion and the step, in that order."""
    say = progress or (lambda _: None)
    device = bind(case.device)
    if prepared is None:
        say("building the model and its fp32 eager reference output")
    wl, ref = prepared or prepare(case, opts)
    from torch._dynamo.utils import counters

    counters.clear()
    # Counted before the variant changes the module in place.
    if opts.count_flops:
        say("counting FLOPs")
    flop_count, flops_error = count_flops(wl) if opts.count_flops else (None, None)
    say(f"applying {case.variant}")
    pre, conv, convert_s = convert(wl, case.variant_obj)
    step = make_step(wl, conv.module, conv.inputs, case.variant_obj.context(device.type))
    return BuiltCase(
        case=case,
        device=device,
        workload=wl,
        reference=ref,
        flop_count=flop_count,
        flops_error=flops_error,
        prepared=pre,
        converted=conv,
        convert_s=convert_s,
        step=step,
    )


def first_call_phase(variant: Variant) -> str:
    """What a variant's first call does, for the progress display."""
    if variant.uses_cuda_graphs:
        return "first call: compiling and capturing CUDA graphs" if variant.compiles else "first call: capturing"
    return "first call: compiling" if variant.compiles else "first call"


def measure_sampled(
    step: Callable[[], Any],
    device: torch.device,
    opts: RunOptions,
    progress: Callable[[str], None] | None = None,
    *,
    first_call: str = "first call",
) -> tuple[Measurement, telemetry.TelemetrySampler | None]:
    """`measure` under the options' stop and warm-up rules, with the telemetry sampler running."""
    sampler = (
        telemetry.TelemetrySampler(device, interval_s=opts.telemetry_interval_s) if opts.telemetry_interval_s else None
    )
    probe = None
    if opts.drop_throttled and device.type == "cuda":
        probe, why_not = throttle.open_probe(device.index or 0)
        if probe is None:
            telemetry.notice_once("throttle", f"perfgate: throttled rounds cannot be detected: {why_not}")
    if sampler is not None:
        sampler.start()
    try:
        reference = reference_step() if opts.reference and device.type == "cpu" else None
        m = measure(
            step,
            device,
            stop=opts.stop,
            warmup=opts.warmup,
            progress=progress,
            reference=reference,
            first_call=first_call,
            probe=probe,
        )
    finally:
        if sampler is not None:
            sampler.stop()
        if probe is not None:
            probe.close()
    return m, sampler


def case_record(built: BuiltCase, m: Measurement, opts: RunOptions, telemetry_summary: Telemetry | None) -> CaseRecord:
    """The typed record of one measurement: what ran, timings, memory, accuracy, throughput, FLOPs."""
    case, wl, conv, device, variant = built.case, built.workload, built.converted, built.device, built.variant
    tol = tolerance_for(case.variant, opts.tolerances)
    summary = m.summary
    throughput = {unit: n / (summary["median_ms"] / 1e3) for unit, n in wl.throughput.items()}
    graphs = variant.uses_cuda_graphs  # its peak the reserved one (PeakMemory.gated says why)
    if built.flop_count is not None:
        flop_fields = flops.flops_extra_info(built.flop_count, summary["median_ms"], device, conv.info)
    else:
        flop_fields = {"flops_error": built.flops_error} if built.flops_error else {}
    return CaseRecord(
        model=case.model,
        size=case.size,
        variant=case.variant,
        options=dict(wl.options),
        device=str(device),
        dtype=conv.info.get("dtype", "float32"),
        params=wl.params,
        step_kind=wl.spec.step_kind,
        convert_s=built.convert_s,
        first_call_s=m.first_call_s,
        warmup_rounds=m.warmup_rounds,
        rounds=len(m.samples_ms),
        stop=m.stop,
        timer=m.timer,
        samples_ms=m.samples_ms,
        tail_note=tail_note(len(m.samples_ms)),
        peak_mem_mib=m.memory.gated(graphs),
        reserved_mem_mib=m.memory.reserved_mem_mib,
        mem_method="cuda_reserved (graph pool)" if graphs else m.memory.method,
        accuracy=accuracy.metrics(m.output, built.reference, kind=wl.output_kind),
        tolerance={"rel_l2": tol.rel_l2, "cosine": tol.cosine, "psnr_db": tol.psnr_db},
        throughput=throughput,
        unit=wl.unit,
        items_per_step=dict(wl.throughput),
        fps=throughput["frames"] if wl.unit == "frames" else None,
        telemetry=telemetry_summary,
        throttle=m.throttle,
        contention_cores=m.contention_cores,
        **_reference_fields(m),
        **flop_fields,
        **{k: v for k, v in conv.info.items() if k != "dtype"},
        **summary,
    )


def _reference_fields(m: Measurement) -> dict[str, Any]:
    """A CPU case's reference workload, timed in the same rounds, and the ratio the CPU gate tests."""
    if not m.reference_ms:
        return {}
    return {
        "reference_ms": m.reference_ms,
        "reference_median_ms": float(np.median(m.reference_ms)),
        "normalised_median": float(np.median(ratios(m.samples_ms, m.reference_ms))),
    }


def compile_facts(built: BuiltCase, opts: RunOptions, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """What compiling cost and did: CUDA-graph skips, graph breaks, cache hits, a warm recompile."""
    from torch._dynamo.utils import counters

    variant = built.variant
    skips = int(counters["inductor"].get("cudagraph_skips", 0))
    if skips and variant.uses_cuda_graphs:
        raise VariantError(
            f"inductor skipped CUDA graphs {skips}x (mutated inputs?); timing it would time plain compile"
        )
    out: dict[str, Any] = {"cudagraph_skips": skips, "graph_breaks": _graph_breaks(), "compile_cache": _cache_hits()}
    if opts.warm_compile:
        if progress:
            progress("compiling again against the warm inductor cache (warm compile time)")
        out["warm_compile_s"] = warm_compile_s(built.workload, variant, built.prepared, built.device)
    return out


def measure_case(built: BuiltCase, opts: RunOptions, *, progress: Callable[[str], None] | None = None) -> CaseResult:
    """Measure a built case and fill its record."""
    m, sampler = measure_sampled(built.step, built.device, opts, progress, first_call=first_call_phase(built.variant))
    rec = case_record(built, m, opts, sampler.summary() if sampler is not None else None)
    later: dict[str, Any] = {}  # measured after the record's figures: the energy window, compiling's facts
    if opts.energy_window_s > 0:
        later |= energy.case_energy(built.step, built.device, rec.items_per_step, min_window_s=opts.energy_window_s)
    if built.variant.compiles:
        later |= compile_facts(built, opts, progress)
    rec = replace(rec, **later)
    return CaseResult(
        case=built.case,
        measurement=m,
        record=rec,
        step=built.step,
        timeline=sampler.timeline() if sampler is not None else None,
    )


def run_case(
    case: Case,
    opts: RunOptions = RunOptions(),
    *,
    progress: Callable[[str], None] | None = None,
    prepared: tuple[Workload, Any] | None = None,
) -> CaseResult:
    """One case end to end: the suite's pipeline, and the profiler's (which keeps the BuiltCase)."""
    isolate(bind(case.device))  # CUDA: events, side streams and graph capture use the current device
    return measure_case(build_case(case, opts, prepared=prepared, progress=progress), opts, progress=progress)


def warm_compile_s(wl: Workload, variant: Variant, prepared: Converted, device: torch.device) -> float:
    """First-call time of a second compile after a dynamo reset: the inductor cache is warm now."""
    torch._dynamo.reset()
    conv = variant.finish(prepared)
    step = make_step(wl, conv.module, conv.inputs, variant.context(device.type))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0
