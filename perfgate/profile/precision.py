"""fp32 against bf16 / fp16 autocast on the same module and inputs, read in the device's bands
(perfgate.profile.suggest.speedup_bands). Each precision is the runner's case with that autocast
variant, measured by its pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from perfgate.cases import runner
from perfgate.cases.conversions import Cast, Env, Quantize
from perfgate.cases.variants import Variant, get_variant
from perfgate.profile.config import PRECISIONS
from perfgate.profile.suggest import speedup_band, speedup_bands


def mutates(variant: Variant) -> bool:
    """Cast and quantise conversions change the module in place."""
    return any(isinstance(s, (Cast, Quantize)) for s in variant.conversions)


def precision_comparison(
    built: runner.BuiltCase,
    opts: runner.RunOptions,
    precisions: tuple[str, ...],
    *,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The rows of the comparison, measured under `opts` (its stop rule bounds each precision)
    on `built`'s workload, or on a fresh fp32 one where its variant changed the module in place."""
    case = dataclasses.replace(built.case, variant="baseline")
    workload = runner.prepare(case, opts) if mutates(built.variant) else (built.workload, built.reference)
    env = Env.detect(built.device)
    device_type = str(built.device).split(":")[0]
    rows: dict[str, dict[str, Any]] = {}
    fp32_ms = None
    for p in precisions:
        vname = PRECISIONS[p]
        reason = get_variant(vname).unavailable(env)
        if reason:
            rows[p] = {"variant": vname, "skipped": reason}
            continue
        if note:
            note(f"{p} ({vname})")
        pcase = dataclasses.replace(case, variant=vname)
        rec = runner.measure_case(runner.build_case(pcase, opts, prepared=workload), opts).record
        row: dict[str, Any] = {
            "variant": vname,
            **{k: getattr(rec, k) for k in ("n", "mean_ms", "median_ms", "std_ms", "min_ms")},
            "stop": rec.stop,
        }
        if rec.step_kind == "inference":  # a train step's loss is taken after earlier precisions' updates
            row["accuracy"] = rec.accuracy
        if p == "fp32":
            fp32_ms = rec.median_ms
        rows[p] = row
    for p, row in rows.items():
        if fp32_ms and "median_ms" in row and p != "fp32":
            row["speedup"] = fp32_ms / row["median_ms"]
            row["interpretation"] = speedup_band(row["speedup"], device_type)
    return {"autocast": True, "rows": rows, "bands": speedup_bands(device_type)}
