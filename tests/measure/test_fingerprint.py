import torch

from perfgate.measure.fingerprint import KEY_FIELDS, _cpuinfo, cpu_fields, differences, fingerprint, fingerprint_id


def test_cpu_fields_come_from_py_cpuinfo_with_generation_and_caches():
    info = _cpuinfo()  # this machine, as py-cpuinfo reads it
    f = cpu_fields(info)
    assert f["cpu_model"] == info["brand_raw"] and f["cpu_vendor"] == info["vendor_id_raw"]
    assert (f["cpu_family"], f["cpu_model_number"], f["cpu_stepping"]) == (
        info["family"],
        info["model"],
        info["stepping"],
    )
    assert f["cpu_cache_kib"]["l1d"] == info["l1_data_cache_size"] // 1024
    xeon = {
        **info,
        "brand_raw": "Intel(R) Xeon(R) Platinum 8481C",
        "flags": ["fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16", "sse4_2"],
    }
    assert cpu_fields(xeon)["cpu_flags"] == ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"]


def test_two_cpu_generations_behind_one_brand_get_different_ids():
    """Baseline 0002's case: an AMD EPYC of family 26 (Zen 5) and one of family 25 model 17 (Zen 4),
    same brand string and flags, had one id; the family, model and L1d size now separate them."""
    fp = fingerprint("cpu")
    zen5 = {**fp, "cpu_model": "AMD EPYC", "cpu_family": 26, "cpu_model_number": 2, "cpu_cache_kib": {"l1d": 96}}
    zen4 = {**zen5, "cpu_family": 25, "cpu_model_number": 17, "cpu_cache_kib": {"l1d": 32}}
    assert fingerprint_id(zen5) != fingerprint_id(zen4)
    assert "-f26m2-" in fingerprint_id(zen5) and "-f25m17-" in fingerprint_id(zen4)
    assert set(differences(zen5, zen4)) == {"cpu_family", "cpu_model_number", "cpu_cache_kib"}


def test_cpu_fingerprint_has_no_cuda_figures():
    fp = fingerprint("cpu")
    assert set(KEY_FIELDS) <= set(fp)
    assert fp["device_type"] == "cpu" and fp["gpu_name"] is None and fp["cuda"] is None
    assert fp["torch"] == torch.__version__ and fp["threads"] == torch.get_num_threads()


def test_id_is_stable_and_changes_with_every_key_field():
    fp = fingerprint("cpu")
    base = fingerprint_id(fp)
    assert base == fingerprint_id(dict(fp)) and base.startswith("cpu-")
    for k, v in [
        ("threads", 99),
        ("torch", "9.9"),
        ("torchao", None if fp["torchao"] else "0.18.0"),  # no quant extra installed: another baseline
        ("cpu_flags", ["amx_bf16"]),
        ("gpu_name", "H100"),
        ("driver", "570"),
        ("cpu_stepping", 99),
        ("cpu_cache_kib", {"l2": 1}),
    ]:
        assert fingerprint_id({**fp, k: v}) != base, k
    assert fingerprint_id({**fp, "platform": "other"}) == base  # informative fields do not key
    assert differences(fp, {**fp, "threads": 99}) == {"threads": (fp["threads"], 99)}


def test_a_torchrun_world_size_keys_its_own_baselines(monkeypatch):
    """Each rank fingerprints itself with torchrun's WORLD_SIZE: a 4-rank run is gated against 4-rank
    baselines only, never against a single process's (or a 2-rank run's)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    single = fingerprint("cpu")
    monkeypatch.setenv("WORLD_SIZE", "4")
    four = fingerprint("cpu")
    assert (single["world_size"], four["world_size"]) == (1, 4)
    assert fingerprint_id(four) != fingerprint_id(single)
    assert differences(single, four) == {"world_size": (1, 4)}
