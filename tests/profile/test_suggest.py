"""The suggestion rules: each fires at its documented threshold and not below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.profile import suggest
from perfgate.profile.suggest import Thresholds


def test_blocks_share_fires_above_ninety_percent() -> None:
    assert suggest.blocks_share(0.90, 24) is None
    s = suggest.blocks_share(0.95, 24)
    assert s and s.severity == "info" and "24 blocks" in s.finding and "torch.compile the model" in s.fixes
    assert suggest.blocks_share(None, 0) is None


def test_attention_share_fires_at_seventy_percent() -> None:
    assert suggest.attention_share(0.69) is None
    s = suggest.attention_share(0.70)
    assert s and s.severity == "warning" and any("scaled_dot_product_attention" in f for f in s.fixes)


def test_block_variance_uses_the_guides_half_millisecond() -> None:
    assert suggest.block_variance(0.5, 24) is None
    assert suggest.block_variance(0.51, 24) is not None
    assert suggest.block_variance(3.0, 1) is None  # one block has no spread


def test_patch_embedding_share_fires_above_ten_percent() -> None:
    assert suggest.patch_embedding_share(0.10) is None
    s = suggest.patch_embedding_share(0.2)
    assert s and "20%" in s.finding and any("channels_last" in f for f in s.fixes)


@pytest.mark.parametrize(
    ("speedup", "band"),
    [
        (1.0, "CPU-bound or memory-bound"),
        (1.49, "CPU-bound or memory-bound"),
        (1.5, "good GPU utilisation"),
        (2.0, "good GPU utilisation"),
        (2.01, "excellent tensor core usage"),
        (3.2, "excellent tensor core usage"),
    ],
)
def test_speedup_bands_on_a_gpu(speedup: float, band: str) -> None:
    assert suggest.speedup_band(speedup, "cuda") == band


def test_speedup_bands_on_a_cpu_say_nothing_of_gpus() -> None:
    assert [suggest.speedup_band(s, "cpu") for s in (1.0, 1.5, 2.5)] == [
        "little gain on this CPU",
        "the CPU's reduced-precision units help",
        "large gain on this CPU",
    ]
    assert list(suggest.speedup_bands("cpu")) == ["< 1.5x", "1.5-2x", "> 2x"]


def test_precision_speedup_reading_depends_on_the_device() -> None:
    gpu = suggest.precision_speedup("fp16", 1.2, "cuda")
    assert gpu and gpu.severity == "warning" and "1.20x" in gpu.finding
    cpu = suggest.precision_speedup("bf16", 1.2, "cpu")
    assert cpu and cpu.severity == "info" and "AMX" in cpu.why and "amx_bf16" in cpu.fixes[0]
    good = suggest.precision_speedup("bf16", 1.8, "cuda")
    assert good and good.severity == "info" and "adopt bf16" in good.fixes[0]
    assert suggest.precision_speedup("bf16", None, "cuda") is None


def test_memory_rules() -> None:
    assert suggest.peak_memory(8 * 1024) is None
    assert suggest.peak_memory(9 * 1024) is not None
    low = suggest.memory_headroom(0.05, "cuda")
    assert low and low.severity == "warning" and "GPU memory" in low.finding
    high = suggest.memory_headroom(0.7, "cpu")
    assert high and high.severity == "info" and "system memory" in high.finding
    assert suggest.memory_headroom(0.3, "cuda") is None
    assert suggest.memory_headroom(None, "cuda") is None


def test_gpu_utilisation_and_unreliable() -> None:
    assert suggest.gpu_utilisation(50.0) is None
    assert suggest.gpu_utilisation(30.0) is not None
    assert suggest.unreliable_measurement(None) is None
    s = suggest.unreliable_measurement("GPU clocks were slowed")
    assert s and s.finding == "GPU clocks were slowed"


def test_suggest_runs_every_rule_warnings_first_and_thresholds_are_configurable() -> None:
    out = suggest.suggest(
        device_type="cuda",
        blocks_share_=0.95,
        n_blocks=24,
        block_std_ms=0.1,
        attention_share_=0.8,
        patch_embedding_share_=0.02,
        speedups={"bf16": 1.7, "fp16": 1.1},
        peak_mem_mib=1000.0,
        headroom=0.9,
        gpu_util_mean_pct=95.0,
    )
    rules = [s.rule for s in out]
    assert set(rules) == {"attention_share", "blocks_share", "precision_speedup", "memory_headroom"}
    severities = [s.severity for s in out]
    assert severities == sorted(severities, key=lambda v: v != "warning")
    assert suggest.suggest(device_type="cuda", attention_share_=0.8, thresholds=Thresholds(attention_share=0.9)) == []


def test_timing_rules_are_marked_when_the_measurement_was_unreliable() -> None:
    out = {
        s.rule: s
        for s in suggest.suggest(
            device_type="cpu", block_std_ms=2.0, n_blocks=4, headroom=0.9, unreliable="busy neighbours"
        )
    }
    assert out["block_variance"].finding.endswith("(timings unreliable)")
    assert not out["memory_headroom"].finding.endswith("(timings unreliable)")
    assert out["unreliable"].severity == "warning"


# Advice that only applies on a GPU; none of it may reach a CPU run's suggestions.
GPU_ONLY = ("tensor core", "cuda", "cudnn", "gpu", "nvidia-smi", "graph")


def _every_rule_fires(device_type: str) -> list[suggest.Suggestion]:
    out = suggest.suggest(
        device_type=device_type,
        blocks_share_=0.95,
        n_blocks=24,
        block_std_ms=2.0,
        attention_share_=0.8,
        patch_embedding_share_=0.5,
        speedups={"bf16": 1.1, "fp16": 2.5},
        peak_mem_mib=9 * 1024,
        headroom=0.05,
        gpu_util_mean_pct=10.0,
        unreliable="busy neighbours",
    )
    return out


def test_a_cpu_run_gets_no_gpu_advice() -> None:
    cpu = _every_rule_fires("cpu")
    assert {s.rule for s in cpu} == {
        "unreliable",
        "attention_share",
        "block_variance",
        "patch_embedding_share",
        "blocks_share",
        "peak_memory",
        "memory_headroom",
        "precision_speedup",
    }  # every rule but the GPU's utilisation
    for s in cpu:
        text = " ".join([s.finding, s.why, *s.fixes]).lower()
        assert not [w for w in GPU_ONLY if w in text], (s.rule, text)
    # The same numbers on a GPU do get the GPU's advice: the check above can fail.
    gpu = " ".join(" ".join([s.why, *s.fixes]) for s in _every_rule_fires("cuda")).lower()
    assert all(w in gpu for w in ("tensor core", "cuda graphs", "cudnn", "nvidia-smi"))


def test_every_suggestion_names_its_section_of_perfgates_docs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "profiling.md").read_text()
    for s in _every_rule_fires("cuda") + _every_rule_fires("cpu"):
        assert s.source == f"docs/profiling.md#{s.rule}" and "seed" not in s.source
        assert f'<a id="{s.rule}"></a>' in doc, f"docs/profiling.md has no section for {s.rule}"
