"""Self Forcing causal video DiT (Wan2.1-T2V-1.3B run block-causally), one denoising call per step.

Architecture: the Wan2.1 text-to-video diffusion transformer. A Conv3d patch embedding (patch
(1, 2, 2), 16 latent channels -> dim), then `num_layers` blocks of
  x + gate * self_attn(modulate(LN(x)))     (q/k/v/o, per-channel RMSNorm on q and k, 3D RoPE)
  x + cross_attn(LN_affine(x), text)        (no gate; q from the video, k/v from the text)
  x + gate * ffn(modulate(LN(x)))           (Linear, tanh-GELU, Linear)
with a 6-way AdaLN modulation per latent frame: `time_projection(time_embedding(sinusoid(t)))`
plus a learned [1, 6, dim] `modulation` in each block. The head is LN -> per-frame shift/scale
(time embedding plus a learned [1, 2, dim]) -> Linear(dim, 1*2*2*16), unpatchified to the latent
grid. The output is the flow-matching prediction (noise - x0). RoPE splits head_dim into
time/height/width parts of 44/42/42 dims at head_dim 128, rotating interleaved pairs; the time
position is the absolute latent-frame index, so a block's queries and keys sit at their place in
the video.

Source (facts and state-dict key names only): guandeh17/Self-Forcing `wan/configs/wan_t2v_1_3B.py`,
`wan/modules/causal_model.py` (`CausalWanModel._forward_inference`, `CausalWanSelfAttention`,
`CausalWanAttentionBlock`, `CausalHead`), `wan/modules/model.py` (`WanT2VCrossAttention`,
`WanRMSNorm`, `rope_params`, `sinusoidal_embedding_1d`), `pipeline/causal_inference.py`.
Keys follow upstream exactly (`patch_embedding`, `text_embedding.{0,2}`, `time_embedding.{0,2}`,
`time_projection.1`, `blocks.N.self_attn.{q,k,v,o,norm_q,norm_k}`, `blocks.N.norm3`,
`blocks.N.cross_attn.*`, `blocks.N.ffn.{0,2}`, `blocks.N.modulation`, `head.head`,
`head.modulation`), so the generator weights of a Self Forcing checkpoint load with
`load_state_dict(strict=True)`. No buffers: RoPE angles are computed in the forward.

The step (what the Self Forcing demo runs 5 times per block: timesteps 1000/937.5/833/625 after
timestep warping, then once at t=0 to write the clean block into the cache): one denoising call
for a block of `frames_per_block` = 3 latent frames at block index k,

    forward(noisy_block, timestep, k_cache, v_cache, cross_k, cross_v, block_start) -> flow

  noisy_block  [B, 16, 3, H, W]   latent block, channels then frames (upstream model layout)
  timestep     [B, 3]             diffusion time per latent frame (0..1000)
  k_cache      [layers, B, end, heads, head_dim]   self-attention keys (after RoPE), see below
  v_cache      [layers, B, end, heads, head_dim]   self-attention values
  cross_k      [layers, B, text_len, heads, head_dim]  cross-attention keys of the prompt
  cross_v      [layers, B, text_len, heads, head_dim]  cross-attention values of the prompt
  block_start  int64 scalar tensor: token offset of the block, k * 3 * tokens_per_frame
  returns      [B, 16, 3, H, W]   flow prediction
Full size: H, W = 60, 104 (480x832 video), 1560 tokens per latent frame, 4680 query tokens,
text_len 512, 21 latent frames = 7 blocks, full cache 32760 tokens.

Cache design (why the cache arrives pre-sliced). Upstream keeps per-layer k/v buffers of
`max_tokens` = 21 * tokens_per_frame and, with Python-int offsets, writes the block's new keys and
values at [block_start, end) and attends over buffer[:end], end = block_start + 3 * tokens_per_frame.
Slicing by a tensor offset would make the attended length data-dependent (a graph break in
torch.compile, an unbacked size in torch.export). Here the caller passes the caches already sliced
to the current end: `k_cache = k_buffer[:, :, :end]`, a view of the full
[layers, B, max_tokens, heads, head_dim] buffer (that is what `example_inputs` returns). So:
- the attended length is the cache's static size: the cost grows with the block index (the query
  block attends over all `end` keys: the earlier blocks and itself, i.e. block-causal);
- the new keys (after RoPE) and values are written in place into the last 3 * tokens_per_frame
  positions of the cache, which through the view is buffer[:, :, block_start:end]. Repeating a
  call with the same inputs rewrites the same values, so the step is idempotent;
- `block_start` stays a tensor and gives the RoPE time offset (block_start // tokens_per_frame),
  computed with tensor arithmetic; callers must pass block_start == end - 3 * tokens_per_frame.
Each block index is one static shape (7 at full size), as each compiled upstream step is.

Cross-attention cache: upstream projects the padded prompt embeddings once (on the first call of
a video) with `text_embedding` and each block's `cross_attn.k/norm_k` and `v`, then reuses them;
`cross_attention_cache(text_emb)` computes exactly that, and the step only reads the cache.
Upstream also re-runs `text_embedding` on every call and then discards the result; that dead work
(about 9 GFLOP, 0.07% of a full-size step) is not reproduced, so the prompt embeddings are not a
step input.

Deviations from upstream numerics: RoPE angles and the timestep sinusoid are computed in float32
(float64 upstream) so the step compiles and exports to TensorRT without float64; flash-attn is
replaced by scaled_dot_product_attention; `head.head.weight`, the Linear biases and `norm3.bias`
are zero-initialised upstream and random here, so outputs are not trivially constant before a
checkpoint is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CONFIGS",
    "DEFAULT_BLOCK_INDEX",
    "OUTPUT_KIND",
    "SelfForcingDiT",
    "SelfForcingDiTConfig",
    "example_inputs",
    "step_info",
]

OUTPUT_KIND = "tensor"  # a flow prediction in latent space, not pixels

# Mid-video by default (blocks 0..6 at full size): the cache holds 3 earlier blocks, so the step
# attends over 4 of 7 blocks' tokens, a typical cost; block 0 is the cheapest call.
DEFAULT_BLOCK_INDEX = 3

# Wan VAE: 4x temporal compression, causal, so latent frame 0 decodes to 1 video frame and every
# later latent frame to 4 (21 latent frames -> 81 video frames).
VAE_TEMPORAL_STRIDE = 4

# Timestep of the example block: the first of the 4 denoising steps (pure noise). 1000 is exact
# in bf16/fp16 too, so a low-precision input does not shift the time embedding.
EXAMPLE_TIMESTEP = 1000.0


@dataclass(frozen=True, kw_only=True)
class SelfForcingDiTConfig:
    dim: int = 1536
    ffn_dim: int = 8960
    num_heads: int = 12
    num_layers: int = 30
    freq_dim: int = 256  # sinusoidal timestep embedding width
    text_dim: int = 4096  # umT5-XXL embedding width
    text_len: int = 512  # prompts are zero-padded to this many tokens
    in_dim: int = 16  # latent channels in
    out_dim: int = 16  # latent channels out
    patch_size: tuple[int, int, int] = (1, 2, 2)  # (frames, height, width)
    qk_norm: bool = True
    cross_attn_norm: bool = True  # affine LayerNorm (norm3) before cross-attention
    eps: float = 1e-6
    rope_theta: float = 10000.0
    latent_hw: tuple[int, int] = (60, 104)  # latent grid of a 480x832 video
    num_latent_frames: int = 21  # 81 video frames; sets the cache capacity
    frames_per_block: int = 3  # latent frames denoised together (block-causal attention)

    def __post_init__(self) -> None:
        if self.dim % self.num_heads:
            raise ValueError(f"dim {self.dim} is not divisible by num_heads {self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.patch_size[0] != 1:
            raise ValueError("modulation is per latent frame: the temporal patch size must be 1")
        if self.latent_hw[0] % self.patch_size[1] or self.latent_hw[1] % self.patch_size[2]:
            raise ValueError(f"latent_hw {self.latent_hw} is not divisible by patch {self.patch_size}")
        if self.num_latent_frames % self.frames_per_block:
            raise ValueError("num_latent_frames must be a multiple of frames_per_block")
        if self.freq_dim % 2:
            raise ValueError("freq_dim must be even (cos and sin halves)")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def grid_hw(self) -> tuple[int, int]:
        """Token grid of one latent frame."""
        return self.latent_hw[0] // self.patch_size[1], self.latent_hw[1] // self.patch_size[2]

    @property
    def tokens_per_frame(self) -> int:
        return self.grid_hw[0] * self.grid_hw[1]

    @property
    def block_tokens(self) -> int:
        return self.frames_per_block * self.tokens_per_frame

    @property
    def max_tokens(self) -> int:
        """Self-attention cache capacity (32760 at full size)."""
        return self.num_latent_frames * self.tokens_per_frame

    @property
    def num_blocks(self) -> int:
        return self.num_latent_frames // self.frames_per_block

    @property
    def rope_pairs(self) -> tuple[int, int, int]:
        """Rotated pairs for (time, height, width): (22, 21, 21) at head_dim 128 (44/42/42 dims)."""
        half = self.head_dim // 2
        return half - 2 * (half // 3), half // 3, half // 3


CONFIGS: dict[str, SelfForcingDiTConfig] = {
    # CPU CI: 2 layers, 8x8 latent (16 tokens per frame), 16 text tokens.
    "tiny": SelfForcingDiTConfig(
        dim=64,
        ffn_dim=128,
        num_heads=2,
        num_layers=2,
        freq_dim=64,
        text_dim=64,
        text_len=16,
        latent_hw=(8, 8),
    ),
    # CPU size where compile / autocast / int8 show: 128 tokens per frame, 384 query tokens,
    # 1536 keys at the default block; all Linear dims multiples of 16.
    "medium": SelfForcingDiTConfig(
        dim=384,
        ffn_dim=1536,
        num_heads=6,
        num_layers=4,
        freq_dim=256,
        text_dim=512,
        text_len=64,
        latent_hw=(16, 32),
    ),
    # Wan2.1-T2V-1.3B as Self Forcing runs it: 1,418,996,800 parameters.
    "1.3b": SelfForcingDiTConfig(),
}


# --------------------------------------------------------------------------- helpers


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for low-precision inputs, float64 stays float64 (fp64 references)."""
    return torch.promote_types(dtype, torch.float32)


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Per-frame AdaLN: x (B, F*T, C), shift/scale (B, F, 1, C)."""
    frames = shift.shape[1]
    return (x.unflatten(1, (frames, -1)) * (1 + scale) + shift).flatten(1, 2)  # (B, F*T, C)


def _gate(y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """y (B, F*T, C) scaled by a per-frame gate (B, F, 1, C)."""
    return (y.unflatten(1, (gate.shape[1], -1)) * gate).flatten(1, 2)  # (B, F*T, C)


def _sinusoid(dim: int, t: torch.Tensor) -> torch.Tensor:
    """Timestep embedding [cos | sin] with frequencies 10000^(-i/half): t (N,) -> (N, dim)."""
    half = dim // 2
    dtype = _compute_dtype(t.dtype)
    freqs = torch.pow(10000.0, -torch.arange(half, device=t.device, dtype=dtype) / half)  # (half,)
    args = t.to(dtype)[:, None] * freqs  # (N, half)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1)  # (N, dim)


def _rope_cos_sin(
    config: SelfForcingDiTConfig,
    frame0: torch.Tensor,
    num_frames: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin (S, head_dim // 2) for tokens ordered (frame, h, w), frames frame0 .. frame0+F-1.

    Each axis has its own frequency ladder theta^(-2i/d_axis) (d_axis = 44, 42, 42 at head_dim
    128), as upstream builds three rope tables and concatenates them.
    """
    dev = frame0.device
    gh, gw = config.grid_hw
    pt, ph, pw = config.rope_pairs

    def inv_freq(pairs: int) -> torch.Tensor:
        exponent = torch.arange(pairs, device=dev, dtype=dtype) * 2 / (2 * pairs)
        return config.rope_theta**-exponent  # (pairs,)

    t_pos = (frame0 + torch.arange(num_frames, device=dev)).to(dtype)  # (F,) absolute frame index
    h_pos = torch.arange(gh, device=dev, dtype=dtype)
    w_pos = torch.arange(gw, device=dev, dtype=dtype)
    ang_t = t_pos[:, None] * inv_freq(pt)  # (F, pt)
    ang_h = h_pos[:, None] * inv_freq(ph)  # (gh, ph)
    ang_w = w_pos[:, None] * inv_freq(pw)  # (gw, pw)
    ang = torch.cat(
        [
            ang_t[:, None, None].expand(num_frames, gh, gw, pt),
            ang_h[None, :, None].expand(num_frames, gh, gw, ph),
            ang_w[None, None, :].expand(num_frames, gh, gw, pw),
        ],
        dim=-1,
    ).flatten(0, 2)  # (F*gh*gw, head_dim/2)
    return torch.cos(ang), torch.sin(ang)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of x (B, S, heads, head_dim) by angle (S, head_dim/2)."""
    xf = x.to(cos.dtype).unflatten(-1, (-1, 2))  # (B, S, n, d/2, 2)
    x0, x1 = xf.unbind(-1)
    c, s = cos[:, None], sin[:, None]  # (S, 1, d/2)
    out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)  # (B, S, n, d/2, 2)
    return out.flatten(-2).type_as(x)  # (B, S, n, d)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention on (B, L, heads, head_dim) tensors -> (B, Lq, heads * head_dim)."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
    )  # (B, n, Lq, d)
    return out.transpose(1, 2).flatten(2)  # (B, Lq, n*d)


# --------------------------------------------------------------------------- modules


class RMSNorm(nn.Module):
    """Wan RMSNorm over the whole dim (all heads together), computed in float32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(_compute_dtype(x.dtype))
        xf = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


