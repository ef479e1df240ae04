import torch

from perfgate.fingerprint import KEY_FIELDS, cpu_info, differences, fingerprint, fingerprint_id

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_int8 avx512_fp16 sse4_2
"""


def test_cpu_info_reads_model_and_speed_flags():
    model, flags = cpu_info(CPUINFO)
    assert model.startswith("Intel(R) Xeon(R) Platinum 8481C")
    assert flags == ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"]


def test_cpu_fingerprint_has_no_cuda_figures():
    fp = fingerprint("cpu")
    assert set(KEY_FIELDS) <= set(fp)
    assert fp["device_type"] == "cpu" and fp["gpu_name"] is None and fp["cuda"] is None
    assert fp["torch"] == torch.__version__ and fp["threads"] == torch.get_num_threads()


def test_id_is_stable_and_changes_with_every_key_field():
    fp = fingerprint("cpu")
    base = fingerprint_id(fp)
    assert base == fingerprint_id(dict(fp)) and base.startswith("cpu-")
    for k, v in [("threads", 99), ("torch", "9.9"), ("cpu_flags", ["amx_bf16"]), ("gpu_name", "H100"), ("driver", "570")]:
        assert fingerprint_id({**fp, k: v}) != base, k
    assert fingerprint_id({**fp, "platform": "other"}) == base  # informative fields do not key
    assert differences(fp, {**fp, "threads": 99}) == {"threads": (fp["threads"], 99)}
