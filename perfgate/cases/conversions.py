"""The conversions a variant is made of: cast, autocast, torchao quantisation, torch.compile, CUDA
graphs, TensorRT. Each is a small frozen config with one verb, `convert`, a `context` the timed
step runs in, and `unavailable(env)`, the reason it cannot run here (None when it can);
`Conversion` names any of them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import tempfile
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Phases a variant's conversions must follow in order.
CAST, QUANTIZE, AUTOCAST, COMPILE, TENSORRT = range(5)


@dataclass(frozen=True, kw_only=True)
class Env:
    """What a capability check may look at; tests build pretend ones."""

    device_type: str
    compute_capability: tuple[int, int] | None = None
    import_errors: dict[str, str | None] = field(default_factory=dict)  # module -> error, None if importable

    def import_error(self, module: str) -> str | None:
        if module not in self.import_errors:
            self.import_errors[module] = probe_import(module)
        return self.import_errors[module]

    @classmethod
    def detect(cls, device: torch.device | str) -> Env:
        device = torch.device(device)
        cc = None
        if device.type == "cuda" and torch.cuda.is_available():
            cc = torch.cuda.get_device_capability(device)
        return cls(device_type=device.type, compute_capability=cc)


def probe_import(module: str) -> str | None:
    """None if `module` imports, else why not.

    torch_tensorrt raises a plain Exception (not ImportError) without libnvinfer, so anything
    raised at import counts as unavailable.
    """
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    # torchao logs (not warns) every CUDA extension it cannot load on a CPU build: not news here.
    quiet = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - see docstring
        return f"import {module} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(
            ": "
        )
    finally:
        for q, lvl in zip(quiet, levels):
            q.setLevel(lvl)
    return None


@dataclass
class Converted:
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    info: dict[str, Any] = field(default_factory=dict)


def _cast_inputs(inputs: Iterable[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, nn.Parameter)


def count_quantized_linears(module: nn.Module) -> tuple[int, int]:
    """(converted, total) Linear layers: torchao swaps weights for tensor subclasses."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    return sum(not _plain(m.weight) for m in linears), len(linears)


# --- conversions --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Cast:
    """Weights and floating inputs cast to `dtype` (bf16 / fp16)."""

    dtype: torch.dtype = torch.bfloat16
    phase: int = CAST

    def unavailable(self, env: Env) -> str | None:
        return None

    def convert(self, c: Converted) -> Converted:
        return Converted(
            c.module.to(self.dtype),
            _cast_inputs(c.inputs, self.dtype),
            {**c.info, "dtype": str(self.dtype).removeprefix("torch.")},
        )

    def context(self, device_type: str) -> ContextManager:
        return contextlib.nullcontext()


@dataclass(frozen=True, kw_only=True)
class Autocast:
    dtype: torch.dtype = torch.bfloat16
    phase: int = AUTOCAST

    def unavailable(self, env: Env) -> str | None:
        if env.device_type not in ("cpu", "cuda"):
            return f"autocast is not supported on {env.device_type}"
        return None

    def convert(self, c: Converted) -> Converted:
        return Converted(c.module, c.inputs, {**c.info, "autocast": str(self.dtype).removeprefix("torch.")})

    def context(self, device_type: str) -> ContextManager:
        return torch.autocast(device_type, dtype=self.dtype)


@dataclass(frozen=True, kw_only=True)
class Quantize:
    """torchao `quantize_` with one of its configs, by name (built lazily: torchao is heavy)."""

    scheme: str  # "int8-weight-only", "int8-dynamic", "fp8-rowwise", "fp8-tensorwise"
    phase: int = QUANTIZE

    def unavailable(self, env: Env) -> str | None:
        err = env.import_error("torchao")
        if err:
            return f"{err}: pip install 'perfgate[quant]'"
        if self.scheme.startswith("fp8"):
            if env.device_type != "cuda":
                return "FP8 needs CUDA with compute capability >= 8.9 (Ada, Hopper or newer); this run is on the CPU"
            if env.compute_capability is None or env.compute_capability < (8, 9):
                cc = "unknown" if env.compute_capability is None else "{}.{}".format(*env.compute_capability)
                return f"FP8 needs CUDA compute capability >= 8.9; this GPU has {cc}"
        return None

    def torchao_config(self) -> Any:
        from torchao.quantization import (
            Float8DynamicActivationFloat8WeightConfig,
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            PerRow,
            PerTensor,
        )

        # set_inductor_config=False: torchao's default changes inductor settings for the whole
        # process, which would make every later case's compile differ by selection order.
        return {
            "int8-weight-only": lambda: Int8WeightOnlyConfig(set_inductor_config=False),
            "int8-dynamic": lambda: Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
            "fp8-rowwise": lambda: Float8DynamicActivationFloat8WeightConfig(
                granularity=PerRow(), set_inductor_config=False
            ),
            "fp8-tensorwise": lambda: Float8DynamicActivationFloat8WeightConfig(
                granularity=PerTensor(), set_inductor_config=False
            ),
        }[self.scheme]()

    def convert(self, c: Converted) -> Converted:
        from torchao.quantization import quantize_

        module, inputs = c.module, c.inputs
        quantize_(module, self.torchao_config())
        converted, total = count_quantized_linears(module)
        if converted == 0:
            why = "FP8 needs dims that are multiples of 16; " if self.scheme.startswith("fp8") else ""
            raise VariantError(
                f"{self.scheme}: torchao converted none of the {total} Linear layers "
                f"({why}conv layers are not quantised); timing it would time the baseline"
            )
        if self.scheme.startswith("fp8"):
            unsupported_fp8_shape(module, inputs)
        return Converted(module, inputs, {**c.info, "quantized_linears": converted, "linears": total})

    def context(self, device_type: str) -> ContextManager:
        return contextlib.nullcontext()


