"""Which cases a run has: model x size x option sweep x variant, narrowed by globs."""

from __future__ import annotations

import fnmatch
import itertools
import os
from collections.abc import Iterable

import torch

from perfgate.cases.runner import Case
from perfgate.cases.variants import VARIANTS
from perfgate.cases.workload import DATA_PARALLEL_STEP_KINDS, MODELS, NO_MODELS, default_size, sizes


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def select(names: Iterable[str], patterns: list[str], what: str) -> list[str]:
    """Names matching any glob, in registry order; a pattern that matches nothing is an error."""
    names = list(names)
    if not patterns:
        return names
    for p in patterns:
        if not fnmatch.filter(names, p):
            raise ValueError(f"--perfgate-{what} {p!r} matches no {what[:-1]}; known: {', '.join(names)}")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def expand_cases(
    device: str,
    *,
    models: list[str] | None = None,
    sizes_: list[str] | None = None,
    variants: list[str] | None = None,
    case_ids: list[str] | None = None,
) -> list[Case]:
    """Model x size x option sweep x variant, the baseline variant first so speedups are in-run;
    `case_ids` (globs on case ids) narrows the product further."""
    if not MODELS:
        raise ValueError(NO_MODELS)
    device_type = torch.device(device).type
    cases = []
    variant_names = select(VARIANTS, variants or [], "variants")
    if "baseline" in variant_names:
        variant_names.remove("baseline")
        variant_names.insert(0, "baseline")
    single_process = int(os.environ.get("WORLD_SIZE", "1")) == 1
    for name in select(MODELS, models or [], "models"):
        spec = MODELS[name]
        if not models and single_process and spec.step_kind in DATA_PARALLEL_STEP_KINDS:
            continue  # data-parallel workloads duplicate their single-process twins outside torchrun
        known = sizes(spec)
        chosen = [s for s in (sizes_ or [default_size(spec, device_type)]) if s in known]
        for s in sizes_ or []:
            if not any(s in sizes(MODELS[m]) for m in select(MODELS, models or [], "models")):
                raise ValueError(f"--perfgate-sizes {s!r} is no size of the selected models")
        sweep = [[(k, v) for v in vals] for k, vals in spec.sweep.items()]
        for size, combo in itertools.product(chosen, itertools.product(*sweep)):
            opts = tuple((k, v) for k, v in combo if v is not None)
            for v in variant_names:
                cases.append(Case(model=name, size=size, variant=v, device=device, options=opts))
    for p in case_ids or []:
        if not any(fnmatch.fnmatchcase(c.id, p) for c in cases):
            raise ValueError(f"the tier's case glob {p!r} matches no case of this selection on {device}")
    if case_ids:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in case_ids)]
    return cases
