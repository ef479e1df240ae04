"""One benchmark case end to end, without pytest: build, convert, check accuracy, measure.

`run_case` returns a `CaseResult` whose `extra_info` is what lands in pytest-benchmark's JSON.
Everything a case produces is data; the pytest plugin only feeds it to the `benchmark` fixture.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from perfgate import accuracy, flops, telemetry
from perfgate.device import bind
from perfgate.measure import Measurement, StopRule, WarmupRule, measure, reference_step
from perfgate.stats import ratios
from perfgate.steps import is_training
from perfgate.variants import Converted, Env, Variant, VariantError, get_variant
from perfgate.workload import ModelSpec, Workload, build_workload, get_model, make_step, reference_output


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
        if reason is None and is_training(self.spec.step) and self.variant_obj.inference_only:
            # CUDA graphs and TensorRT capture under inference mode (no grad); torchao freezes
            # quantised weights, so SGD would not update them: not the same training step.
            reason = f"{self.variant} is an inference-only optimisation; {self.model} times a training step"
        return reason


@dataclass(kw_only=True)
class RunOptions:
    stop: StopRule = StopRule()
    warmup: WarmupRule = WarmupRule()
    seed: int = 0
    batch: int = 1
    checkpoint: str | None = None
    tolerances: dict[str, accuracy.Tolerance] = field(default_factory=dict)
    fail_on_graph_break: bool = False
    warm_compile: bool = True  # also time a second compile against the warm inductor cache
    telemetry_interval_s: float | None = 0.1  # background GPU/CPU sampler during measure(); None: off
    count_flops: bool = True  # GFLOP per step, achieved TFLOP/s and the share of a measured matmul peak
    reference: bool = True  # CPU: time the reference workload in every round (machine-speed normalisation)


@dataclass(kw_only=True)
class CaseResult:
    case: Case
    measurement: Measurement
    extra_info: dict[str, Any]
    accuracy_violations: list[str]
    step: Callable[[], Any] | None = field(default=None, repr=False)  # for evidence traces of this case


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
    return {"fxgraph_cache_hit": int(ind.get("fxgraph_cache_hit", 0)), "fxgraph_cache_miss": int(ind.get("fxgraph_cache_miss", 0))}


def prepare(case: Case, opts: RunOptions) -> tuple[Workload, Any]:
    """The workload and its fp32 eager reference output."""
    device = torch.device(case.device)
    wl = build_workload(case.spec, case.size, device, batch=opts.batch, seed=opts.seed, checkpoint=opts.checkpoint, **dict(case.options))
    return wl, reference_output(wl)


def run_case(
    case: Case,
    opts: RunOptions = RunOptions(),
    *,
    progress: Callable[[str], None] | None = None,
    prepared: tuple[Workload, Any] | None = None,
) -> CaseResult:
    device = bind(case.device)  # CUDA: events, side streams and graph capture use the current device
    isolate(device)
    wl, ref = prepared or prepare(case, opts)
    variant = case.variant_obj
    from torch._dynamo.utils import counters

    counters.clear()
    # Model FLOPs of the eager fp32 step, counted before a variant changes the module in place.
    flop_count, flops_error = None, None
    if opts.count_flops:
        try:
            flop_count = flops.count_step_flops(wl.module, wl.inputs, step=wl.spec.step)
        except Exception as exc:  # noqa: BLE001 - a model FlopCounterMode cannot run is still benchmarked
            flops_error = f"{type(exc).__name__}: {exc}"
    t0 = time.perf_counter()
    prepared_module = variant.prepare(wl.module, wl.inputs)
    conv = variant.finish(prepared_module)
    convert_s = time.perf_counter() - t0
    step = make_step(wl, conv.module, conv.inputs, variant.context(device.type))
    sampler = telemetry.TelemetrySampler(device, interval_s=opts.telemetry_interval_s) if opts.telemetry_interval_s else None
    if sampler is not None:
        sampler.start()
    try:
        reference = reference_step() if opts.reference and device.type == "cpu" else None
        m = measure(step, device, stop=opts.stop, warmup=opts.warmup, progress=progress, reference=reference)
    finally:
        if sampler is not None:
            sampler.stop()

    acc = accuracy.metrics(m.output, ref, kind=wl.output_kind)
    tol = accuracy.tolerance_for(case.variant, opts.tolerances)
    violations = accuracy.violations(acc, tol)

    info: dict[str, Any] = {
        "model": case.model,
        "size": case.size,
        "variant": case.variant,
        "options": {k: v for k, v in wl.options.items()},
        "device": str(device),
        "dtype": conv.info.get("dtype", "float32"),
        "params": wl.params,
        "step": wl.spec.step,
        "convert_s": convert_s,
        "first_call_s": m.first_call_s,
        "warmup_rounds": m.warmup_rounds,
        "rounds": len(m.samples_ms),
        "stop": m.stop,
        "timer": m.timer,
        "peak_mem_mib": m.memory.peak_mem_mib,
        "reserved_mem_mib": m.memory.reserved_mem_mib,
        "mem_method": m.memory.method,
        "accuracy": acc,
        "tolerance": {"rel_l2": tol.rel_l2, "cosine": tol.cosine, "psnr_db": tol.psnr_db},
        "samples_ms": m.samples_ms,
        **({"reference_ms": m.reference_ms, "reference_median_ms": float(np.median(m.reference_ms)),
            "normalised_median": float(np.median(ratios(m.samples_ms, m.reference_ms)))} if m.reference_ms else {}),
        **{k: v for k, v in conv.info.items() if k != "dtype"},
        **m.summary,
    }
    med_s = info["median_ms"] / 1e3
    info["throughput"] = {unit: n / med_s for unit, n in wl.throughput.items()}
    info["unit"] = wl.unit
    info["items_per_step"] = wl.throughput
    if wl.unit == "frames":
        info["fps"] = info["throughput"]["frames"]
    if sampler is not None:
        info["telemetry"] = sampler.summary()
    if flop_count is not None:
        info.update(flops.flops_extra_info(flop_count, info["median_ms"], device, conv.info))
    elif flops_error:
        info["flops_error"] = flops_error
    if variant.uses_cuda_graphs:
        # Activations live in the graph's private pool, reserved but not allocated during replay:
        # the reserved peak is the honest figure for graph variants.
        info["peak_mem_mib"] = m.memory.reserved_mem_mib
        info["mem_method"] = "cuda_reserved (graph pool)"
    if variant.compiles:
        skips = int(counters["inductor"].get("cudagraph_skips", 0))
        info["cudagraph_skips"] = skips
        if skips and variant.uses_cuda_graphs:
            raise VariantError(f"inductor skipped CUDA graphs {skips}x (mutated inputs?); timing it would time plain compile")
        info["graph_breaks"] = _graph_breaks()
        info["compile_cache"] = _cache_hits()
        if opts.warm_compile:
            info["warm_compile_s"] = warm_compile_s(wl, variant, prepared_module, device)
        if opts.fail_on_graph_break and info["graph_breaks"]:
            violations.append(f"{info['graph_breaks']} graph break(s) (--perfgate-fail-on-graph-break)")
    return CaseResult(case=case, measurement=m, extra_info=info, accuracy_violations=violations, step=step)


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