class LayerNorm(nn.LayerNorm):
    """LayerNorm that returns the input dtype (autocast runs layer_norm in float32)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).type_as(x)


class SelfAttention(nn.Module):
    def __init__(self, config: SelfForcingDiTConfig) -> None:
        super().__init__()
        d = config.dim
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.norm_q = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor | None = None,
        v_cache: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, S, C). With caches (B, end, n, d): write this block's k/v into the last S cache
        positions in place and attend over the whole cache; without: attend over x's own k/v."""
        b, s, _ = x.shape
        n, d = self.num_heads, self.head_dim
        q = _apply_rope(self.norm_q(self.q(x)).view(b, s, n, d), cos, sin)  # (B, S, n, d)
        k = _apply_rope(self.norm_k(self.k(x)).view(b, s, n, d), cos, sin)  # (B, S, n, d)
        v = self.v(x).view(b, s, n, d)  # (B, S, n, d)
        if k_cache is not None and v_cache is not None:
            start = k_cache.shape[1] - s  # == block_start: the cache is sliced to the block's end
            k_cache.narrow(1, start, s).copy_(k)
            v_cache.narrow(1, start, s).copy_(v)
            k, v = k_cache, v_cache  # (B, end, n, d): earlier blocks and this one
        return self.o(_sdpa(q, k, v, attn_mask))  # (B, S, C)


