"""`perfgate profile MODEL`: one run folder with everything the seeds' profilers report.

For each point of an optional sweep (one option, several values) it reports:
1. the simple benchmark: mean, median, std, min, max, FPS, with telemetry sampled throughout
   and FLOPs per step against a matmul peak measured on this machine: the runner's pipeline
   (`perfgate.cases.runner.build_case` / `measure_case`) with fixed round counts, read from its record;
2. the memory profile of one step (peak, weights, activations, headroom);
3. a layer-by-layer breakdown of the forward (`layers`);
4. a precision comparison: fp32 against bf16 and fp16 autocast (`precision`);
5. a torch.profiler trace and the top operators by self time; optionally NVTX ranges for Nsight
   Systems and a TORCH_TRACE folder for tlparse (`trace`);
6. suggestions from the rules in `perfgate.profile.suggest`.
`--skip-detailed` keeps 1 and 2 only (the guide's quick benchmark). The run folder holds
report.json, a self-contained report.html (rendered by perfgate.output.html) and the traces; progress goes to stderr.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

import torch

from perfgate import files, gate
from perfgate.cases import runner
from perfgate.cases.conversions import Env, VariantError
from perfgate.cases.workload import CheckpointError
from perfgate.gate.settings import GateSettings
from perfgate.measure.core import StopRule
from perfgate.measure.memory import MIB
from perfgate.profile import suggest
from perfgate.profile.config import (
    ProfileConfig,
    ProfileError,
    ProfilePoint,
    ProfileUnavailable,
    check_config,
    check_point,
    fixed_rounds,
    points,
    warmup_rounds,
)
from perfgate.profile.layers import layer_breakdown
from perfgate.profile.memory import memory_profile
from perfgate.profile.precision import precision_comparison
from perfgate.profile.report import BenchmarkTiming, FlopsSection, PointReport, ProfileReport, Sweep
from perfgate.profile.trace import nvtx_section, torch_trace_section, trace_steps
from perfgate.record import CaseRecord

# The record's FLOPs and roofline fields, as flops.flops_extra_info fills them.
ROOFLINE_FIELDS = (
    "gflop_per_step",
    "achieved_tflops",
    "peak_tflops",
    "peak_dtype",
    "peak_share",
    "peak_basis",
    "peak_note",
    "attention_gflop",
    "flops_method",
)


class Progress:
    """`perfgate profile: [3/7] layer breakdown` lines on stderr, with the elapsed time."""

    def __init__(self, total: int, stream: TextIO | None = None, prefix: str = "perfgate profile") -> None:
        self.total, self.i, self.t0 = total, 0, time.perf_counter()
        self.stream, self.prefix = stream, prefix

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    def stage(self, name: str) -> None:
        self.i += 1
        self._write(f"{self.prefix}: [{self.i}/{self.total}] {name} ({time.perf_counter() - self.t0:.1f} s)")

    def note(self, text: str) -> None:
        self._write(f"{self.prefix}:       {text}")


def _stages(cfg: ProfileConfig) -> int:
    return 3 + (0 if cfg.skip_detailed else 3 + int(cfg.nvtx))


def run_options(cfg: ProfileConfig, pt: ProfilePoint) -> runner.RunOptions:
    """The suite's options with the guide's fixed round counts. No reference workload: a profile
    compares no runs, so nothing needs machine-speed normalisation, and timing the reference every
    round would double a CPU profile; no warm recompile: the profile reports no warm compile time."""
    return runner.RunOptions(
        stop=fixed_rounds(cfg.iterations),
        warmup=warmup_rounds(cfg.warmup),
        seed=cfg.seed,
        batch=pt.batch,
        checkpoint=cfg.checkpoint,
        telemetry_interval_s=cfg.telemetry_interval_s,
        reference=False,
        warm_compile=False,
    )


def precision_options(cfg: ProfileConfig, opts: runner.RunOptions) -> runner.RunOptions:
    """Up to `iterations` rounds per precision within its budget; no telemetry, FLOPs or reference."""
    stop = StopRule(min_rounds=min(5, cfg.iterations), max_rounds=cfg.iterations, budget_s=cfg.precision_budget_s)
    return dataclasses.replace(
        opts, stop=stop, warmup=warmup_rounds(min(cfg.warmup, 3)), telemetry_interval_s=None, count_flops=False
    )


def benchmark_section(rec: CaseRecord) -> BenchmarkTiming:
    """The guide's simple benchmark (mean, median, std, min, max, FPS, p90) from the case record."""
    return BenchmarkTiming(
        n=rec.n,
        mean_ms=rec.mean_ms,
        median_ms=rec.median_ms,
        std_ms=rec.std_ms,
        min_ms=rec.min_ms,
        max_ms=rec.max_ms,
        p90_ms=rec.p90_ms,
        steps_per_s=1e3 / rec.mean_ms if rec.mean_ms else None,  # the guide's "FPS" is forward passes per second
        throughput=rec.throughput,
        fps=rec.fps,
        first_call_s=rec.first_call_s,
        warmup_rounds=rec.warmup_rounds,
        timer=rec.timer,
        samples_ms=rec.samples_ms,
        contention_cores=rec.contention_cores,
    )