def cublaslt_version() -> str | None:
    """The cuBLASLt runtime's version number (e.g. 130100), or None where it cannot be read."""
    import ctypes

    for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        return str(lib.cublasLtGetVersion())
    return None


def unsupported_fp8_shape(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Run the quantised model once, eagerly; raise VariantError naming the Linear whose FP8 GEMM the
    BLAS library refuses.

    On the first H100 run (torch 2.11+cu130) row-wise FP8 failed with CUBLAS_STATUS_NOT_SUPPORTED
    from cublasLtMatmulAlgoGetHeuristic while per-tensor FP8 ran: on sm90 torch sends row-wise
    `_scaled_mm` to cuBLASLt's outer-vector scaling, which has no kernel for some small-M shapes
    (pytorch/ao#4582: large K with at most 256 rows). That is the library's limit, not a failure
    of the model: the case is skipped with the layer, its shape and the cuBLASLt version.
    """
    current: list[str] = []
    handles = []
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear) and not _plain(m.weight):

            def pre(mod: nn.Module, args: Any, name: str = name) -> None:
                rows = args[0].numel() // args[0].shape[-1] if args and isinstance(args[0], torch.Tensor) else "?"
                current[:] = [f"{name} (Linear {mod.in_features}->{mod.out_features}, {rows} rows)"]

            handles.append(m.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            module(*inputs)
        if any(t.is_cuda for t in inputs):
            torch.cuda.synchronize()
    except RuntimeError as exc:
        if "CUBLAS_STATUS" not in str(exc):
            raise
        where = current[0] if current else "a quantised Linear"
        version = cublaslt_version()
        raise VariantError(
            f"cuBLAS has no FP8 kernel for {where} on this GPU: {str(exc).splitlines()[0]}"
            + (f" (cuBLASLt {version})" if version else "")
        ) from None
    finally:
        for h in handles:
            h.remove()


@dataclass(frozen=True, kw_only=True)
class Compile:
    mode: str | None = None  # None: inductor default
    # On the CPU, compile with inductor's freezing (weights inlined as constants and folded): the
    # configuration PyTorch's x86 quantisation flow is written for. Dynamo reads the flag while it
    # traces (torch._dynamo.utils.is_parameter_freezing), i.e. in the first call and any recompile,
    # not in torch.compile(): `options={"freezing": True}` does not reach it (measured: the owl world
    # model stayed wrong on AMX with it). So the step's context sets it around every call (~6 us)
    # and restores it, leaving the process's config as it was for later cases. docs/variants.md.
    # Not on a CPU whose oneDNN int8 matmul saturates (`frozen_int8_saturates`): there the plain
    # compile is the exact one.
    cpu_freezing: bool = False
    phase: int = COMPILE

    def unavailable(self, env: Env) -> str | None:
        if self.mode in ("reduce-overhead", "max-autotune") and env.device_type != "cuda":
            return f"compile mode {self.mode!r} adds CUDA graphs; on the CPU it is the same as 'compile'"
        return None

    def convert(self, c: Converted) -> Converted:
        module = torch.compile(c.module, mode=self.mode)
        info = {**c.info, "compile_mode": self.mode or "default"}
        if self.cpu_freezing:
            importlib.import_module("torch._inductor.config")  # the step's context sets a flag in it
        if self.cpu_freezing and all(t.device.type == "cpu" for t in c.inputs if isinstance(t, torch.Tensor)):
            info["inductor_freezing"] = self.freezes("cpu")
        return Converted(module, c.inputs, info)

    def freezes(self, device_type: str) -> bool:
        return self.cpu_freezing and device_type == "cpu" and not frozen_int8_saturates()

    def context(self, device_type: str) -> ContextManager:
        return InductorFreezing() if self.freezes(device_type) else contextlib.nullcontext()


@functools.cache
def frozen_int8_saturates() -> bool:
    """Whether this CPU's best oneDNN ISA is plain AVX2 (no AVX-512, no AVX-VNNI: AMD family 23 and the
    Zen 3 models of family 25, Intel client cores before Ice Lake). There inductor's frozen int8 Linear becomes oneDNN's
    `gemm:jit` int8 matmul, whose vpmaddubsw adds pairs of u8*s8 products in int16 and saturates
    (oneDNN's "Nuances of int8 computations"): relative L2 0.14 against the exact int8 result on one
    Linear, 0.26 on the owl world model. The plain compile calls torch._int_mm, which PyTorch sends to
    an exact loop on CPUs without VNNI (pytorch#136942). Known defect
    "inductor-frozen-int8-linear-avx2-saturation" (pyproject.toml). Read through torch's cpuinfo, as
    oneDNN reads CPUID (valgrind's virtual CPU included), not /proc/cpuinfo."""
    get = getattr(torch.cpu, "get_capabilities", None)  # torch 2.13; before it, ATen's dispatch level
    if get is None:
        return torch.backends.cpu.get_cpu_capability() == "AVX2"
    caps = get()
    return bool(caps.get("avx2")) and not caps.get("avx512_f") and not caps.get("avx_vnni")


class InductorFreezing:
    """`torch._inductor.config.freezing` on for the block, then back to what it was (cheaper than
    `config.patch`, which copies the config: 27 against 6 us per step on the development VM)."""

    def __enter__(self) -> None:
        self.before = torch._inductor.config.freezing
        torch._inductor.config.freezing = True

    def __exit__(self, *exc: object) -> None:
        torch._inductor.config.freezing = self.before


@dataclass(frozen=True, kw_only=True)
class CudaGraphs:
    """Explicit CUDA graph capture of the eager module (static inputs, replayed each step)."""

    phase: int = COMPILE

    def unavailable(self, env: Env) -> str | None:
        return None if env.device_type == "cuda" else "CUDA graphs need a CUDA device"

    def convert(self, c: Converted) -> Converted:
        g = CudaGraphModule(c.module, c.inputs)
        return Converted(g, g.static_inputs, {**c.info, "cuda_graph": True})

    def context(self, device_type: str) -> ContextManager:
        return contextlib.nullcontext()


class CudaGraphModule(nn.Module):
    """Replays one captured graph; fresh inputs are copied into the captured static tensors."""

    def __init__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], warmup: int = 3) -> None:
        super().__init__()
        self.module = module
        self.static_inputs = tuple(inputs)  # the step feeds these same tensors: no copy per replay
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        # Warm up on a side stream so lazy initialisation is not captured.
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(warmup):
                module(*self.static_inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.inference_mode():
            self.static_output = module(*self.static_inputs)

    def forward(self, *inputs: torch.Tensor) -> Any:
        for static, new in zip(self.static_inputs, inputs):
            if new.data_ptr() != static.data_ptr():
                static.copy_(new)
        self.graph.replay()
        return self.static_output


@dataclass(frozen=True, kw_only=True)
class TensorRT:
    """torch-tensorrt ahead of time: export, build engines, save, load back before timing.

    TensorRT 11 networks are strongly typed: precision follows the model's dtype, so a bf16
    engine is `Cast(bf16)` before this conversion, not an option of it.
    """

    min_block_size: int = 1
    phase: int = TENSORRT

    def unavailable(self, env: Env) -> str | None:
        if env.device_type != "cuda":
            return "TensorRT needs a CUDA device and torch-tensorrt (pip install 'perfgate[tensorrt]' on a GPU machine)"
        err = env.import_error("torch_tensorrt")
        if err:
            return f"{err}: pip install 'perfgate[tensorrt]' (needs CUDA torch and TensorRT libraries)"
        return None

    def convert(self, c: Converted) -> Converted:
        import torch_tensorrt

        t0 = time.perf_counter()
        program = export_program(c.module, c.inputs)
        trt_gm = torch_tensorrt.dynamo.compile(
            program, arg_inputs=list(c.inputs), min_block_size=self.min_block_size, require_full_compilation=False
        )
        build_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="perfgate-trt-") as tmp:
            path = Path(tmp) / "engine.ep"
            torch_tensorrt.save(trt_gm, str(path), output_format="exported_program", arg_inputs=list(c.inputs))
            size_mib = path.stat().st_size / 2**20
            t1 = time.perf_counter()
            loaded = torch_tensorrt.load(str(path)).module()
            load_s = time.perf_counter() - t1
        return Converted(
            loaded, c.inputs, {**c.info, "engine_build_s": build_s, "engine_load_s": load_s, "engine_mib": size_mib}
        )

    def context(self, device_type: str) -> ContextManager:
        return contextlib.nullcontext()


def export_program(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.export.ExportedProgram:
    """The torch.export stage of the TensorRT path; runs on the CPU too."""
    with torch.no_grad():
        return torch.export.export(module, tuple(inputs))


class VariantError(RuntimeError):
    """A variant that cannot honestly be timed for this model (e.g. nothing was quantised)."""


# Any one of a variant's conversions.
Conversion = Cast | Autocast | Quantize | Compile | CudaGraphs | TensorRT
