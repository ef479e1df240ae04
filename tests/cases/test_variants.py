import math
import sys

import pytest
import torch
from torch import nn

from perfgate.cases import accuracy, conversions
from perfgate.cases.accuracy import Tolerance, tolerance_for
from perfgate.cases.conversions import (
    Autocast,
    Cast,
    Compile,
    Converted,
    CudaGraphs,
    Env,
    Quantize,
    TensorRT,
    VariantError,
    export_program,
    probe_import,
    unsupported_fp8_shape,
)
from perfgate.cases.variants import VARIANTS, Variant, get_variant
from perfgate.gate.decide import accuracy_violations


def env(device="cuda", cc=None, **imports):
    return Env(
        device_type=device, compute_capability=cc, import_errors={"torchao": None, "torch_tensorrt": None, **imports}
    )


@pytest.mark.parametrize("cc, ok", [((8, 0), False), ((8, 9), True), ((9, 0), True)], ids=["sm80", "sm89", "sm90"])
def test_fp8_needs_sm89(cc, ok):
    reason = get_variant("bf16+fp8-rowwise+compile").unavailable(env(cc=cc))
    assert (reason is None) == ok
    if not ok:
        assert "8.9" in reason and "8.0" in reason


def test_cpu_reasons_for_gpu_only_variants():
    cpu = env("cpu")
    assert "compute capability >= 8.9" in get_variant("bf16+fp8-tensorwise+compile").unavailable(cpu)
    assert "CUDA" in get_variant("tensorrt").unavailable(cpu)
    assert "CUDA graphs" in get_variant("cudagraphs").unavailable(cpu)
    assert "CUDA graphs" in get_variant("compile-reduce-overhead").unavailable(cpu)
    for name in ("baseline", "compile", "autocast-bf16", "bf16", "int8-dynamic", "int8-weight-only", "bf16+compile"):
        assert get_variant(name).unavailable(cpu) is None, name


def test_missing_packages_give_install_hints():
    assert "pip install 'perfgate[quant]'" in get_variant("int8-dynamic").unavailable(
        env("cpu", torchao="torchao is not installed")
    )
    reason = get_variant("tensorrt").unavailable(env(cc=(9, 0), torch_tensorrt="torch_tensorrt is not installed"))
    assert reason.endswith("pip install 'perfgate[tensorrt]' (needs CUDA torch and TensorRT libraries)")


def test_torch_tensorrt_raising_a_plain_exception_is_unavailable(monkeypatch, tmp_path):
    # Without libnvinfer, `import torch_tensorrt` raises Exception, not ImportError.
    (tmp_path / "torch_tensorrt").mkdir()
    (tmp_path / "torch_tensorrt" / "__init__.py").write_text(
        "raise Exception('libnvinfer.so.10: cannot open shared object file')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_tensorrt", raising=False)
    err = probe_import("torch_tensorrt")
    assert err.startswith("import torch_tensorrt failed: Exception: libnvinfer")
    reason = get_variant("tensorrt").unavailable(Env(device_type="cuda", compute_capability=(9, 0)))
    assert "libnvinfer" in reason


@pytest.mark.parametrize(
    "conversions, match",
    [
        ((Compile(), Quantize(scheme="int8-dynamic")), "out of order"),
        ((Compile(), Compile()), "at most one compile"),
        ((Quantize(scheme="int8-dynamic"), TensorRT()), "TensorRT"),
        ((Compile(), CudaGraphs()), "at most one compile"),
        ((Quantize(scheme="int8-dynamic"), Quantize(scheme="int8-weight-only")), "at most one quantisation"),
        ((Quantize(scheme="fp8-rowwise"), Compile()), "needs the bf16 model"),
        ((Cast(dtype=torch.float16), Quantize(scheme="fp8-tensorwise")), "needs the bf16 model"),
    ],
    ids=[
        "compile-then-quantise",
        "double-compile",
        "quantise-tensorrt",
        "compile-cudagraphs",
        "double-quantise",
        "fp8-fp32",
        "fp8-fp16",
    ],
)
def test_composites_are_validated(conversions, match):
    with pytest.raises(ValueError, match=match):
        Variant(name="bad", conversions=conversions)