def flops_section(rec: CaseRecord, built: runner.BuiltCase) -> FlopsSection | None:
    """The record's FLOPs and roofline, with the count's split by module and operator."""
    count = built.flop_count
    if count is None:
        return None
    return FlopsSection(
        **{k: getattr(rec, k) for k in ROOFLINE_FIELDS},
        by_module_gflop={k: v / 1e9 for k, v in count.by_module.items()},
        by_op_gflop={k: v / 1e9 for k, v in count.by_op.items()},
        method=count.method,
    )


def _title(cfg: ProfileConfig, pt: ProfilePoint) -> str:
    return f"{cfg.model} {pt.size}{' ' + pt.label if pt.label else ''} {pt.variant}"


def profile_point(
    pt: ProfilePoint, cfg: ProfileConfig, device: torch.device, run_dir: Path, progress: Progress
) -> PointReport:
    check_point(cfg, pt)
    case = runner.Case(
        model=cfg.model, size=pt.size, variant=pt.variant, device=str(device), options=tuple(pt.options.items())
    )
    reason = case.variant_obj.unavailable(Env.detect(device))
    if reason:
        raise ProfileUnavailable(f"variant {pt.variant!r} cannot run here: {reason}")
    opts = run_options(cfg, pt)
    title = _title(cfg, pt)

    progress.stage(f"{title}: build, FLOPs")
    runner.isolate(device)
    try:
        prepared = runner.prepare(case, opts)
    except CheckpointError as exc:  # names the file, --checkpoint and the fix itself
        raise ProfileError(f"{cfg.model}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{cfg.model}: {exc} (fix --option / --sweep)") from None
    try:
        built = runner.build_case(case, opts, prepared=prepared)
        progress.stage(f"{title}: benchmark ({cfg.iterations} iterations)")
        result = runner.measure_case(built, opts, progress=progress.note)
    except VariantError as exc:
        raise ProfileUnavailable(f"variant {pt.variant!r}: {exc}") from None
    result.record = dataclasses.replace(result.record, unreliable=gate.unreliable_reason(result.record, GateSettings()))
    rec = result.record

    progress.stage(f"{title}: memory")
    memory = memory_profile(built.step, built.converted.module, built.converted.inputs, device)
    point = PointReport(
        label=pt.label,
        size=pt.size,
        batch=pt.batch,
        variant=pt.variant,
        options=rec.options,
        params=rec.params,
        weights_mib_fp32=(rec.params or 0) * 4 / MIB,
        step_kind=rec.step_kind,
        unit=rec.unit,
        items_per_step=rec.items_per_step,
        variant_info=built.converted.info,
        benchmark=benchmark_section(rec),
        flops=flops_section(rec, built),
        flops_error=rec.flops_error,
        telemetry=rec.telemetry,
        telemetry_timeline=result.timeline,
        unreliable=rec.unreliable,
        # against the fp32 eager output, as the suite checks it
        accuracy=rec.accuracy if pt.variant != "baseline" and rec.step_kind == "inference" else None,
        memory=memory,
        suggestions=[],
    )
    if not cfg.skip_detailed:
        point = detailed_sections(point, pt, built, cfg, device, run_dir, progress)
    return dataclasses.replace(point, suggestions=point_suggestions(point, device.type))


