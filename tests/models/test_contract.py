"""The contract every registered family keeps (README "Add a model"), checked once for all of them.

The family files' own tests keep what is particular to each (shapes, upstream keys, caches); what
every family must do is here, parametrised over every family and every registered workload, so a
new family is checked without a line of test code.
"""

from __future__ import annotations

import contextlib
from types import ModuleType

import pytest
import torch

import models  # noqa: F401  (registers this repository's families; perfgate never imports it)
from perfgate.cases.accuracy import flatten_outputs
from perfgate.cases.steps import make_step, reference_output
from perfgate.cases.workload import DATA_PARALLEL_STEP_KINDS, DATA_PATHS, MODELS, build_module, build_workload, family

SPECS = sorted(MODELS.values(), key=lambda s: s.name)
FAMILIES = sorted({s.module for s in SPECS})
OUTPUT_KINDS = ("image", "audio", "tensor")


def _family(name: str) -> ModuleType:
    return family(next(s for s in SPECS if s.module == name))


def test_this_repository_registers_its_seven_families() -> None:
    assert len(FAMILIES) == 7, FAMILIES
    assert all(name.startswith("models.") for name in FAMILIES)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_file_provides_the_contract(name: str) -> None:
    fam = _family(name)
    assert isinstance(fam.CONFIGS, dict) and "tiny" in fam.CONFIGS, "CONFIGS needs a 'tiny' size for the CPU"
    assert callable(fam.example_inputs) and callable(fam.step_info)
    assert getattr(fam, "OUTPUT_KIND", "tensor") in OUTPUT_KINDS


@pytest.mark.parametrize("name", FAMILIES)
def test_example_inputs_are_seeded_typed_and_reject_unknown_options(name: str) -> None:
    fam, cfg = _family(name), _family(name).CONFIGS["tiny"]
    a, b, c = (tuple(fam.example_inputs(cfg, seed=s)) for s in (3, 3, 4))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), "same seed, other inputs"
    assert any(not torch.equal(x, y) for x, y in zip(a, c, strict=True) if x.is_floating_point()), "seed ignored"
    half = fam.example_inputs(cfg, dtype=torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in half if t.is_floating_point())
    with pytest.raises(TypeError, match="no_such_option"):
        fam.example_inputs(cfg, no_such_option=1)
    with pytest.raises(TypeError, match="no_such_option"):
        fam.step_info(cfg, no_such_option=1)


@pytest.mark.parametrize("name", FAMILIES)
def test_step_info_counts_positive_items_that_scale_with_the_batch(name: str) -> None:
    fam = _family(name)
    for size, cfg in fam.CONFIGS.items():
        one, two = fam.step_info(cfg, batch=1), fam.step_info(cfg, batch=2)
        assert one and all(v > 0 for v in one.values()), (size, one)
        unit = next(iter(one))  # the primary unit: throughput is reported in it
        assert two[unit] == pytest.approx(2 * one[unit]), (size, unit)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_size_builds_on_the_meta_device(spec) -> None:
    for size in family(spec).CONFIGS:
        module = build_module(spec, size, device="meta")
        assert sum(p.numel() for p in module.parameters()) > 0, size
    assert set(spec.default_sizes.values()) <= set(family(spec).CONFIGS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_tiny_workload_runs_one_step_on_the_cpu(spec) -> None:
    assert spec.data in DATA_PATHS
    if spec.step_kind in DATA_PARALLEL_STEP_KINDS:
        pytest.skip("a data-parallel step needs a process group: tests/dist/test_distributed.py runs it")
    wl = build_workload(spec, "tiny", "cpu", seed=0, **{k: v[0] for k, v in spec.sweep.items()})
    ref = reference_output(wl)
    step = make_step(wl, wl.module, wl.inputs, contextlib.nullcontext)
    step()
    out = step()
    assert flatten_outputs(ref).numel() > 0 and torch.isfinite(flatten_outputs(ref)).all()
    if out is not None:  # a train step returns nothing
        assert torch.isfinite(flatten_outputs(out)).all()
