"""`perfgate models`: the registered families with sizes, parameter counts, input shapes and GFLOP."""

from __future__ import annotations

import argparse
import json
from typing import Any

from perfgate.cases.selection import select
from perfgate.cases.workload import MODELS, NO_MODELS, build_module, count_parameters, family, get_model
from perfgate.commands import CommandError, load_models
from perfgate.output.text import text_table

HELP = "list model families: sizes, parameter counts, input shapes and GFLOP per step"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="", help="comma-separated names or globs (default: all)")
    p.add_argument("--sizes", default="", help="comma-separated size presets (default: all)")
    p.add_argument(
        "--no-flops", action="store_true", help="skip counting GFLOP (it runs one forward on the meta device)"
    )
    p.add_argument(
        "--model-file",
        action="append",
        default=[],
        help="python file registering extra models, after pyproject.toml [tool.perfgate] registries and model_files",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def describe(name: str, size: str, *, flops: bool = True) -> dict[str, Any]:
    """Parameter count, input shapes and GFLOP of one size, built on the meta device (no memory)."""
    spec = get_model(name)
    fam = family(spec)
    cfg = fam.CONFIGS[size]
    module = build_module(spec, size, device="meta")
    inputs = fam.example_inputs(cfg, device="meta", **dict(spec.options))
    row: dict[str, Any] = {
        "model": name,
        "size": size,
        "params": count_parameters(module),
        "inputs": [list(t.shape) for t in inputs],
        "throughput": fam.step_info(cfg, **dict(spec.options)),
        "step": spec.step_kind,  # the key the case records carry too
    }
    if flops:
        from perfgate.cases.flops import count_step_flops

        row["gflop"] = count_step_flops(module, inputs, step_kind=spec.step_kind).total / 1e9
    return row


def _shapes(shapes: list[list[int]], most: int = 3) -> str:
    """Input shapes, the first few only: a feature cache can be dozens of tensors."""
    text = " ".join("x".join(map(str, s)) for s in shapes[:most])
    return text + (f" +{len(shapes) - most} more" if len(shapes) > most else "")


def run(args: argparse.Namespace) -> int:
    load_models(args.model_file)
    if not MODELS:
        raise CommandError(NO_MODELS)
    try:
        names = select(MODELS, [s for s in args.models.split(",") if s], "models")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    want = [s for s in args.sizes.split(",") if s]
    rows = []
    for name in names:
        for size in family(MODELS[name]).CONFIGS:
            if not want or size in want:
                rows.append(describe(name, size, flops=not args.no_flops))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [
            r["model"],
            r["size"],
            f"{r['params']:,}",
            _shapes(r["inputs"]),
            ", ".join(f"{v:g} {k}" for k, v in r["throughput"].items()),
            f"{r['gflop']:.3f}" if "gflop" in r else "-",
        ]
        for r in rows
    ]
    print("\n".join(text_table(("model", "size", "params", "inputs", "per step", "GFLOP/step"), table)))
    return 0