def test_valid_composites():
    Variant(name="ok1", conversions=(Cast(), TensorRT()))
    Variant(name="ok2", conversions=(Cast(), Quantize(scheme="fp8-rowwise"), Autocast(), Compile()))
    assert all(isinstance(v, Variant) for v in VARIANTS.values())


class TwoLinear(nn.Module):
    def __init__(self, d_in=32, d_out=64):
        super().__init__()
        self.a = nn.Linear(d_in, d_out)
        self.b = nn.Linear(d_out, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_int8_reports_converted_linears():
    torch.manual_seed(0)
    c = get_variant("int8-dynamic").convert(TwoLinear(), (torch.randn(4, 32),))
    assert c.info["quantized_linears"] == 2 and c.info["linears"] == 2
    assert c.module(*c.inputs).shape == (4, 3)


@pytest.mark.parametrize("saturates", [False, True])
def test_int8_dynamic_compile_freezes_on_the_cpu_only_where_the_frozen_int8_matmul_is_exact(monkeypatch, saturates):
    """Freezing on the CPU (the AMX defect's workaround) except where oneDNN's int8 matmul saturates
    (plain AVX2: the AVX2 defect); the record says which, and the process's flag is left as it was."""
    monkeypatch.setattr(conversions, "frozen_int8_saturates", lambda: saturates)
    (compile_,) = [c for c in get_variant("int8-dynamic+compile").conversions if isinstance(c, Compile)]
    c = compile_.convert(Converted(module=nn.Linear(4, 4), inputs=(torch.randn(2, 4),)))
    assert c.info["inductor_freezing"] is (not saturates)
    before = torch._inductor.config.freezing
    with compile_.context("cpu"):
        assert torch._inductor.config.freezing is (not saturates or before)
    assert torch._inductor.config.freezing is before
    assert not compile_.freezes("cuda")
    assert not Compile().freezes("cpu")  # only the variant that asks for it


@pytest.mark.parametrize(
    ("caps", "saturates"),
    [
        ({"avx2": True}, True),  # AMD family 23, Zen 3: oneDNN's best ISA is plain AVX2
        ({"avx2": True, "avx512_f": True}, False),  # Skylake-SP and later, Zen 4 and 5
        ({"avx2": True, "avx_vnni": True}, False),  # Alder Lake's client cores
        ({"avx2": True, "avx512_f": True, "avx512_vnni": True, "amx_tile": True}, False),  # model 167
        ({"asimd": True}, False),  # not x86: no oneDNN x86 gemm
    ],
)
def test_the_frozen_int8_matmul_saturates_where_the_best_x86_isa_is_plain_avx2(monkeypatch, caps, saturates):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: caps)
    conversions.frozen_int8_saturates.cache_clear()
    try:
        assert conversions.frozen_int8_saturates() is saturates
    finally:
        conversions.frozen_int8_saturates.cache_clear()


