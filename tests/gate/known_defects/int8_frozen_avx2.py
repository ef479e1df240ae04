"""A frozen int8 Linear (torchao int8-dynamic, inductor freezing) is wrong on a CPU whose best ISA is AVX2.

Standalone (torch and torchao only), kept for the [[tool.perfgate.known_defect]] entry
"inductor-frozen-int8-linear-avx2-saturation" in pyproject.toml; first isolated on 2026-11-28 under
valgrind's virtual CPU (an i7-4910MQ: AVX2, no AVX-512, no VNNI; every dispatcher reads it through
CPUID) on an Intel Xeon family 6 model 167, and with oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA).
With freezing, inductor's x86 quantisation passes turn the Linear into a oneDNN int8 matmul; on
plain AVX2 oneDNN runs it as `gemm:jit`, whose vpmaddubsw adds pairs of u8*s8 products in int16 and
saturates (oneDNN's "Nuances of int8 computations"). Without freezing the compiled Linear calls
torch._int_mm, which PyTorch sends to an exact loop on CPUs without AVX512-VNNI (pytorch#136942,
after pytorch#136746): that path was guarded, this one was not.

Usage: python int8_frozen_avx2.py [none|no_freezing]
Compiles the Linear both ways, prints one JSON line with both errors against the exact int8 result
(eager with oneDNN off: torch._int_mm's reference loop), and exits 1 while the result of the chosen
way is wrong: the frozen one by default (the defect), the plain one with `no_freezing` (the workaround).
"""

import json
import os
import sys

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")  # a cached graph could hide the bug
import torch  # noqa: E402
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_  # noqa: E402

way = sys.argv[1] if len(sys.argv) > 1 else "none"
if way not in ("none", "no_freezing"):
    sys.exit(f"int8_frozen_avx2.py: unknown way {way!r}; use none or no_freezing")
torch.manual_seed(0)
K, N, M = 256, 256, 17

lin = torch.nn.Sequential(torch.nn.Linear(K, N)).eval()
x = torch.randn(M, K)
quantize_(lin, Int8DynamicActivationInt8WeightConfig(set_inductor_config=False))
rel_l2 = {}
with torch.inference_mode():
    torch.backends.mkldnn.enabled = False  # torch._int_mm's reference loop: exact int32 sums
    exact = lin(x)
    torch.backends.mkldnn.enabled = True
    for name, freezing in (("frozen", True), ("plain", False)):
        torch._dynamo.reset()
        torch._inductor.config.freezing = freezing
        got = torch.compile(lin)(x)
        rel_l2[name] = float((got - exact).norm() / exact.norm())

caps = torch.cpu.get_capabilities()
cpu = {k: bool(caps.get(k)) for k in ("avx2", "avx512_f", "avx512_vnni", "avx_vnni", "amx_tile")}
print(json.dumps({"torch": torch.__version__, "cpu": cpu, "rel_l2_vs_exact_int8": rel_l2}))
wrong = rel_l2["frozen" if way == "none" else "plain"] > 1e-3  # right: 5e-8 (float rounding of the scales)
sys.exit(1 if wrong else 0)
