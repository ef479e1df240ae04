"""PhysicsNeMo profiling tutorial workload: one pre-norm transformer block.

Source: NVIDIA/physicsnemo `docs/test_scripts/profiling/` (its profiling tutorial and
performance guide). Block(dim 1024, 32 heads, qkv_bias False,
dropout 0): x + attn(LayerNorm(x)), then x + mlp(LayerNorm(x)), MLP hidden 4 * dim with GELU
after both fc1 and fc2 as the tutorial writes it (~12.59M parameters).

The tutorial's baseline attention is explicit (q @ k^T, softmax, @ v); its optimised version uses
scaled_dot_product_attention, selected here by `Config.fused_attention`.

One step: a batch [B, N, C] = [8, 2048, 1024] through the block (inference), or forward, loss,
backward and SGD step (training). The tutorial's dataset draws each sample from
normal(loc=idx, scale=idx) on the host with numpy (its bottleneck); the fix draws it on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class PhysicsNeMoBlockConfig:
    dim: int = 1024
    seq_len: int = 2048
    num_heads: int = 32
    mlp_ratio: float = 4.0
    qkv_bias: bool = False
    batch: int = 8
    fused_attention: bool = True  # the tutorial's optimised versions use SDPA


CONFIGS: dict[str, PhysicsNeMoBlockConfig] = {
    "tiny": PhysicsNeMoBlockConfig(dim=64, seq_len=64, num_heads=4, batch=2),
    "medium": PhysicsNeMoBlockConfig(dim=256, seq_len=512, num_heads=8, batch=4),
    "full": PhysicsNeMoBlockConfig(),
}


class Attention(nn.Module):
    def __init__(self, config: PhysicsNeMoBlockConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.dim // config.num_heads
        self.scale = self.head_dim**-0.5
        self.fused = config.fused_attention
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=config.qkv_bias)
        self.proj = nn.Linear(config.dim, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, Dh)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, config: PhysicsNeMoBlockConfig) -> None:
        super().__init__()
        hidden = int(config.dim * config.mlp_ratio)
        self.fc1 = nn.Linear(config.dim, hidden)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(hidden, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The tutorial applies GELU after fc2 too; kept for fidelity of the workload.
        return self.gelu(self.fc2(self.gelu(self.fc1(x))))


class PhysicsNeMoBlock(nn.Module):
    def __init__(self, config: PhysicsNeMoBlockConfig) -> None:
        super().__init__()
        self.config = config
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = Mlp(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))  # (B, N, C)
        return x + self.mlp(self.norm2(x))


def example_inputs(
    config: PhysicsNeMoBlockConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: object,
) -> tuple[torch.Tensor, ...]:
    """One batch [batch * config.batch, seq_len, dim]; `batch` multiplies the tutorial's batch."""
    if options:
        raise TypeError(f"physicsnemo-block takes no option {', '.join(map(repr, options))}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch * config.batch, config.seq_len, config.dim, generator=g)
    return (x.to(device, dtype),)


def step_info(config: PhysicsNeMoBlockConfig, *, batch: int = 1, **options: object) -> dict[str, float]:
    if options:  # as example_inputs: a misspelt option must not be counted silently
        raise TypeError(f"physicsnemo-block takes no option {', '.join(map(repr, options))}")
    return {"examples": float(batch * config.batch)}


OUTPUT_KIND = "tensor"


def host_batch(shape: tuple[int, ...], *, index: int, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
    """The tutorial's data path: numpy normal(loc=idx, scale=idx) per sample on the host, then a copy."""
    base = index * shape[0]
    rng = np.random.default_rng(index)
    samples = [
        rng.normal(loc=i, scale=max(i, 1), size=shape[1:]).astype(np.float32) for i in range(base, base + shape[0])
    ]
    return torch.from_numpy(np.stack(samples)).to(device, dtype)


def device_batch(shape: tuple[int, ...], *, index: int, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
    """The tutorial's fix: draw the same distribution directly on the device."""
    base = index * shape[0]
    loc = torch.arange(base, base + shape[0], device=device, dtype=torch.float32).view(-1, *([1] * (len(shape) - 1)))
    g = torch.Generator(device=device).manual_seed(index)
    noise = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    return (loc + noise * loc.clamp(min=1)).to(dtype)
