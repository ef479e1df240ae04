"""Optimisation variants: ordered tuples of conversions (perfgate.cases.conversions), registered by name.

A variant is an ordered tuple of conversions (cast, quantise, autocast, compile, TensorRT), validated
once: quantise before compile, compile last, TensorRT alone. Each conversion says why it cannot run
here (`unavailable(env)` returns the reason, None when it can), so unsupported combinations become
skips with that reason, never passes. The registry key is the pytest id and the baseline key.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from perfgate.cases.conversions import (
    COMPILE,
    Autocast,
    Cast,
    Compile,
    Conversion,
    Converted,
    CudaGraphs,
    Env,
    Quantize,
    TensorRT,
)


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    conversions: tuple[Conversion, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        validate_conversions(self.name, self.conversions)

    def unavailable(self, env: Env) -> str | None:
        for s in self.conversions:
            reason = s.unavailable(env)
            if reason:
                return reason
        return None

    def convert(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Converted:
        return self.finish(self.prepare(module, inputs))

    def prepare(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Converted:
        """The conversions before compilation (cast, quantise, autocast); they change the module in place."""
        c = Converted(module, tuple(inputs))
        for s in self.conversions:
            if s.phase < COMPILE:
                c = s.convert(c)
        return c

    def finish(self, prepared: Converted) -> Converted:
        """The compile / CUDA graph / TensorRT conversion; repeatable on the same prepared module."""
        c = Converted(prepared.module, prepared.inputs, dict(prepared.info))
        for s in self.conversions:
            if s.phase >= COMPILE:
                c = s.convert(c)
        return c

    def context(self, device_type: str) -> Callable[[], ContextManager]:
        def ctx() -> ContextManager:
            stack = contextlib.ExitStack()
            for s in self.conversions:
                stack.enter_context(s.context(device_type))
            return stack

        return ctx

    @property
    def uses_cuda_graphs(self) -> bool:
        return any(
            isinstance(s, CudaGraphs) or (isinstance(s, Compile) and s.mode in ("reduce-overhead", "max-autotune"))
            for s in self.conversions
        )

    @property
    def inference_only(self) -> bool:
        return any(isinstance(s, (CudaGraphs, TensorRT, Quantize)) for s in self.conversions)

    @property
    def compiles(self) -> bool:
        return any(isinstance(s, Compile) for s in self.conversions)


def validate_conversions(name: str, conversions: tuple[Conversion, ...]) -> None:
    """Quantise before compile, compile at most once and last, TensorRT alone (after a cast), FP8 on
    the bf16 model."""
    phases = [s.phase for s in conversions]
    if phases != sorted(phases):
        raise ValueError(
            f"variant {name!r}: conversions out of order {[type(s).__name__ for s in conversions]}; order is cast, "
            "quantise, autocast, compile"
        )
    if sum(isinstance(s, (Compile, CudaGraphs)) for s in conversions) > 1:
        raise ValueError(f"variant {name!r}: at most one compile or CUDA-graph conversion")
    if any(isinstance(s, TensorRT) for s in conversions) and any(
        not isinstance(s, (TensorRT, Cast)) for s in conversions
    ):
        raise ValueError(f"variant {name!r}: TensorRT builds its own engine; combine it with a cast only")
    if sum(isinstance(s, Quantize) for s in conversions) > 1:
        raise ValueError(f"variant {name!r}: at most one quantisation")
    for i, s in enumerate(conversions):
        # torchao's FP8 recipes expect the bf16 model (PerRow asserts bf16 weights): the variant says
        # so with a Cast before the quantisation rather than casting behind its name.
        if (
            isinstance(s, Quantize)
            and s.scheme.startswith("fp8")
            and not any(isinstance(c, Cast) and c.dtype == torch.bfloat16 for c in conversions[:i])
        ):
            raise ValueError(
                f"variant {name!r}: {s.scheme} needs the bf16 model; put Cast(dtype=torch.bfloat16) before it"
            )


VARIANTS: dict[str, Variant] = {}


def register_variant(v: Variant) -> Variant:
    if v.name in VARIANTS:
        raise ValueError(f"variant {v.name!r} is already registered")
    VARIANTS[v.name] = v
    return v


for _v in (
    Variant(name="baseline", description="eager fp32"),
    Variant(name="compile", conversions=(Compile(),), description="torch.compile, inductor default mode"),
    Variant(
        name="compile-max-autotune",
        conversions=(Compile(mode="max-autotune-no-cudagraphs"),),
        description="inductor max-autotune without CUDA graphs",
    ),
    Variant(
        name="compile-reduce-overhead",
        conversions=(Compile(mode="reduce-overhead"),),
        description="inductor with CUDA graphs (CUDA only)",
    ),
    Variant(
        name="cudagraphs", conversions=(CudaGraphs(),), description="explicit CUDA graph capture of the eager model"
    ),
    Variant(name="autocast-bf16", conversions=(Autocast(dtype=torch.bfloat16),), description="torch.autocast bf16"),
    Variant(name="autocast-fp16", conversions=(Autocast(dtype=torch.float16),), description="torch.autocast fp16"),
    Variant(name="bf16", conversions=(Cast(dtype=torch.bfloat16),), description="weights and inputs cast to bf16"),
    Variant(
        name="int8-weight-only",
        conversions=(Quantize(scheme="int8-weight-only"),),
        description="torchao Int8WeightOnlyConfig",
    ),
    Variant(
        name="int8-dynamic",
        conversions=(Quantize(scheme="int8-dynamic"),),
        description="torchao Int8DynamicActivationInt8WeightConfig",
    ),
    Variant(
        name="bf16+fp8-rowwise+compile",
        conversions=(Cast(dtype=torch.bfloat16), Quantize(scheme="fp8-rowwise"), Compile()),
        description="bf16 model, torchao FP8 dynamic with per-row scales, then compile",
    ),
    Variant(
        name="bf16+fp8-tensorwise+compile",
        conversions=(Cast(dtype=torch.bfloat16), Quantize(scheme="fp8-tensorwise"), Compile()),
        description="bf16 model, torchao FP8 dynamic with per-tensor scales, then compile (the Self Forcing demo)",
    ),
    Variant(name="tensorrt", conversions=(TensorRT(),), description="torch-tensorrt AOT, fp32 engine"),
    Variant(
        name="tensorrt-bf16",
        conversions=(Cast(dtype=torch.bfloat16), TensorRT()),
        description="torch-tensorrt AOT on the bf16 model (strongly typed)",
    ),
    Variant(
        name="autocast-bf16+compile",
        conversions=(Autocast(dtype=torch.bfloat16), Compile()),
        description="autocast bf16 inside the compiled graph",
    ),
    Variant(
        name="bf16+compile", conversions=(Cast(dtype=torch.bfloat16), Compile()), description="bf16 weights, compiled"
    ),
    Variant(
        name="int8-dynamic+compile",
        # CPU: with inductor freezing, what CPU quantisation is compiled with (docs/variants.md: as
        # fast or faster, as accurate, and clear of the AMX defect in [[tool.perfgate.known_defect]]).
        conversions=(Quantize(scheme="int8-dynamic"), Compile(cpu_freezing=True)),
        description="torchao int8 dynamic, compiled (on the CPU with inductor freezing)",
    ),
):
    register_variant(_v)


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}") from None


def set_inductor_cache(path: str | os.PathLike[str]) -> Path:
    """Point inductor at a persistent cache the suite manages (minutes become seconds)."""
    p = Path(path).resolve()
    p.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(p)
    return p
