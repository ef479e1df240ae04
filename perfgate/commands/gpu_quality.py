"""`perfgate gpu-quality`: the GPU gate's detection table in one run (perfgate.quality.gpu_quality)."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfgate.commands import CommandError

HELP = "measure how often the GPU gates catch sized GPU- and host-side slowdowns and alarm on unchanged code"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (a rehearsal; default: cuda if available)")
    p.add_argument("--out", type=Path, required=True, help="folder for quality.json and quality.md")
    p.add_argument(
        "--cases",
        default=None,
        help="comma-separated MODEL:SIZE:VARIANT (SIZE empty: the device's default); default: PhysicsNeMo block "
        "fp32 and bf16, the world model eager and CUDA graphs (GPU), the PhysicsNeMo block tiny (CPU)",
    )
    p.add_argument("--repeats", type=int, default=4, help="comparisons per condition and case (default 4)")
    p.add_argument(
        "--unchanged-repeats",
        type=int,
        default=None,
        help="comparisons of unchanged code per case (default: --repeats); more bound the false-alarm rate",
    )
    p.add_argument(
        "--kinds",
        default="unchanged,gpu,host",
        help="which conditions to compare, comma-separated: unchanged, gpu (GPU-side slowdowns: every Nth F.linear "
        "twice, added kernels), host (host-side), kernel (a slower kernel: every Nth F.linear twice as wide in one "
        "launch, the same kernel count) (default unchanged,gpu,host)",
    )
    p.add_argument("--rounds", type=int, default=30, help="timed rounds per side of a comparison (default 30)")
    p.add_argument("--passes", type=int, default=3, help="passes of the stored record, its noise (default 3)")
    p.add_argument("--profile-steps", type=int, default=10, help="steps per profiler window (default 10)")
    p.add_argument(
        "--device-rounds",
        type=int,
        default=10,
        help="blocks of the device-time A/B window, each --device-block-steps calls of the unchanged and of the "
        "current step, interleaved (default 10)",
    )
    p.add_argument(
        "--device-block-steps",
        type=int,
        default=5,
        help="steps of each side per block of the device-time A/B window: a slowdown that hits one step in N shows "
        "in every block when N divides it (default 5)",
    )
    p.add_argument("--sizes", default="1,2,5", help="slowdown sizes in %% of the step (default 1,2,5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the round order (default 0)")
    p.add_argument(
        "--traces",
        type=Path,
        default=None,
        help="keep each case's profiler trace of 3 steps in this folder (CASE.trace.json.gz; read by perfgate's "
        "device-time tests)",
    )


def _cases(value: str) -> tuple[tuple[str, str | None, str], ...]:
    out = []
    for item in value.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not parts[0] or not parts[2]:
            raise CommandError(f"--cases {item!r}: write MODEL:SIZE:VARIANT (SIZE may be empty)")
        out.append((parts[0], parts[1] or None, parts[2]))
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    from perfgate import files
    from perfgate.commands import load_models
    from perfgate.measure.device import default_device, device_error, resolve
    from perfgate.output.gpu_quality import detection_markdown
    from perfgate.quality import gpu_quality as gq

    device = args.device or default_device()
    if (err := device_error(device)) is not None:
        raise CommandError(f"--device {err}")
    device = str(resolve(device))
    try:
        sizes = tuple(float(x) for x in args.sizes.split(","))
    except ValueError:
        raise CommandError(f"--sizes {args.sizes!r}: write percentages, e.g. 1,2,5") from None
    if not sizes or any(not 0 < k <= 100 for k in sizes):
        raise CommandError(f"--sizes {args.sizes!r}: each size must be in (0, 100]")
    cases = _cases(args.cases) if args.cases else (gq.CPU_CASES if device == "cpu" else gq.GPU_CASES)
    try:
        plan = gq.Plan(
            device=device,
            cases=cases,
            sizes_pct=sizes,
            repeats=args.repeats,
            unchanged_repeats=args.unchanged_repeats,
            kinds=tuple(k.strip() for k in args.kinds.split(",")),
            rounds=args.rounds,
            passes=args.passes,
            profile_steps=args.profile_steps,
            device_rounds=args.device_rounds,
            device_block_steps=args.device_block_steps,
            seed=args.seed,
            trace_dir=str(args.traces) if args.traces else None,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    load_models()
    args.out.mkdir(parents=True, exist_ok=True)

    def write(run: gq.QualityRun) -> str:  # after each case, so a run cut short keeps its cases
        files.write_json(args.out / "quality.json", run.to_json())
        text = detection_markdown(run)
        files.write_text(args.out / "quality.md", text)
        return text

    result = gq.run(plan, _builder(device), progress=lambda m: print(f"gpu-quality: {m}", flush=True), checkpoint=write)
    text = write(result)
    print("\n" + text + f"\ngpu-quality: written to {args.out}")
    return 0


def _builder(device: str):
    """Build a case's step as a benchmark run does (no FLOP count, no warm re-compile)."""
    from perfgate.cases.runner import RunOptions, build_case
    from perfgate.cases.selection import expand_cases

    opts = RunOptions(count_flops=False, warm_compile=False, telemetry_interval_s=None, energy_window_s=0.0)

    def build(spec: tuple[str, str | None, str]):
        model, size, variant = spec
        found = expand_cases(device, models=[model], sizes_=[size] if size else None, variants=[variant])
        if not found:
            raise ValueError(f"no case {model}:{size or ''}:{variant} on {device}")
        case = found[0]
        if (why := case.skip_reason()) is not None:
            raise ValueError(why)
        built = build_case(case, opts)
        return case.id, built.step, case.variant_obj.uses_cuda_graphs

    return build
