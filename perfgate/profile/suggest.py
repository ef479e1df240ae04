"""Optimisation suggestions from a profile: small documented rules, each a pure function.

| rule | fires when | source |
|---|---|---|
| blocks_share | transformer / residual blocks take > 90% of the forward | V-JEPA 2 guide (seed 003), "Transformer blocks are slowest" |
| attention_share | attention modules take >= 70% of the forward | V-JEPA 2 guide, "Common bottlenecks: attention layers" |
| block_variance | std of the per-block times across blocks > 0.5 ms | V-JEPA 2 guide, "High variance between blocks" |
| patch_embedding_share | the patch embedding takes > 10% of the forward | V-JEPA 2 guide, "Patch embedding is slow" |
| precision_speedup | always, with the guide's bands: < 1.5x, 1.5-2x, > 2x | V-JEPA 2 guide, "Interpreting FP32 vs FP16" |
| peak_memory | peak memory > 8 GiB | V-JEPA 2 guide, "High memory usage" (its bar for ViT-Large) |
| memory_headroom | < 10% of the device's memory left at peak (warning); > 50% left (info) | Inferix guide (seed 002), resource use |
| gpu_utilisation | mean GPU utilisation < 50% while measuring | Inferix guide / V-JEPA 2 table, "Memory bandwidth: low GPU utilisation" |
| unreliable | telemetry saw clock slowdowns, low clocks or busy neighbours (see perfgate.telemetry) | V-JEPA 2 guide ("check GPU temperature, consistent clocks"); nvbench's 75% clock threshold |

Thresholds live in `Thresholds`; every rule returns a `Suggestion` or None and never reads
anything but its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

VJEPA = "V-JEPA 2 profiling guide (seed 003)"
INFERIX = "Inferix profiling guide (seed 002)"

INFO, WARNING = "info", "warning"
TIMING_RULES = ("blocks_share", "attention_share", "block_variance", "patch_embedding_share", "precision_speedup")


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    rule: str
    severity: str  # "info" or "warning"
    finding: str  # what was measured
    why: str  # the likely cause
    fixes: tuple[str, ...]
    source: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    blocks_share: float = 0.90
    attention_share: float = 0.70
    block_std_ms: float = 0.5
    patch_embedding_share: float = 0.10
    speedup_low: float = 1.5
    speedup_high: float = 2.0
    peak_memory_mib: float = 8 * 1024
    headroom_low: float = 0.10
    headroom_high: float = 0.50
    gpu_util_low_pct: float = 50.0


DEFAULT = Thresholds()


def blocks_share(share: float | None, n_blocks: int, t: Thresholds = DEFAULT) -> Suggestion | None:
    if share is None or share <= t.blocks_share:
        return None
    return Suggestion(
        rule="blocks_share",
        severity=INFO,
        finding=f"{share:.0%} of the forward is in the {n_blocks} blocks (> {t.blocks_share:.0%})",
        why="expected: transformer blocks carry the compute; speed comes from doing less or faster math there",
        fixes=(
            "use a smaller size",
            "reduce the input resolution or frame count",
            "run in bf16/fp16 (see the precision comparison)",
            "torch.compile the model",
        ),
        source=VJEPA,
    )


def attention_share(share: float | None, t: Thresholds = DEFAULT) -> Suggestion | None:
    if share is None or share < t.attention_share:
        return None
    return Suggestion(
        rule="attention_share",
        severity=WARNING,
        finding=f"{share:.0%} of the forward is in attention (>= {t.attention_share:.0%})",
        why="attention grows with the square of the sequence length and is often run by a slow kernel",
        fixes=(
            "use a fused kernel: scaled_dot_product_attention (flash / efficient / cuDNN backends)",
            "reduce the sequence length (resolution, frames, cache window)",
        ),
        source=VJEPA,
    )


def block_variance(std_ms: float | None, n_blocks: int, t: Thresholds = DEFAULT) -> Suggestion | None:
    if std_ms is None or n_blocks < 2 or std_ms <= t.block_std_ms:
        return None
    return Suggestion(
        rule="block_variance",
        severity=WARNING,
        finding=f"identical blocks differ: std across {n_blocks} blocks {std_ms:.2f} ms (> {t.block_std_ms} ms)",
        why="memory-bandwidth contention or thermal throttling (identical blocks should cost the same)",
        fixes=(
            "check the GPU temperature and clock-event reasons in the telemetry",
            "lock or stabilise the GPU clocks",
            "batch work to amortise per-block overhead",
        ),
        source=VJEPA,
    )


def patch_embedding_share(share: float | None, t: Thresholds = DEFAULT) -> Suggestion | None:
    if share is None or share <= t.patch_embedding_share:
        return None
    return Suggestion(
        rule="patch_embedding_share",
        severity=WARNING,
        finding=f"the patch embedding takes {share:.0%} of the forward (> {t.patch_embedding_share:.0%})",
        why="its Conv3d is memory-bound",
        fixes=(
            "reduce the input resolution",
            "use channels_last(_3d) memory format",
            "enable the cuDNN autotuner (torch.backends.cudnn.benchmark = True)",
        ),
        source=VJEPA,
    )


def speedup_band(speedup: float, t: Thresholds = DEFAULT) -> str:
    """The V-JEPA guide's reading of a reduced-precision speed-up over fp32."""
    if speedup < t.speedup_low:
        return "CPU-bound or memory-bound"
    if speedup <= t.speedup_high:
        return "good GPU utilisation"
    return "excellent tensor core usage"


