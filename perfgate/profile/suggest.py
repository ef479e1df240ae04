"""Optimisation suggestions from a profile: small documented rules, each a pure function.

| rule | fires when |
|---|---|
| blocks_share | transformer / residual blocks take > 90% of the forward |
| attention_share | attention modules take >= 70% of the forward |
| block_variance | std of the per-block times across blocks > 0.5 ms |
| patch_embedding_share | the patch embedding takes > 10% of the forward |
| precision_speedup | always, read in bands: < 1.5x, 1.5-2x, > 2x (GPU and CPU bands differ) |
| peak_memory | peak memory > 8 GiB |
| memory_headroom | < 10% of the device's memory left at peak (warning); > 50% left (info) |
| gpu_utilisation | CUDA only: mean GPU utilisation < 50% while measuring |
| unreliable | telemetry saw clock slowdowns, low clocks or busy neighbours (see perfgate.measure.telemetry) |

Each suggestion's `source` is the section of docs/profiling.md that explains its rule: a user's
message names only perfgate's own documents. Advice depends on the device: a CPU run gets no
tensor-core, CUDA-graph, cuDNN or GPU-clock advice. Thresholds live in `Thresholds`; every rule
returns a `Suggestion` or None and never reads anything but its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from perfgate.record import RecordBlock

DOC = "docs/profiling.md"


def _source(rule: str) -> str:
    return f"{DOC}#{rule}"  # the section of perfgate's docs that explains the rule


INFO, WARNING = "info", "warning"
TIMING_RULES = ("blocks_share", "attention_share", "block_variance", "patch_embedding_share", "precision_speedup")


@dataclass(frozen=True, kw_only=True)
class Suggestion(RecordBlock):
    """One rule's advice, as a profile's report holds it (`PointReport.suggestions`)."""

    rule: str
    severity: str  # "info" or "warning"
    finding: str  # what was measured
    why: str  # the likely cause
    fixes: tuple[str, ...]
    source: str


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
        source=_source("blocks_share"),
    )


def attention_share(share: float | None, device_type: str = "cuda", t: Thresholds = DEFAULT) -> Suggestion | None:
    if share is None or share < t.attention_share:
        return None
    kernel = (
        "use a fused kernel: scaled_dot_product_attention (flash / efficient / cuDNN backends)"
        if device_type == "cuda"
        else "use a fused kernel: scaled_dot_product_attention (its CPU flash-attention kernel)"
    )
    return Suggestion(
        rule="attention_share",
        severity=WARNING,
        finding=f"{share:.0%} of the forward is in attention (>= {t.attention_share:.0%})",
        why="attention grows with the square of the sequence length and is often run by a slow kernel",
        fixes=(kernel, "reduce the sequence length (resolution, frames, cache window)"),
        source=_source("attention_share"),
    )


def block_variance(
    std_ms: float | None, n_blocks: int, device_type: str = "cuda", t: Thresholds = DEFAULT
) -> Suggestion | None:
    if std_ms is None or n_blocks < 2 or std_ms <= t.block_std_ms:
        return None
    if device_type == "cuda":
        why = "memory-bandwidth contention or thermal throttling (identical blocks should cost the same)"
        fixes = (
            "check the GPU temperature and clock-event reasons in the telemetry",
            "lock or stabilise the GPU clocks",
            "batch work to amortise per-block overhead",
        )
    else:
        why = "other processes or CPU frequency changes during the run (identical blocks should cost the same)"
        fixes = (
            "check the telemetry's CPU utilisation for other processes",
            "run on an idle machine, with the CPU frequency governor set to performance",
            "batch work to amortise per-block overhead",
        )
    return Suggestion(
        rule="block_variance",
        severity=WARNING,
        finding=f"identical blocks differ: std across {n_blocks} blocks {std_ms:.2f} ms (> {t.block_std_ms} ms)",
        why=why,
        fixes=fixes,
        source=_source("block_variance"),
    )


def patch_embedding_share(share: float | None, device_type: str = "cuda", t: Thresholds = DEFAULT) -> Suggestion | None:
    if share is None or share <= t.patch_embedding_share:
        return None
    fixes = ("reduce the input resolution", "use channels_last(_3d) memory format")
    if device_type == "cuda":
        fixes += ("enable the cuDNN autotuner (torch.backends.cudnn.benchmark = True)",)
    return Suggestion(
        rule="patch_embedding_share",
        severity=WARNING,
        finding=f"the patch embedding takes {share:.0%} of the forward (> {t.patch_embedding_share:.0%})",
        why="its convolution is memory-bound",
        fixes=fixes,
        source=_source("patch_embedding_share"),
    )


def speedup_bands(device_type: str, t: Thresholds = DEFAULT) -> dict[str, str]:
    """How a reduced-precision speed-up over fp32 reads, band by band, on this device type."""
    if device_type == "cuda":
        names = ("CPU-bound or memory-bound", "good GPU utilisation", "excellent tensor core usage")
    else:
        names = ("little gain on this CPU", "the CPU's reduced-precision units help", "large gain on this CPU")
    lo, hi = t.speedup_low, t.speedup_high
    return dict(zip((f"< {lo:g}x", f"{lo:g}-{hi:g}x", f"> {hi:g}x"), names))


def speedup_band(speedup: float, device_type: str = "cuda", t: Thresholds = DEFAULT) -> str:
    low, mid, high = speedup_bands(device_type, t).values()
    return low if speedup < t.speedup_low else mid if speedup <= t.speedup_high else high


def precision_speedup(
    dtype: str, speedup: float | None, device_type: str, t: Thresholds = DEFAULT
) -> Suggestion | None:
    if speedup is None:
        return None
    low = speedup < t.speedup_low
    why = "bands: " + ", ".join(f"{k} {v}" for k, v in speedup_bands(device_type, t).items())
    if device_type == "cuda":
        low_fixes = (
            "look for host overhead (many small ops: torch.compile, CUDA graphs)",
            "raise the batch so matmuls are large enough to use tensor cores",
        )
    else:
        why += (
            "; on a CPU bf16 matmuls are fast only with AMX or AVX512-BF16 (the fingerprint's cpu_flags) and fp16 "
            "is often emulated"
        )
        low_fixes = (
            f"keep fp32 on this CPU, or run where cpu_flags show amx_{dtype} / avx512_{dtype}",
            "torch.compile the model to fuse the casts and small ops",
        )
    fixes = low_fixes if low else (f"adopt {dtype} (autocast) if its accuracy against fp32 is within your tolerance",)
    return Suggestion(
        rule="precision_speedup",
        severity=WARNING if low and device_type == "cuda" else INFO,
        finding=f"{dtype} speed-up over fp32 {speedup:.2f}x: {speedup_band(speedup, device_type, t)}",
        why=why,
        fixes=fixes,
        source=_source("precision_speedup"),
    )


def peak_memory(peak_mib: float | None, t: Thresholds = DEFAULT) -> Suggestion | None:
    if peak_mib is None or peak_mib <= t.peak_memory_mib:
        return None
    return Suggestion(
        rule="peak_memory",
        severity=WARNING,
        finding=f"peak memory {peak_mib / 1024:.1f} GiB (> {t.peak_memory_mib / 1024:.0f} GiB)",
        why="intermediate activations are kept",
        fixes=("activation checkpointing (training)", "reduce the batch size", "run in bf16/fp16"),
        source=_source("peak_memory"),
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
            source=_source("memory_headroom"),
        )
    if headroom > t.headroom_high:
        return Suggestion(
            rule="memory_headroom",
            severity=INFO,
            finding=f"{headroom:.0%} of {where} is still free at the peak (> {t.headroom_high:.0%})",
            why="the device could hold more work at once",
            fixes=("a larger batch (or more frames per call) may raise throughput",),
            source=_source("memory_headroom"),
        )
    return None


def gpu_utilisation(
    mean_util_pct: float | None, device_type: str = "cuda", t: Thresholds = DEFAULT
) -> Suggestion | None:
    if device_type != "cuda" or mean_util_pct is None or mean_util_pct >= t.gpu_util_low_pct:
        return None  # a CPU run's GPU (if any) idles by design
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
        source=_source("gpu_utilisation"),
    )


def unreliable_measurement(unreliable: str | None, device_type: str = "cuda") -> Suggestion | None:
    if not unreliable:
        return None
    if device_type == "cuda":
        fixes = (
            "re-run on an idle machine",
            "let the GPU cool, check its airflow and power limit",
            "lock clocks (nvidia-smi -lgc) on a benchmark machine",
        )
    else:
        fixes = (
            "re-run on an idle machine (no other processes on its cores)",
            "set the CPU frequency governor to performance on a benchmark machine",
        )
    return Suggestion(
        rule="unreliable",
        severity=WARNING,
        finding=unreliable,
        why="clocks or neighbours changed during the measurement: the timings describe the machine, not the code",
        fixes=fixes,
        source=_source("unreliable"),
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
    d = device_type
    found = [
        unreliable_measurement(unreliable, d),
        attention_share(attention_share_, d, t),
        block_variance(block_std_ms, n_blocks, d, t),
        patch_embedding_share(patch_embedding_share_, d, t),
        blocks_share(blocks_share_, n_blocks, t),
        gpu_utilisation(gpu_util_mean_pct, d, t),
        peak_memory(peak_mem_mib, t),
        memory_headroom(headroom, d, t),
        *(precision_speedup(dtype, s, d, t) for dtype, s in (speedups or {}).items()),
    ]
    out = [s for s in found if s is not None]
    if unreliable:
        # Timing-based readings of an unreliable measurement may describe the neighbours.
        out = [replace(s, finding=s.finding + " (timings unreliable)") if s.rule in TIMING_RULES else s for s in out]
    return sorted(out, key=lambda s: s.severity != WARNING)