class CrossAttention(nn.Module):
    """Text cross-attention; k/v of the prompt come from a cache built by `kv`."""

    def __init__(self, config: SelfForcingDiTConfig) -> None:
        super().__init__()
        d = config.dim
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.norm_q = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(d, config.eps) if config.qk_norm else nn.Identity()

    def kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context (B, L, C) -> k, v (B, L, n, d), what upstream caches on a video's first call."""
        b, length, _ = context.shape
        k = self.norm_k(self.k(context)).view(b, length, self.num_heads, self.head_dim)
        v = self.v(context).view(b, length, self.num_heads, self.head_dim)
        return k, v

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.norm_q(self.q(x)).view(b, s, self.num_heads, self.head_dim)  # (B, S, n, d)
        return self.o(_sdpa(q, k, v))  # (B, S, C); no RoPE, no mask (all text_len tokens)


class DiTBlock(nn.Module):
    def __init__(self, config: SelfForcingDiTConfig) -> None:
        super().__init__()
        d = config.dim
        self.norm1 = LayerNorm(d, eps=config.eps, elementwise_affine=False)
        self.self_attn = SelfAttention(config)
        self.norm3 = LayerNorm(d, eps=config.eps, elementwise_affine=True) if config.cross_attn_norm else nn.Identity()
        self.cross_attn = CrossAttention(config)
        self.norm2 = LayerNorm(d, eps=config.eps, elementwise_affine=False)
        self.ffn = nn.Sequential(
            nn.Linear(d, config.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(config.ffn_dim, d)
        )
        # Upstream init: randn / sqrt(dim) (not zero).
        self.modulation = nn.Parameter(torch.randn(1, 6, d) / d**0.5)

    def forward(
        self,
        x: torch.Tensor,
        e: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cross_k: torch.Tensor,
        cross_v: torch.Tensor,
        k_cache: torch.Tensor | None = None,
        v_cache: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, F*T, C); e (B, F, 6, C) per-frame time projection."""
        shift1, scale1, gate1, shift2, scale2, gate2 = (self.modulation.unsqueeze(1) + e).chunk(6, dim=2)
        y = self.self_attn(_modulate(self.norm1(x), shift1, scale1), cos, sin, k_cache, v_cache, attn_mask)
        x = x + _gate(y, gate1)
        x = x + self.cross_attn(self.norm3(x), cross_k, cross_v)
        y = self.ffn(_modulate(self.norm2(x), shift2, scale2))
        return x + _gate(y, gate2)  # (B, F*T, C)


class Head(nn.Module):
    def __init__(self, config: SelfForcingDiTConfig) -> None:
        super().__init__()
        d = config.dim
        self.norm = LayerNorm(d, eps=config.eps, elementwise_affine=False)
        # Zero-initialised upstream; default (random) init here so outputs depend on the input.
        self.head = nn.Linear(d, math.prod(config.patch_size) * config.out_dim)
        self.modulation = nn.Parameter(torch.randn(1, 2, d) / d**0.5)

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """x (B, F*T, C); e (B, F, 1, C) time embedding (not projected) -> (B, F*T, p*out_dim)."""
        shift, scale = (self.modulation.unsqueeze(1) + e).chunk(2, dim=2)  # (B, F, 1, C) each
        return self.head(_modulate(self.norm(x), shift, scale))


class SelfForcingDiT(nn.Module):
    """Block-causal Wan2.1 DiT; `forward` is one cached denoising call for one block."""

    def __init__(self, config: SelfForcingDiTConfig) -> None:
        super().__init__()
        self.config = config
        d = config.dim
        patch = config.patch_size
        self.patch_embedding = nn.Conv3d(config.in_dim, d, kernel_size=patch, stride=patch)
        self.text_embedding = nn.Sequential(nn.Linear(config.text_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d))
        self.time_embedding = nn.Sequential(nn.Linear(config.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.blocks = nn.ModuleList(DiTBlock(config) for _ in range(config.num_layers))
        self.head = Head(config)
        if config.cross_attn_norm:
            # norm3.bias starts at zero upstream; small random values keep it from being inert.
            for block in self.blocks:
                nn.init.normal_(block.norm3.bias, std=0.02)

    # ------------------------------------------------------------------ pieces

    def _embed(
        self, latents: torch.Tensor, timestep: torch.Tensor, frame0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """latents (B, C_in, F, H, W), timestep (B, F), frame0 int64 scalar ->
        tokens (B, F*T, C), e (B, F, 1, C), e0 (B, F, 6, C), rope cos/sin (F*T, d/2)."""
        cfg = self.config
        b, _, frames, h, w = latents.shape
        if (h, w) != cfg.latent_hw:
            raise ValueError(f"latent grid {(h, w)} differs from the config's {cfg.latent_hw}")
        if tuple(timestep.shape) != (b, frames):
            raise ValueError(f"timestep must be (B, F) = {(b, frames)}, got {tuple(timestep.shape)}")
        x = self.patch_embedding(latents).flatten(2).transpose(1, 2)  # (B, F*T, C), tokens (f, h, w)
        e = self.time_embedding(_sinusoid(cfg.freq_dim, timestep.flatten()).type_as(x))  # (B*F, C)
        e0 = self.time_projection(e).unflatten(1, (6, cfg.dim)).unflatten(0, (b, frames))  # (B, F, 6, C)
        e = e.unflatten(0, (b, frames)).unsqueeze(2)  # (B, F, 1, C)
        cos, sin = _rope_cos_sin(cfg, frame0, frames, _compute_dtype(x.dtype))
        return x, e, e0, cos, sin

    def _unpatchify(self, x: torch.Tensor, frames: int) -> torch.Tensor:
        """(B, F*gh*gw, pt*ph*pw*C_out) -> (B, C_out, F*pt, H, W); features ordered (pt, ph, pw, c)."""
        cfg = self.config
        gh, gw = cfg.grid_hw
        pt, ph, pw = cfg.patch_size
        x = x.view(x.shape[0], frames, gh, gw, pt, ph, pw, cfg.out_dim)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, c, F, pt, gh, ph, gw, pw)
        return x.reshape(x.shape[0], cfg.out_dim, frames * pt, gh * ph, gw * pw)

    def cross_attention_cache(self, text_emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt embeddings (B, text_len, text_dim) -> cross_k, cross_v (layers, B, text_len, n, d).

        What upstream computes on the first call of a video and reuses for every later call.
        """
        context = self.text_embedding(text_emb)  # (B, L, C)
        ks, vs = zip(*(block.cross_attn.kv(context) for block in self.blocks))
        return torch.stack(ks), torch.stack(vs)

    # ------------------------------------------------------------------ steps

    def forward(
        self,
        noisy_block: torch.Tensor,
        timestep: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        cross_k: torch.Tensor,
        cross_v: torch.Tensor,
        block_start: torch.Tensor,
    ) -> torch.Tensor:
        """One cached denoising call; see the module docstring for shapes and the cache contract.

        k_cache/v_cache (layers, B, end, n, d) are written in place at [end - new, end).
        """
        cfg = self.config
        frames = noisy_block.shape[2]
        new = frames * cfg.tokens_per_frame
        if k_cache.shape[2] < new or k_cache.shape[2] > cfg.max_tokens or k_cache.shape[2] % new:
            raise ValueError(
                f"k_cache holds {k_cache.shape[2]} tokens: expected (block_index + 1) * {new} <= {cfg.max_tokens}"
            )
        frame0 = torch.div(block_start, cfg.tokens_per_frame, rounding_mode="floor")  # RoPE time offset
        x, e, e0, cos, sin = self._embed(noisy_block, timestep, frame0)
        for i, block in enumerate(self.blocks):
            x = block(x, e0, cos, sin, cross_k[i], cross_v[i], k_cache=k_cache[i], v_cache=v_cache[i])
        return self._unpatchify(self.head(x, e), frames)  # (B, C_out, F, H, W)

    def forward_uncached(self, latents: torch.Tensor, text_emb: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        """Reference without caches: the whole prefix latents (B, C_in, F, H, W), timestep (B, F),
        F a multiple of frames_per_block, under a block-causal mask (a token sees every token of
        its own and earlier blocks), cross k/v computed from the prompt. Equals the sequence of
        cached calls over blocks 0, 1, ... with the same block inputs."""
        cfg = self.config
        frames = latents.shape[2]
        if frames % cfg.frames_per_block:
            raise ValueError(f"{frames} latent frames is not a multiple of {cfg.frames_per_block}")
        cross_k, cross_v = self.cross_attention_cache(text_emb)
        frame0 = torch.zeros((), dtype=torch.int64, device=latents.device)
        x, e, e0, cos, sin = self._embed(latents, timestep, frame0)
        block_of = torch.arange(x.shape[1], device=x.device) // cfg.block_tokens  # (S,)
        mask = block_of[None, :] <= block_of[:, None]  # (S_q, S_k) block-causal
        for i, block in enumerate(self.blocks):
            x = block(x, e0, cos, sin, cross_k[i], cross_v[i], attn_mask=mask)
        return self._unpatchify(self.head(x, e), frames)


# --------------------------------------------------------------------------- workload


def _block_index(config: SelfForcingDiTConfig, options: dict) -> int:
    options = dict(options)
    block_index = options.pop("block_index", DEFAULT_BLOCK_INDEX)
    if options:
        raise TypeError(f"unknown option(s) for self-forcing-dit: {', '.join(sorted(options))}")
    if block_index is None:
        block_index = DEFAULT_BLOCK_INDEX
    if isinstance(block_index, bool) or not isinstance(block_index, int):
        raise TypeError(f"block_index must be an int, got {block_index!r}")
    if not 0 <= block_index < config.num_blocks:
        raise ValueError(f"block_index {block_index} is outside 0..{config.num_blocks - 1}")
    return block_index


def example_inputs(
    config: SelfForcingDiTConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options,
) -> tuple[torch.Tensor, ...]:
    """(noisy_block, timestep, k_cache, v_cache, cross_k, cross_v, block_start) for one call.

    Option `block_index` (default 3; 0..num_blocks-1, None means the default): which block of
    the video is denoised; the cache then holds block_index earlier blocks. The noisy block is
    standard normal, the timestep 1000 for all 3 frames. The caches are views
    `buffer[:, :, :end]` of zero-initialised full-capacity buffers (layers, B, max_tokens, n, d),
    so memory is what upstream allocates (~6.0 GB per batch element in bf16 at full size); the
    earlier blocks' positions [0, block_start) hold standard-normal keys and values (a stand-in
    for RMS-normalised keys; no model here to compute real ones; one draw per tensor, rolled
    along the tokens for each layer), the block's own positions are overwritten by the call.
    The cross-attention cache is standard normal too.
    """
    block_index = _block_index(config, options)
    cfg = config
    n, d, layers = cfg.num_heads, cfg.head_dim, cfg.num_layers
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noisy = torch.randn(batch, cfg.in_dim, cfg.frames_per_block, *cfg.latent_hw, generator=gen)  # (B, C, F, H, W)
    timestep = torch.full((batch, cfg.frames_per_block), EXAMPLE_TIMESTEP)  # (B, F)
    cross_k = torch.randn(layers, batch, cfg.text_len, n, d, generator=gen)  # (layers, B, L, n, d)
    cross_v = torch.randn(layers, batch, cfg.text_len, n, d, generator=gen)
    start = block_index * cfg.block_tokens
    end = start + cfg.block_tokens
    caches = []
    for _ in range(2):  # k then v
        buf = torch.zeros(layers, batch, cfg.max_tokens, n, d, device=device, dtype=dtype)
        if start:
            slab = torch.randn(batch, start, n, d, generator=gen).to(device, dtype)  # (B, start, n, d)
            for layer in range(layers):
                # One host draw per tensor, rolled along tokens per layer: layers differ without
                # drawing layers x as many numbers (2.6e9 at full size, block 6: tens of seconds).
                buf[layer, :, :start] = slab.roll(7 * layer, dims=1)
        caches.append(buf[:, :, :end])  # (layers, B, end, n, d) view of the full buffer
    block_start = torch.tensor(start, dtype=torch.int64, device=device)
    noisy, timestep, cross_k, cross_v = (t.to(device, dtype) for t in (noisy, timestep, cross_k, cross_v))
    return noisy, timestep, caches[0], caches[1], cross_k, cross_v, block_start


def step_info(config: SelfForcingDiTConfig, *, batch: int = 1, **options) -> dict[str, float]:
    """Video frames and blocks of one call: 3 latent frames decode to 12 video frames (4 per
    latent frame), except block 0 whose first latent frame decodes to 1 (1 + 4 + 4 = 9; 81 frames
    over 7 blocks). Counted per call as the benchmark's unit; a real block takes 5 such calls
    (4 denoising steps and the t=0 cache write), so end-to-end FPS is this rate divided by 5."""
    block_index = _block_index(config, options)
    latent = config.frames_per_block
    frames = VAE_TEMPORAL_STRIDE * latent - (VAE_TEMPORAL_STRIDE - 1 if block_index == 0 else 0)
    return {"frames": float(frames * batch), "blocks": float(batch)}