def precision_speedup(
    dtype: str, speedup: float | None, device_type: str, t: Thresholds = DEFAULT
) -> Suggestion | None:
    if speedup is None:
        return None
    band = speedup_band(speedup, t)
    low = speedup < t.speedup_low
    fixes: tuple[str, ...]
    if low:
        fixes = (
            "look for host overhead (many small ops: torch.compile, CUDA graphs)",
            "raise the batch so matmuls are large enough to use tensor cores",
        )
    else:
        fixes = (f"adopt {dtype} (autocast) if its accuracy against fp32 is within your tolerance",)
    why = (
        f"the guide's bands: < {t.speedup_low}x CPU-bound or memory-bound, {t.speedup_low}-{t.speedup_high}x good GPU "
        f"utilisation, > {t.speedup_high}x excellent tensor core usage"
    )
    if device_type == "cpu":
        why += (
            "; on the CPU the bands describe GPUs: bf16 gains come from AMX / AVX512-BF16 (see the fingerprint's "
            "cpu_flags), fp16 is often emulated"
        )
    return Suggestion(
        rule="precision_speedup",
        severity=WARNING if low and device_type == "cuda" else INFO,
        finding=f"{dtype} speed-up over fp32 {speedup:.2f}x: {band}",
        why=why,
        fixes=fixes,
        source=VJEPA,
    )


def peak_memory(peak_mib: float | None, t: Thresholds = DEFAULT) -> Suggestion | None:
    if peak_mib is None or peak_mib <= t.peak_memory_mib:
        return None
    return Suggestion(
        rule="peak_memory",
        severity=WARNING,
        finding=f"peak memory {peak_mib / 1024:.1f} GiB (> {t.peak_memory_mib / 1024:.0f} GiB, the guide's bar for ViT-Large)",
        why="intermediate activations are kept",
        fixes=("activation checkpointing (training)", "reduce the batch size", "run in bf16/fp16"),
        source=VJEPA,
    )


def memory_headroom(headroom: float | None, device_type: str, t: Thresholds = DEFAULT) -> Suggestion | None:
    if headroom is None:
        return None
    where = "GPU memory" if device_type == "cuda" else "available system memory"
    if headroom < t.headroom_low:
        return Suggestion(
            rule="memory_headroom",
            severity=WARNING,
            finding=f"only {headroom:.0%} of {where} is left at the peak (< {t.headroom_low:.0%})",
            why="little room for allocator fragmentation or a longer input: out-of-memory is near",
            fixes=("reduce the batch or sequence length", "run in bf16/fp16", "free caches between phases"),
            source=INFERIX,
        )
    if headroom > t.headroom_high:
        return Suggestion(
            rule="memory_headroom",
            severity=INFO,
            finding=f"{headroom:.0%} of {where} is still free at the peak (> {t.headroom_high:.0%})",
            why="the device could hold more work at once",
            fixes=("a larger batch (or more frames per call) may raise throughput",),
            source=INFERIX,
        )
    return None


def gpu_utilisation(mean_util_pct: float | None, t: Thresholds = DEFAULT) -> Suggestion | None:
    if mean_util_pct is None or mean_util_pct >= t.gpu_util_low_pct:
        return None
    return Suggestion(
        rule="gpu_utilisation",
        severity=WARNING,
        finding=f"mean GPU utilisation {mean_util_pct:.0f}% while measuring (< {t.gpu_util_low_pct:.0f}%)",
        why="the GPU waits on the host: kernel launches, Python overhead or data movement",
        fixes=(
            "CUDA graphs (variant cudagraphs or compile-reduce-overhead)",
            "torch.compile to fuse small ops",
            "a larger batch",
            "keep data on the device",
        ),
        source=INFERIX,
    )


def unreliable_measurement(unreliable: str | None) -> Suggestion | None:
    if not unreliable:
        return None
    return Suggestion(
        rule="unreliable",
        severity=WARNING,
        finding=unreliable,
        why="clocks or neighbours changed during the measurement: the timings describe the machine, not the code",
        fixes=(
            "re-run on an idle machine",
            "let the GPU cool, check its airflow and power limit",
            "lock clocks (nvidia-smi -lgc) on a benchmark machine",
        ),
        source=VJEPA,
    )


def suggest(
    *,
    device_type: str,
    blocks_share_: float | None = None,
    n_blocks: int = 0,
    block_std_ms: float | None = None,
    attention_share_: float | None = None,
    patch_embedding_share_: float | None = None,
    speedups: Mapping[str, float] | None = None,
    peak_mem_mib: float | None = None,
    headroom: float | None = None,
    gpu_util_mean_pct: float | None = None,
    unreliable: str | None = None,
    thresholds: Thresholds = DEFAULT,
) -> list[Suggestion]:
    """Every rule on the numbers of one profile; warnings first."""
    t = thresholds
    found = [
        unreliable_measurement(unreliable),
        attention_share(attention_share_, t),
        block_variance(block_std_ms, n_blocks, t),
        patch_embedding_share(patch_embedding_share_, t),
        blocks_share(blocks_share_, n_blocks, t),
        gpu_utilisation(gpu_util_mean_pct, t),
        peak_memory(peak_mem_mib, t),
        memory_headroom(headroom, device_type, t),
        *(precision_speedup(dtype, s, device_type, t) for dtype, s in (speedups or {}).items()),
    ]
    out = [s for s in found if s is not None]
    if unreliable:
        # Timing-based readings of an unreliable measurement may describe the neighbours.
        out = [replace(s, finding=s.finding + " (timings unreliable)") if s.rule in TIMING_RULES else s for s in out]
    return sorted(out, key=lambda s: s.severity != WARNING)
