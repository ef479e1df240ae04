"""`perfgate health`: is this runner's GPU fit to measure? (perfgate.measure.health has the checks.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfgate.commands import CommandError
from perfgate.exitcodes import OK as EXIT_OK
from perfgate.exitcodes import UNAVAILABLE as EXIT_UNAVAILABLE

HELP = "check the GPU before a gated run: persistence mode, clocks, other processes, ECC errors, free memory"


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage between 0 and 100")
    return value / 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=None,
        help="cuda or cuda:N (default: the --perfgate-device of the pytest arguments, else cuda if available, "
        "else cpu, which has nothing to check)",
    )
    p.add_argument(
        "--min-free-pct", type=_share, default=0.9, metavar="PCT", help="least free GPU memory, %% (default 90)"
    )
    p.add_argument(
        "--min-clock-pct",
        type=_share,
        default=0.75,
        metavar="PCT",
        help="least SM application clock, %% of the maximum (default 75, the gate's throttle threshold)",
    )
    p.add_argument("--warn", action="store_true", help="report failed checks but exit 0")
    p.add_argument("--json", type=Path, default=None, help="also write the checks as JSON here")
    p.add_argument("--markdown", type=Path, default=None, help="when a check fails, write its Markdown summary here")
    p.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help="after --: the run's pytest arguments, whose --perfgate-device is the device to check",
    )


def run(args: argparse.Namespace) -> int:
    from perfgate import files
    from perfgate.measure import health
    from perfgate.measure.device import default_device, device_error, selection_device
    from perfgate.output.health import text_lines

    device = args.device or selection_device([a for a in args.pytest_args if a != "--"]) or default_device()
    try:
        import torch

        kind = torch.device(device).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise CommandError(f"--device {device!r} is not a device perfgate measures: use cpu, cuda or cuda:N")
    if (err := device_error(device)) is not None:
        print(f"perfgate health: cannot run here: {err}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    result = health.check_device(device, min_free_share=args.min_free_pct, clock_ratio_min=args.min_clock_pct)
    print("\n".join(text_lines(result)), file=sys.stderr)
    if args.json:
        files.write_json(args.json, result.as_json())
    if result.ok:
        return EXIT_OK
    if args.markdown:
        from perfgate.output import markdown

        files.write_text(args.markdown, markdown.health_summary(result))
    if args.warn:
        print("perfgate health: the GPU failed a check; going on anyway (--warn)", file=sys.stderr)
        return EXIT_OK
    print("perfgate health: cannot run here: the GPU failed a check (fixes above)", file=sys.stderr)
    return EXIT_UNAVAILABLE