def detailed_sections(
    point: PointReport,
    pt: ProfilePoint,
    built: runner.BuiltCase,
    cfg: ProfileConfig,
    device: torch.device,
    run_dir: Path,
    progress: Progress,
) -> PointReport:
    """`point` with its layer breakdown, precision comparison, trace and (asked for) NVTX ranges."""
    title = _title(cfg, pt)
    progress.stage(f"{title}: layer breakdown ({cfg.layer_rounds} rounds)")
    eager = built.prepared
    layers = layer_breakdown(
        eager.module, eager.inputs, device, built.variant.context(device.type), rounds=cfg.layer_rounds
    )
    if built.converted.module is not eager.module:
        layers = dataclasses.replace(
            layers,
            note="hooks cannot see inside a compiled graph or an engine: this is the eager module the variant was "
            "built from",
        )

    progress.stage(f"{title}: precision comparison ({', '.join(cfg.precisions)})")
    opts = precision_options(cfg, run_options(cfg, pt))
    precision = precision_comparison(built, opts, cfg.precisions, note=progress.note)

    progress.stage(f"{title}: torch profiler trace ({cfg.trace_steps} steps)")
    module = built.converted.module if built.converted.module is eager.module else None  # hooks need the eager module
    trace = trace_steps(
        built.step,
        device,
        run_dir / f"trace-{pt.slug}.json",
        steps=cfg.trace_steps,
        top_n=cfg.top_ops,
        module=module,
    )
    trace = dataclasses.replace(
        trace, trace=os.path.relpath(trace.trace, run_dir), ops_table=os.path.relpath(trace.ops_table, run_dir)
    )
    nvtx = None
    if cfg.nvtx:
        progress.stage(f"{title}: NVTX ranges")
        nvtx = nvtx_section(built.step, device, module, cfg.trace_steps, cfg.command, run_dir)
    return dataclasses.replace(point, layers=layers, precision=precision, trace=trace, nvtx=nvtx)


def point_suggestions(point: PointReport, device_type: str) -> list[suggest.Suggestion]:
    """Feed one point's numbers to the rules in perfgate.profile.suggest."""
    layers = point.layers
    main = layers.main_group() if layers else None
    rows = point.precision.rows if point.precision else {}
    gpu_util = point.telemetry.metric("gpu_util_pct") if point.telemetry else None
    return suggest.suggest(
        device_type=device_type,
        blocks_share_=main.share if main else None,
        n_blocks=main.n if main else 0,
        block_std_ms=main.std_ms if main else None,
        attention_share_=layers.attention.share if layers else None,
        patch_embedding_share_=layers.patch_embedding.share if layers else None,
        speedups={p: r.speedup for p, r in rows.items() if r.speedup},
        peak_mem_mib=point.memory.peak_mem_mib,
        headroom=point.memory.headroom,
        gpu_util_mean_pct=gpu_util.mean if gpu_util else None,
        unreliable=point.unreliable,
    )


def new_run_dir(out_dir: Path, cfg: ProfileConfig, first: ProfilePoint) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{cfg.model}-{first.size}-{first.variant}" + (f"-sweep-{cfg.sweep[0]}" if cfg.sweep else "")
    for i in range(1000):
        path = out_dir / (name if i == 0 else f"{name}-{i}")
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ProfileError(
                f"--out {out_dir}: cannot make the run folder there ({files.unwritable_reason(path, exc)}); give a "
                "writable folder"
            ) from None
    raise ProfileError(f"cannot create a run folder under {out_dir}")


def run_profile(cfg: ProfileConfig, *, stream: TextIO | None = None) -> tuple[Path, ProfileReport]:
    """Profile every point of `cfg` and write report.json and report.html into a new run folder."""
    from perfgate.measure.fingerprint import fingerprint, fingerprint_id

    device = check_config(cfg)
    pts = points(cfg)
    for pt in pts:  # fail on a bad size or variant before minutes of profiling
        check_point(cfg, pt)
    run_dir = new_run_dir(Path(cfg.out_dir), cfg, pts[0])
    progress = Progress(total=len(pts) * _stages(cfg) + 1, stream=stream)
    progress.note(f"run folder {run_dir}")
    fp = fingerprint(device)
    created = dt.datetime.now(dt.UTC).isoformat()
    profiled = [profile_point(pt, cfg, device, run_dir, progress) for pt in pts]
    report = ProfileReport(
        schema=1,
        tool="perfgate profile",
        created=created,
        command=cfg.command,
        model=cfg.model,
        device=str(device),
        hardware=fp.get("gpu_name") or fp.get("cpu_model"),
        fingerprint=fp,
        fingerprint_id=fingerprint_id(fp),
        sweep=Sweep(option=cfg.sweep[0], values=list(cfg.sweep[1])) if cfg.sweep else None,
        config={k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        points=profiled,
        torch_trace=torch_trace_section(run_dir),
    )
    progress.stage("writing report.json and report.html")
    write_report(run_dir, report)
    return run_dir, report


def write_report(run_dir: Path, report: ProfileReport) -> None:
    """report.json, the typed report's JSON form (written here only), and report.html rendered from it."""
    from perfgate.output import html

    data = report.to_json()
    files.write_text(run_dir / "report.json", json.dumps(data, indent=2, default=str) + "\n")
    files.write_text(run_dir / "report.html", html.profile_report(data))
