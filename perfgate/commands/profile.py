"""`perfgate profile MODEL`: benchmark, layer breakdown, memory, precision comparison, trace and
suggestions in one run folder (report.json + report.html). The logic is perfgate.profile."""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfgate.profile.report import ProfileReport

HELP = "profile one model: benchmark, layer breakdown, memory, precisions, torch trace, suggestions"

# CLI flags for the shape options the seeds sweep; each maps to the model family's option name.
SHAPE_FLAGS = {"img_size": "--img-size", "num_frames": "--num-frames", "cache_frames": "--cache-frames"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="registered model name (see `perfgate models`)")
    p.add_argument("--size", default=None, help="size preset (default: the device's default size)")
    p.add_argument(
        "--variant", default="baseline", help="optimisation variant to profile (default baseline: eager fp32)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    p.add_argument("--iterations", type=int, default=50, help="timed iterations of the benchmark (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up iterations after the first call (default 5)")
    p.add_argument("--batch", type=int, default=1, help="batch multiplier passed to the model (default 1)")
    p.add_argument("--img-size", type=int, default=None, help="model option img_size (V-JEPA 2)")
    p.add_argument("--num-frames", type=int, default=None, help="model option num_frames (V-JEPA 2)")
    p.add_argument(
        "--cache-frames",
        type=int,
        default=None,
        help="model option cache_frames: KV-cache length in frames (Owl world model)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any model option, repeatable (values parsed as Python literals)",
    )
    p.add_argument(
        "--sweep",
        default=None,
        metavar="KEY=V1,V2",
        help="profile each value of one option (or size, batch, variant) in one run folder",
    )
    p.add_argument(
        "--skip-detailed",
        action="store_true",
        help="quick benchmark only: benchmark and memory, no breakdown, precisions or trace",
    )
    p.add_argument(
        "--precisions", default="fp32,bf16,fp16", help="precisions to compare with autocast (default fp32,bf16,fp16)"
    )
    p.add_argument("--layer-rounds", type=int, default=10, help="rounds of the layer breakdown (default 10)")
    p.add_argument("--trace-steps", type=int, default=3, help="steps in the torch profiler trace (default 3)")
    p.add_argument("--top-ops", type=int, default=15, help="operators listed by self time (default 15)")
    p.add_argument(
        "--telemetry-interval-ms", type=float, default=100.0, help="telemetry sampling interval (default 100 ms)"
    )
    p.add_argument(
        "--torch-trace",
        default=None,
        metavar="DIR",
        help="also write TORCH_TRACE compile logs to DIR for tlparse (re-runs the command with TORCH_TRACE set)",
    )
    p.add_argument(
        "--nvtx", action="store_true", help="emit NVTX ranges per step, module and op for Nsight Systems (CUDA)"
    )
    p.add_argument("--checkpoint", default=None, help="checkpoint to load strictly into the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", default=".perfgate/profiles", help="parent folder of the run folder (default .perfgate/profiles)"
    )


def parse_value(text: str) -> Any:
    """A Python literal (256, 0.5, None, (8, 8)) or else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_options(items: list[str]) -> dict[str, Any]:
    from perfgate.commands import CommandError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--option {item!r}: write it as KEY=VALUE, e.g. --option img_size=256")
        out[key.strip()] = parse_value(value.strip())
    return out


def parse_sweep(text: str | None) -> tuple[str, tuple[Any, ...]] | None:
    from perfgate.commands import CommandError

    if text is None:
        return None
    key, sep, values = text.partition("=")
    vals = tuple(parse_value(v.strip()) for v in values.split(",") if v.strip())
    if not sep or not key.strip() or not vals:
        raise CommandError(f"--sweep {text!r}: write it as KEY=V1,V2, e.g. --sweep img_size=256,384")
    return key.strip().replace("-", "_"), vals


def command_line(args: argparse.Namespace) -> str:
    """The `perfgate profile ...` line that reproduces this run (without --torch-trace)."""
    parts = ["perfgate", "profile", args.model]
    defaults = {
        "size": None,
        "variant": "baseline",
        "device": None,
        "iterations": 50,
        "warmup": 5,
        "batch": 1,
        "img_size": None,
        "num_frames": None,
        "cache_frames": None,
        "sweep": None,
        "precisions": "fp32,bf16,fp16",
        "layer_rounds": 10,
        "trace_steps": 3,
        "top_ops": 15,
        "telemetry_interval_ms": 100.0,
        "checkpoint": None,
        "seed": 0,
        "out": ".perfgate/profiles",
    }
    for key, default in defaults.items():
        value = getattr(args, key)
        if value != default:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    for item in args.option:
        parts += ["--option", item]
    for flag in ("skip_detailed", "nvtx"):
        if getattr(args, flag):
            parts.append(f"--{flag.replace('_', '-')}")
    return " ".join(shlex.quote(p) for p in parts)


def rerun_with_torch_trace(args: argparse.Namespace) -> int:
    """TORCH_TRACE is read when torch sets up its logging at import: run the profile again in a
    child process that has it set, as the world-model guide does."""
    trace_dir = str(Path(args.torch_trace).resolve())
    argv = shlex.split(command_line(args))[1:]  # drop "perfgate"
    env = {**os.environ, "TORCH_TRACE": trace_dir}
    print(f"perfgate profile: re-running with TORCH_TRACE={trace_dir}", file=sys.stderr, flush=True)
    return subprocess.call([sys.executable, "-m", "perfgate", *argv], env=env)


def run(args: argparse.Namespace) -> int:
    from perfgate.commands import CommandError
    from perfgate.exitcodes import UNAVAILABLE as EXIT_UNAVAILABLE
    from perfgate.extras import check

    check(("jinja2", "matplotlib"), "perfgate profile's report.html")  # before minutes of profiling, not after
    if args.torch_trace and os.environ.get("TORCH_TRACE") != str(Path(args.torch_trace).resolve()):
        return rerun_with_torch_trace(args)

    from perfgate.commands import load_models
    from perfgate.measure.device import default_device
    from perfgate.profile.config import ProfileConfig, ProfileError, ProfileUnavailable
    from perfgate.profile.run import run_profile

    load_models()  # pyproject.toml [tool.perfgate] registries and model_files of this directory
    options = parse_options(args.option)
    for key in SHAPE_FLAGS:
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    cfg = ProfileConfig(
        model=args.model,
        size=args.size,
        variant=args.variant,
        device=args.device or default_device(),
        iterations=args.iterations,
        warmup=args.warmup,
        batch=args.batch,
        options=options,
        sweep=parse_sweep(args.sweep),
        skip_detailed=args.skip_detailed,
        precisions=tuple(p.strip() for p in args.precisions.split(",") if p.strip()),
        layer_rounds=args.layer_rounds,
        trace_steps=args.trace_steps,
        top_ops=args.top_ops,
        telemetry_interval_s=args.telemetry_interval_ms / 1e3,
        nvtx=args.nvtx,
        seed=args.seed,
        checkpoint=args.checkpoint,
        out_dir=Path(args.out),
        command=command_line(args),
    )
    try:
        run_dir, report = run_profile(cfg)
    except ProfileError as exc:
        raise CommandError(str(exc)) from None
    except ProfileUnavailable as exc:
        raise CommandError(str(exc), EXIT_UNAVAILABLE) from None
    for line in summary_lines(report, run_dir):
        print(line)
    return 0


def summary_lines(report: ProfileReport, run_dir: Path) -> list[str]:
    """The terminal summary: the guide's benchmark block per point, then where everything is."""
    lines = [f"perfgate profile {report.model} on {report.hardware} ({report.device})"]
    for p in report.points:
        b = p.benchmark
        head = f"{p.size} {p.variant}" + (f" [{p.label}]" if p.label else "")
        fps = f"FPS {b.fps:.2f}" if b.fps is not None else f"steps/s {b.steps_per_s:.2f}"
        lines += [
            "",
            f"{head}: {p.params:,} parameters",
            f"  Mean {b.mean_ms:.3f} ms  Median {b.median_ms:.3f} ms  Std {b.std_ms:.3f} ms  Min "
            f"{b.min_ms:.3f} ms  Max {b.max_ms:.3f} ms  {fps}",
        ]
        f = p.flops
        if f:
            share = (
                f" ({f.peak_share:.1%} of a measured {f.peak_tflops:.3g} TFLOP/s {f.peak_dtype} peak)"
                if f.peak_share is not None
                else f" (no share of peak: {f.peak_note})"
                if f.peak_note
                else ""
            )
            lines.append(f"  {f.gflop_per_step:.4g} GFLOP/step, {f.achieved_tflops:.4g} TFLOP/s{share}")
        lines.append(f"  peak memory {p.memory.peak_mem_mib:.1f} MiB ({p.memory.method})")
        if p.unreliable:
            lines.append(f"  UNRELIABLE: {p.unreliable}")
        for s in p.suggestions:
            lines.append(f"  [{s.severity}] {s.rule}: {s.finding}")
    lines += ["", f"report: {run_dir / 'report.html'}", f"json:   {run_dir / 'report.json'}"]
    return lines
