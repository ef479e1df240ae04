"""V-JEPA 2 video encoder: a ViT over 3D tubelets with 3D rotary position embedding.

Source (read for architecture facts and state-dict key names only): facebookresearch/vjepa2,
`src/models/vision_transformer.py` (VisionTransformer, `vit_{large,huge,giant_xformers}_rope`),
`src/models/utils/modules.py` (Block, RoPEAttention, MLP, rotate_queries_or_keys),
`src/models/utils/patch_embed.py` (PatchEmbed3D).

Architecture:
- Patch embedding: Conv3d(3, D, kernel = stride = (tubelet 2, patch 16, patch 16)); tokens are the
  flattened (T/2, H/16, W/16) grid in raster order (time, then height, then width).
- `depth` pre-norm blocks: x + attn(LN(x)), then x + mlp(LN(x)); LayerNorm eps 1e-6, qkv bias,
  GELU MLP. No learned or sin/cos position embedding: RoPE variant only.
- Attention rotates q and k over (time, height, width) with positions computed from the actual input
  shape in every forward call, so any clip size runs without rebuilding the model. Per axis the
  upstream rule rotates `2 * ((head_dim // 3) // 2)` dims; the rest of the head is left unrotated.
  head_dim 64 (large, huge, giant, medium): 20 / 20 / 20 rotated + 4 unrotated;
  head_dim 24 (tiny): 8 / 8 / 8 + 0.
- Final LayerNorm.

One step (what a V-JEPA 2 profile times): encoder forward of a clip
video [B, 3, T, H, W] -> tokens [B, (T / 2) * (H / 16) * (W / 16), D]; at the full-size defaults
[B, 3, 16, 256, 256] -> [B, 2048, D]. Masking, `out_layers` and dropout / drop-path (training only)
are not part of the benchmarked step and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CONFIGS",
    "OUTPUT_KIND",
    "VJEPA2Encoder",
    "VJEPA2EncoderConfig",
    "example_inputs",
    "step_info",
]

OUTPUT_KIND: str = "tensor"


@dataclass(frozen=True, kw_only=True)
class VJEPA2EncoderConfig:
    embed_dim: int
    depth: int
    num_heads: int
    mlp_hidden_dim: int  # explicit: giant's 48/11 ratio gives 6144 hidden
    patch_size: int = 16
    tubelet_size: int = 2
    in_chans: int = 3
    qkv_bias: bool = True
    norm_eps: float = 1e-6
    rope_base: float = 10000.0
    # Default clip shape for example_inputs / step_info; the model accepts any divisible shape.
    img_size: int = 256
    num_frames: int = 16

    def __post_init__(self) -> None:
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} is not divisible by num_heads {self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for pairwise rotation")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def rope_axis_dim(self) -> int:
        """Rotated dims per axis (time, height, width): upstream's 2 * ((head_dim // 3) // 2)."""
        return 2 * ((self.head_dim // 3) // 2)


CONFIGS: dict[str, VJEPA2EncoderConfig] = {
    # CPU CI: 32 tokens, eager fp32 about 1 ms on 2 threads.
    "tiny": VJEPA2EncoderConfig(embed_dim=96, depth=2, num_heads=4, mlp_hidden_dim=384, img_size=64, num_frames=4),
    # CPU size where compile / bf16 / int8 show an effect: 256 tokens, head_dim 64 (same 20/20/20+4
    # RoPE split as the full sizes), all Linear dims multiples of 16.
    "medium": VJEPA2EncoderConfig(embed_dim=384, depth=6, num_heads=6, mlp_hidden_dim=1536, img_size=128, num_frames=8),
    # Full sizes (vit_large_rope, vit_huge_rope, vit_giant_xformers_rope).
    "large": VJEPA2EncoderConfig(embed_dim=1024, depth=24, num_heads=16, mlp_hidden_dim=4096),
    "huge": VJEPA2EncoderConfig(embed_dim=1280, depth=32, num_heads=16, mlp_hidden_dim=5120),
    "giant": VJEPA2EncoderConfig(embed_dim=1408, depth=40, num_heads=22, mlp_hidden_dim=6144),
}


def rope_tables(
    grid: tuple[int, int, int], axis_dim: int, base: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin tables (N, 3 * axis_dim) for tokens on a (T, H, W) grid in raster order, in fp32.

    Per axis: angle = pos * base ** (-j / (axis_dim / 2)), j < axis_dim / 2. Upstream tiles the
    axis_dim / 2 angles ([a, a]) rather than interleaving them ([a0, a0, a1, a1]) although it
    rotates interleaved pairs (a known quirk, vjepa2 PR #15); the pretrained checkpoints depend on
    it, so it is kept. The three axes' tables are concatenated so one rotation covers all three.
    Angles are computed in fp32 and cast to the activation dtype by the caller (upstream computes
    them in the activation dtype: identical in fp32, more accurate under bf16 autocast).
    """
    grid_t, grid_h, grid_w = grid
    half = axis_dim // 2
    omega = base ** -(torch.arange(half, device=device, dtype=torch.float32) / half)  # (d/2,)
    angles = []
    for axis, size in enumerate(grid):
        pos = torch.arange(size, device=device, dtype=torch.float32)  # (size,)
        ang = (pos[:, None] * omega).repeat(1, 2)  # (size, d), tiled like upstream
        shape = [1, 1, 1, axis_dim]
        shape[axis] = size
        angles.append(ang.view(shape).expand(grid_t, grid_h, grid_w, axis_dim))
    ang = torch.cat(angles, dim=-1).reshape(grid_t * grid_h * grid_w, 3 * axis_dim)  # (N, 3d)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first cos.shape[-1] dims of x (B, heads, N, head_dim) in adjacent pairs."""
    rotated = cos.shape[-1]
    xr, xp = x[..., :rotated], x[..., rotated:]  # (B, h, N, R), (B, h, N, head_dim - R)
    x1, x2 = xr.unflatten(-1, (-1, 2)).unbind(-1)  # (B, h, N, R/2) each
    xr_perp = torch.stack((-x2, x1), dim=-1).flatten(-2)  # (B, h, N, R)
    out = xr * cos + xr_perp * sin  # (B, h, N, R)
    if xp.shape[-1] == 0:
        return out
    return torch.cat((out, xp), dim=-1)  # (B, h, N, head_dim)


class PatchEmbed3D(nn.Module):
    def __init__(self, config: VJEPA2EncoderConfig) -> None:
        super().__init__()
        kernel = (config.tubelet_size, config.patch_size, config.patch_size)
        self.proj = nn.Conv3d(config.in_chans, config.embed_dim, kernel_size=kernel, stride=kernel)

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        return self.proj(video)  # (B, D, T/2, H/16, W/16)


class RoPEAttention(nn.Module):
    def __init__(self, config: VJEPA2EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.embed_dim, 3 * config.embed_dim, bias=config.qkv_bias)
        self.proj = nn.Linear(config.embed_dim, config.embed_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).unflatten(-1, (3, self.num_heads, self.head_dim))  # (B, N, 3, h, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, h, N, hd) each
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        x = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, hd)
        x = x.transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        return self.proj(x)


class MLP(nn.Module):
    def __init__(self, config: VJEPA2EncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.embed_dim, config.mlp_hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(config.mlp_hidden_dim, config.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))  # (B, N, D)


class Block(nn.Module):
    def __init__(self, config: VJEPA2EncoderConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.embed_dim, eps=config.norm_eps)
        self.attn = RoPEAttention(config)
        self.norm2 = nn.LayerNorm(config.embed_dim, eps=config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)  # (B, N, D)
        return x + self.mlp(self.norm2(x))  # (B, N, D)


class VJEPA2Encoder(nn.Module):
    """forward(video (B, 3, T, H, W)) -> tokens (B, T/2 * H/16 * W/16, D).

    T must be a multiple of tubelet_size and H, W of patch_size (Conv3d would silently drop the
    remainder, as upstream does); example_inputs and step_info check this.
    """

    def __init__(self, config: VJEPA2EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed3D(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.embed_dim, eps=config.norm_eps)
        # Weights keep PyTorch's default init. Upstream uses truncated normal (std 0.02), divides
        # attn.proj / mlp.fc2 of block i by sqrt(2 * (i + 1)) and zeroes Linear / Conv biases; with
        # random inputs that leaves attention almost uniform, so positions barely reach the output
        # (tiny: 6e-4 vs 0.12 here when patch columns are reordered) and accuracy checks of lossy
        # variants would see a near-trivial model. Defaults also give non-zero biases.

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(video)  # (B, D, T', H', W')
        grid = (x.shape[2], x.shape[3], x.shape[4])
        x = x.flatten(2).transpose(1, 2)  # (B, N, D), N = T' * H' * W' in raster order
        # Positions come from the actual grid, so any clip size works without rebuilding.
        cos, sin = rope_tables(grid, self.config.rope_axis_dim, self.config.rope_base, x.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # (N, 3 * axis_dim)
        for block in self.blocks:
            x = block(x, cos, sin)  # (B, N, D)
        return self.norm(x)  # (B, N, D)


_OPTIONS = ("img_size", "num_frames")


def _clip_shape(config: VJEPA2EncoderConfig, options: dict[str, object]) -> tuple[int, int]:
    """(img_size, num_frames) from the options, defaulting to the config's; validated."""
    for name in options:
        if name not in _OPTIONS:
            raise TypeError(f"unknown option {name!r} for vjepa2_encoder; expected one of {_OPTIONS}")
    img_size = options.get("img_size", config.img_size)
    num_frames = options.get("num_frames", config.num_frames)
    for name, value, multiple, what in (
        ("img_size", img_size, config.patch_size, "patch_size"),
        ("num_frames", num_frames, config.tubelet_size, "tubelet_size"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        if value % multiple:
            raise ValueError(f"{name}={value} is not divisible by {what}={multiple}")
    return img_size, num_frames


def example_inputs(
    config: VJEPA2EncoderConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: object,
) -> tuple[torch.Tensor, ...]:
    """(video,) with video (batch, 3, num_frames, img_size, img_size), standard normal like a
    mean/std-normalised clip.

    Options: img_size (default config.img_size; a multiple of patch_size, square frames),
    num_frames (default config.num_frames; a multiple of tubelet_size).
    """
    img_size, num_frames = _clip_shape(config, options)
    generator = torch.Generator().manual_seed(seed)
    video = torch.randn(batch, config.in_chans, num_frames, img_size, img_size, generator=generator)  # (B, 3, T, H, W)
    return (video.to(device, dtype),)


def step_info(config: VJEPA2EncoderConfig, *, batch: int = 1, **options: object) -> dict[str, float]:
    """One forward encodes num_frames frames per clip: {"frames": num_frames * batch}."""
    _, num_frames = _clip_shape(config, options)
    return {"frames": float(num_frames * batch)}
