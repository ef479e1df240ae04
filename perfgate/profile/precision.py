"""fp32 against bf16 / fp16 autocast on the same module and inputs, read in the device's bands
(perfgate.profile.suggest.speedup_bands). Each precision is the runner's case with that autocast
variant, measured by its pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from perfgate.cases import runner
from perfgate.cases.conversions import Cast, Env, Quantize
from perfgate.cases.variants import Variant, get_variant
from perfgate.profile.config import PRECISIONS
from perfgate.profile.report import PrecisionComparison, PrecisionRow
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
) -> PrecisionComparison:
    """The rows of the comparison, measured under `opts` (its stop rule bounds each precision)
    on `built`'s workload, or on a fresh fp32 one where its variant changed the module in place."""
    case = dataclasses.replace(built.case, variant="baseline")
    workload = runner.prepare(case, opts) if mutates(built.variant) else (built.workload, built.reference)
    env = Env.detect(built.device)
    device_type = str(built.device).split(":")[0]
    rows: dict[str, PrecisionRow] = {}
    for p in precisions:
        vname = PRECISIONS[p]
        reason = get_variant(vname).unavailable(env)
        if reason:
            rows[p] = PrecisionRow(variant=vname, skipped=reason)
            continue
        if note:
            note(f"{p} ({vname})")
        pcase = dataclasses.replace(case, variant=vname)
        rec = runner.measure_case(runner.build_case(pcase, opts, prepared=workload), opts).record
        rows[p] = PrecisionRow(
            variant=vname,
            n=rec.n,
            mean_ms=rec.mean_ms,
            median_ms=rec.median_ms,
            std_ms=rec.std_ms,
            min_ms=rec.min_ms,
            stop=rec.stop,
            # A train step's loss is taken after earlier precisions' updates: no accuracy.
            accuracy=rec.accuracy if rec.step_kind == "inference" else None,
        )
    fp32 = rows.get("fp32")
    fp32_ms = fp32.median_ms if fp32 else None
    for p, row in rows.items():
        if fp32_ms and row.median_ms is not None and p != "fp32":
            speedup = fp32_ms / row.median_ms
            rows[p] = dataclasses.replace(row, speedup=speedup, interpretation=speedup_band(speedup, device_type))
    return PrecisionComparison(autocast=True, rows=rows, bands=speedup_bands(device_type))