def test_a_gemm_cublas_refuses_skips_the_case_naming_the_layer():
    """The H100's row-wise FP8 failure, reproduced with torchao's real quantised weights on the CPU and
    the error text torch raises there (CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling ...)."""
    torch.manual_seed(0)
    c = get_variant("int8-dynamic").convert(TwoLinear(), (torch.randn(4, 32),))

    def refuse(x):
        raise RuntimeError(
            "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmulAlgoGetHeuristic( ltHandle, ...)`"
        )

    c.module.b.forward = refuse
    with pytest.raises(
        VariantError,
        match=r"cuBLAS has no FP8 kernel for b \(Linear 64->3, 4 rows\) on this GPU: CUDA error: CUBLAS_STATUS_NOT",
    ):
        unsupported_fp8_shape(c.module, c.inputs)
    c.module.b.forward = lambda x: (_ for _ in ()).throw(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # any other error is a real failure
        unsupported_fp8_shape(c.module, c.inputs)


@pytest.mark.parametrize("variant", ["int8-weight-only", "int8-dynamic"])
def test_a_variant_that_converts_nothing_says_so_naming_only_its_own_scheme(variant):
    # A conv-only decoder has nothing for a Linear quantiser to convert: timing it would time eager.
    with pytest.raises(VariantError, match="converted none of the 0 Linear") as exc:
        get_variant(variant).convert(nn.Sequential(nn.Conv1d(4, 4, 3)), (torch.randn(1, 4, 8),))
    assert str(exc.value).startswith(f"{variant}: ") and "conv layers are not quantised" in str(exc.value)
    assert "FP8" not in str(exc.value)  # an int8 skip says nothing of FP8's shape rules


def test_an_fp8_variant_that_converts_nothing_names_fp8s_shape_rule():
    with pytest.raises(VariantError, match=r"^fp8-tensorwise: .*\(FP8 needs dims that are multiples of 16; conv"):
        get_variant("bf16+fp8-tensorwise+compile").convert(nn.Sequential(nn.Conv1d(4, 4, 3)), (torch.randn(1, 4, 8),))


def test_bf16_cast_casts_floating_inputs_only():
    c = get_variant("bf16").convert(TwoLinear(), (torch.randn(2, 32), torch.arange(3)))
    assert c.inputs[0].dtype == torch.bfloat16 and c.inputs[1].dtype == torch.int64
    assert next(c.module.parameters()).dtype == torch.bfloat16


def test_tensorrt_export_runs_on_cpu():
    m = TwoLinear().eval()
    x = torch.randn(4, 32)
    ep = export_program(m, (x,))
    assert torch.allclose(ep.module()(x), m(x))


def test_accuracy_metrics_on_known_inputs():
    ref = torch.tensor([1.0, 0.0, -1.0, 0.0])
    m = accuracy.metrics(ref.clone(), ref, kind="image")
    assert m["rel_l2"] == 0 and m["cosine"] == pytest.approx(1.0) and m["psnr_db"] == math.inf
    m = accuracy.metrics(ref + torch.tensor([0.1, 0, 0, 0]), ref, kind="audio")
    assert m["rel_l2"] == pytest.approx(0.1 / math.sqrt(2)) and m["max_abs"] == pytest.approx(0.1)
    assert m["psnr_db"] == pytest.approx(10 * math.log10(4 / (0.01 / 4)))
    m = accuracy.metrics((torch.tensor([1.0, float("nan")]),), (torch.tensor([1.0, 2.0]),))
    assert accuracy_violations(m, vars(tolerance_for("baseline"))) == ["output has NaN or Inf"]
    assert accuracy.metrics(-ref, ref)["cosine"] == pytest.approx(-1.0)


def test_tolerances_by_variant_and_overrides():
    assert tolerance_for("compile-max-autotune").rel_l2 == 1e-3
    assert tolerance_for("autocast-bf16+compile").rel_l2 == 0.1
    assert tolerance_for("bf16+fp8-rowwise+compile").cosine == 0.98
    over = {"bf16": Tolerance(rel_l2=0.5, cosine=0.9)}
    assert tolerance_for("bf16", over).rel_l2 == 0.5
    wrong = accuracy.metrics(torch.randn(100), torch.randn(100))
    assert accuracy_violations(wrong, vars(tolerance_for("int8-dynamic")))  # a wrong fast variant fails


@pytest.mark.parametrize("variant", ["cudagraphs", "tensorrt", "int8-dynamic", "bf16+fp8-rowwise+compile"])
def test_training_steps_skip_inference_only_variants(variant):
    from perfgate.cases.runner import Case

    case = Case(model="physicsnemo-train", size="tiny", variant=variant, device="cuda")
    reason = case.skip_reason(env(cc=(9, 0)))
    assert "inference-only optimisation" in reason and "training step" in reason
    assert (
        Case(model="physicsnemo-block", size="tiny", variant=variant, device="cuda").skip_reason(env(cc=(9, 0))) is None
    )


def test_device_errors_are_one_line():
    from perfgate.measure.device import device_error

    assert device_error("cpu") is None
    assert "perfgate measures cpu, cuda" in device_error("meta")
    assert "not a device" in device_error("gpu0")
    if not torch.cuda.is_available():
        assert "no such CUDA device here" in device_error("cuda:0")
