"""torch._int_mm (CPU, oneDNN path) leaves its output uninitialised when mat1 is (1, K) with stride(0) < K.

Standalone (torch and torchao only), kept for the [[tool.perfgate.known_defect]] entry
"torch-int-mm-amx-strided-lhs" in pyproject.toml; first isolated on an Intel Xeon family 6 model 167
(AMX) on 2026-11-27 (../shared/evidence/2026-11-27-amx/). ATen's `_mkldnn_gemm_i8i8i32_with_blas`
passes `lda = mat1.stride(0)`: a (1, K) operand with stride (0, 1) is legal (its first dimension has
size 1) but gives lda = 0, oneDNN rejects the call, the status is not checked and the output is
never written. Inductor emits exactly that view for a torchao int8-dynamic Linear on an M=1 input
with 3 or more dimensions; torchao calls a signed-int8 `_int_mm` only where the CPU has AMX.

Usage: python int_mm_amx.py [none|freezing|mkldnn_off]
Exit 1 while the defect shows (the reproduction's purpose), 0 when the result is right.
"""

import os
import sys

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")  # a cached graph could hide the bug
import torch  # noqa: E402
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_  # noqa: E402

workaround = sys.argv[1] if len(sys.argv) > 1 else "none"
if workaround == "freezing":
    torch._inductor.config.freezing = True
elif workaround == "mkldnn_off":
    torch.backends.mkldnn.enabled = False
elif workaround != "none":
    sys.exit(f"int_mm_amx.py: unknown workaround {workaround!r}; use none, freezing or mkldnn_off")
torch.manual_seed(0)
K, N = 128, 256

# A) The ATen call alone: a (1, K) int8 LHS with stride (0, 1).
a = torch.randint(-127, 128, (1, K), dtype=torch.int8)
b = torch.randint(-127, 128, (N, K), dtype=torch.int8).t()  # (K, N), the transposed view torchao passes
expected = a.int() @ b.int()
out = torch.full((1, N), 12345, dtype=torch.int32)
torch._int_mm(a.as_strided((1, K), (0, 1)), b, out=out)
aten_ok = torch.equal(out, expected)

# B) What users hit: one torchao int8-dynamic Linear, compiled, on a (1, 1, K) input.
lin = torch.nn.Sequential(torch.nn.Linear(K, N)).eval()
x = torch.randn(1, 1, K)
quantize_(lin, Int8DynamicActivationInt8WeightConfig(set_inductor_config=False))
with torch.inference_mode():
    eager = lin(x)
    compiled = torch.compile(lin)
    rel = max(float((compiled(x) - eager).norm() / eager.norm()) for _ in range(2))
compiled_ok = rel < 1e-3

print(
    f"torch {torch.__version__}, amx_tile={torch.cpu._is_amx_tile_supported()}, workaround={workaround}: "
    f"_int_mm with a stride-(0, 1) LHS correct={aten_ok}; compiled int8-dynamic Linear rel-L2 vs eager {rel:.2e}"
)
# With a workaround part A still shows the ATen defect (freezing avoids the call, it does not fix it).
sys.exit(0 if compiled_ok and (aten_ok or workaround != "none") else 1)
