"""Owl audio-visual world model ("av_dfot"): a DiT over video-latent and audio tokens, one KV-cached step.

Architecture (Wayfarer-Labs/owl-wms at commit 4f23ef2: ``configs/av.yml``,
``owl_wms/models/gamerft_audio.py`` (``GameRFTAudioCore``), ``owl_wms/nn/attn.py``, ``embeddings.py``,
``modulation.py``, ``normalization.py``, ``mlp.py``, ``rope.py``; RoPE tables as lucidrains'
``rotary-embedding-torch`` builds them for ``freqs_for="pixel"``):

- Each frame is 17 tokens: a 128-channel latent on a 4x4 grid, one token per latent pixel via
  Linear(128 -> d), plus one audio token via Linear(64 -> d). A learned positional table of
  ``17 * n_frames`` rows is added to the *last* tokens of the sequence (the newest frame always takes
  the table's last 17 rows).
- Per-frame conditioning: timestep sin/cos(512) -> MLP(512, 4d, d), plus mouse (symlog, polar:
  Linear(2, 256) on (cos, sin) of the angle, sin/cos(256) of the magnitude -> MLP(512, 2048, d)), plus
  buttons (2b - 1 -> MLP(11, 2048, d)).
- ``n_layers`` DiT blocks: ``x + gate(attn(adaln(x)))``, ``x + gate(mlp(adaln(x)))``. AdaLN is a
  LayerNorm without affine scaled by (1 + a) and shifted by b, (a, b) = Linear(SiLU(cond)) per frame.
  Attention: Linear(d, 3d) -> per-head RMS QK-norm with gain (1 + g) -> axial RoPE over
  (frame, token-in-frame), head_dim / 4 rotated dims per axis (the rest pass through) -> SDPA.
- Output heads: AdaLN -> SiLU -> Linear to 128 (video) and to 64 (audio).

The step (what the Owl profiling scripts time): one new frame attends to a filled KV cache, no mask,
no cache write::

    forward(x [B,1,128,4,4], audio [B,1,64], t [B,1], mouse [B,1,2], buttons [B,1,11],
            k_cache [layers,B,heads,17*cache_frames,head_dim], v_cache [same])
        -> (video velocity [B,1,128,4,4], audio velocity [B,1,64])

Cache contents: per layer, keys after QK-norm and *before* RoPE, and values. As upstream, the step
concatenates cached and new keys and applies RoPE over the whole key length; queries take the new
frame's positions. (Upstream's cache-update path stores keys after RoPE, which a later step would
rotate a second time; the timed step never writes the cache, so this file does not model updates.)

RoPE positions follow ``freqs_for="pixel"``: along each axis the coordinates are
``linspace(-1, 1, length)``, i.e. frame i of n key frames sits at ``-1 + 2 i / (n - 1)`` (frame indices
0..cache_frames-1 for the cache, cache_frames for the new frame), token j of 17 at ``-1 + 2 j / 16``;
angles are coordinate * ``linspace(1, 128, head_dim / 8) * pi``, rotating interleaved pairs.

State-dict keys follow ``GameRFTAudioCore`` (``transformer.blocks.{i}.attn.qkv.weight``, ...), so an
owl-wms checkpoint loads with ``strict=True`` after its leading ``core.`` is stripped. Upstream's
``attn.rope.pos_emb.freqs`` (an ``nn.Parameter`` with ``requires_grad=False``, excluded from the
upstream parameter count) is kept here as a persistent buffer for that reason only: the values are a
fixed function of the config and forward recomputes them in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CONFIGS",
    "OUTPUT_KIND",
    "OwlWorldModel",
    "OwlWorldModelConfig",
    "example_inputs",
    "step_info",
]

OUTPUT_KIND = "tensor"


@dataclass(frozen=True, kw_only=True)
class OwlWorldModelConfig:
    d_model: int
    n_layers: int
    n_heads: int
    n_frames: int  # attention window in frames; the learned positional table has 17 * n_frames rows
    channels: int = 128  # video latent channels
    audio_channels: int = 64
    sample_size: int = 4  # latent grid side; patch size 1, so sample_size**2 video tokens per frame
    n_buttons: int = 11
    cond_embed_dim: int = 512  # sin/cos width of the timestep embedding and control feature width
    mlp_ratio: int = 4
    rope_max_freq: float = 256.0  # rotary-embedding-torch "pixel" freqs: linspace(1, max_freq / 2) * pi
    sincos_theta: float = 300.0
    sincos_mult: float = 1000.0  # inputs are scaled by this before the sin/cos embedding

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.head_dim % 8:
            raise ValueError(f"head_dim {self.head_dim} is not a multiple of 8 (head_dim / 4 per rope axis)")
        if self.n_frames < 1 or self.n_layers < 1:
            raise ValueError("n_frames and n_layers must be positive")
        if self.cond_embed_dim % 4:
            raise ValueError("cond_embed_dim must be a multiple of 4")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def video_tokens_per_frame(self) -> int:
        return self.sample_size * self.sample_size

    @property
    def tokens_per_frame(self) -> int:
        return self.video_tokens_per_frame + 1  # + one audio token


CONFIGS: dict[str, OwlWorldModelConfig] = {
    # CPU CI: plumbing only (about 2-3 ms a step in eager fp32 on 2 threads).
    "tiny": OwlWorldModelConfig(d_model=128, n_layers=2, n_heads=4, n_frames=8),
    # CPU size where compile / bf16 autocast / int8 show an effect: like the 1b, the step is weight-bound
    # (17 query tokens), so it keeps enough weights (117.5M, ~2.8 GFLOP a step) to outweigh per-op overhead.
    "medium": OwlWorldModelConfig(d_model=768, n_layers=10, n_heads=12, n_frames=30),
    # The released "av_dfot_85k_ema_200m" checkpoint (262,250,816 parameters despite its name).
    "200m": OwlWorldModelConfig(d_model=1024, n_layers=13, n_heads=16, n_frames=30),
    # configs/av.yml, the full audio-visual world model: 1,093,823,296 parameters.
    "1b": OwlWorldModelConfig(d_model=1536, n_layers=25, n_heads=24, n_frames=60),
}


# --------------------------------------------------------------------------------------------------
# helpers


def _sincos_embed(x: torch.Tensor, dim: int, theta: float, mult: float) -> torch.Tensor:
    """Sin/cos features of a scalar per element: (...,) -> (..., dim), computed in fp32.

    Upstream computes these in the input dtype; in bf16 the arguments (up to ~1000 rad) would lose
    all phase precision, so this stays fp32 and the caller casts the result.
    """
    half = dim // 2
    freqs = torch.exp(
        torch.arange(half, device=x.device, dtype=torch.float32) * (-math.log(theta) / (half - 1))
    )  # (half,)
    args = (x.float() * mult).unsqueeze(-1) * freqs  # (..., half)
    return torch.cat((args.sin(), args.cos()), dim=-1)  # (..., dim)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of the first 2P dims of x (B, H, N, D) by tables cos/sin (N, P).

    Pair p is (x[2p], x[2p+1]) -> (x1 cos - x2 sin, x2 cos + x1 sin), i.e. rotary-embedding-torch's
    ``t * cos + rotate_half(t) * sin`` with each frequency repeated for both members of its pair.
    Computed in fp32 like upstream (its fp32 frequency table promotes the product).
    """
    rot = 2 * cos.shape[-1]
    pairs = x[..., :rot].float().unflatten(-1, (-1, 2))  # (B, H, N, P, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]  # (B, H, N, P)
    rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)  # (B, H, N, 2P)
    return torch.cat((rotated.to(x.dtype), x[..., rot:]), dim=-1)  # (B, H, N, D)


# --------------------------------------------------------------------------------------------------
# modules (attribute names follow owl-wms so that state-dict keys match)


class _MLP(nn.Module):
    """owl-wms ``MLPCustom``: fc1 -> SiLU -> fc2. Upstream zero-inits the biases; default init here."""

    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim_in, dim_hidden)
        self.fc2 = nn.Linear(dim_hidden, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(x)))


class _TimestepEmbedding(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.mlp = _MLP(config.cond_embed_dim, 4 * d, d)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        c = self.config
        emb = _sincos_embed(t, c.cond_embed_dim, c.sincos_theta, c.sincos_mult)  # (B, n, 512)
        return self.mlp(emb.to(t.dtype))  # (B, n, d)


class _MouseEmbedding(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.cond_embed_dim
        self.angle_proj = nn.Linear(2, dim // 2, bias=False)
        self.mlp = _MLP(dim, 4 * dim, config.d_model)

    def forward(self, mouse: torch.Tensor) -> torch.Tensor:
        c = self.config
        m = mouse.float()  # (B, n, 2)
        m = m.sign() * m.abs().log1p()  # symlog: mouse deltas are heavy-tailed
        angle = torch.atan2(m[..., 1], m[..., 0])  # (B, n)
        magnitude = torch.linalg.vector_norm(m, dim=-1)  # (B, n)
        angle_emb = torch.stack((angle.cos(), angle.sin()), dim=-1).to(mouse.dtype)  # (B, n, 2)
        mag_emb = _sincos_embed(magnitude, c.cond_embed_dim // 2, c.sincos_theta, c.sincos_mult)
        feats = torch.cat((self.angle_proj(angle_emb), mag_emb.to(mouse.dtype)), dim=-1)  # (B, n, 512)
        return self.mlp(feats)  # (B, n, d)


class _ButtonEmbedding(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.proj = _MLP(config.n_buttons, 4 * config.cond_embed_dim, config.d_model)

    def forward(self, buttons: torch.Tensor) -> torch.Tensor:
        return self.proj(buttons * 2 - 1)  # {0, 1} -> {-1, 1}; (B, n, d)


class _ControlEmbedding(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.mouse = _MouseEmbedding(config)
        self.button = _ButtonEmbedding(config)

    def forward(self, mouse: torch.Tensor, buttons: torch.Tensor) -> torch.Tensor:
        return self.mouse(mouse) + self.button(buttons)  # (B, n, d)


class _RMSNorm(nn.Module):
    """RMS norm over the last dim with gain (1 + g); g starts small and random as upstream."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.randn(dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = (x.float().pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt().to(x.dtype)
        return x * rms * (1.0 + self.gain)


class _QKNorm(nn.Module):
    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.q_norm = _RMSNorm(head_dim)
        self.k_norm = _RMSNorm(head_dim)


class _RotaryFreqs(nn.Module):
    """Holds upstream's ``pos_emb.freqs`` key; see the module docstring (not a parameter here)."""

    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        n_freqs = config.head_dim // 8  # head_dim / 4 rotated dims per axis, one freq per pair
        freqs = torch.linspace(1.0, config.rope_max_freq / 2, n_freqs) * math.pi
        self.register_buffer("freqs", freqs, persistent=True)


class _FlatVideoRoPE(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.pos_emb = _RotaryFreqs(config)


class _Attention(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.qk_norm = _QKNorm(config.head_dim)
        self.rope = _FlatVideoRoPE(config)

    def forward(
        self,
        x: torch.Tensor,
        rope_cos: torch.Tensor,
        rope_sin: torch.Tensor,
        k_cache: torch.Tensor | None = None,
        v_cache: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, d); rope tables (Lc + N, P); caches (B, H, Lc, hd) pre-RoPE.

        Returns the attention output (B, N, d) and this call's pre-RoPE keys and values (B, H, N, hd).
        """
        B, N, d = x.shape
        # upstream layout: 'b n (three h d) -> three b h n d'
        qkv = self.qkv(x).view(B, N, 3, self.n_heads, -1)  # (B, N, 3, H, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, hd) each
        q = self.qk_norm.q_norm(q)
        k = self.qk_norm.k_norm(k)
        k_new, v_new = k, v

        if k_cache is not None:
            k = torch.cat((k_cache, k), dim=2)  # (B, H, Lc + N, hd)
            v = torch.cat((v_cache, v), dim=2)
        # RoPE over the full key length; queries take the last N positions.
        k = _apply_rope(k, rope_cos, rope_sin)
        q = _apply_rope(q, rope_cos[-N:], rope_sin[-N:])

        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, H, N, hd)
        o = o.transpose(1, 2).reshape(B, N, d)  # (B, N, d)
        return self.out(o), k_new, v_new


class _AdaLN(nn.Module):
    """LayerNorm (no affine) * (1 + a) + b with (a, b) = Linear(SiLU(cond)), one (a, b) per frame."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, silu_cond: torch.Tensor) -> torch.Tensor:
        # x (B, n*m, d), silu_cond (B, n, d): broadcast each frame's modulation to its m tokens
        B, n, d = silu_cond.shape
        a, b = self.fc(silu_cond).unsqueeze(2).chunk(2, dim=-1)  # (B, n, 1, d) each
        x = F.layer_norm(x, (d,)).view(B, n, -1, d)  # (B, n, m, d)
        return (x * (1.0 + a) + b).view(B, -1, d)  # (B, n*m, d)


class _Gate(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc_c = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, silu_cond: torch.Tensor) -> torch.Tensor:
        B, n, d = silu_cond.shape
        gate = self.fc_c(silu_cond).unsqueeze(2)  # (B, n, 1, d)
        return (x.view(B, n, -1, d) * gate).view(B, -1, d)  # (B, n*m, d)


class _DiTBlock(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.attn = _Attention(config)
        self.mlp = _MLP(d, config.mlp_ratio * d, d)
        self.adaln1 = _AdaLN(d)
        self.gate1 = _Gate(d)
        self.adaln2 = _AdaLN(d)
        self.gate2 = _Gate(d)

    def forward(
        self,
        x: torch.Tensor,
        silu_cond: torch.Tensor,
        rope_cos: torch.Tensor,
        rope_sin: torch.Tensor,
        k_cache: torch.Tensor | None,
        v_cache: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, k, v = self.attn(self.adaln1(x, silu_cond), rope_cos, rope_sin, k_cache, v_cache, attn_mask)
        x = x + self.gate1(h, silu_cond)  # (B, N, d)
        x = x + self.gate2(self.mlp(self.adaln2(x, silu_cond)), silu_cond)
        return x, k, v


class _DiT(nn.Module):
    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_DiTBlock(config) for _ in range(config.n_layers))


class _FinalLayer(nn.Module):
    def __init__(self, d_model: int, channels: int) -> None:
        super().__init__()
        self.norm = _AdaLN(d_model)
        self.act = nn.SiLU()
        self.proj = nn.Linear(d_model, channels)

    def forward(self, x: torch.Tensor, silu_cond: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.norm(x, silu_cond)))


class _LearnedPosEnc(nn.Module):
    def __init__(self, n_seq: int, dim: int) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.randn(n_seq, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.p[-x.shape[1] :]  # the sequence takes the table's last rows; (B, N, d)


# --------------------------------------------------------------------------------------------------
# the model


class OwlWorldModel(nn.Module):
    """``GameRFTAudioCore``: predicts video and audio flow velocities for the newest frame(s)."""

    def __init__(self, config: OwlWorldModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.transformer = _DiT(config)
        self.control_embed = _ControlEmbedding(config)
        self.t_embed = _TimestepEmbedding(config)
        self.proj_in = nn.Linear(config.channels, d, bias=False)
        self.proj_out = _FinalLayer(d, config.channels)
        self.audio_proj_in = nn.Linear(config.audio_channels, d, bias=False)
        self.audio_proj_out = _FinalLayer(d, config.audio_channels)
        self.pos_enc = _LearnedPosEnc(config.tokens_per_frame * config.n_frames, d)

    def forward(
        self,
        x: torch.Tensor,
        audio: torch.Tensor,
        t: torch.Tensor,
        mouse: torch.Tensor,
        buttons: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One cached step: new frame(s) x [B,n,C,H,W] (n = 1 in the benchmark) against the caches.

        k_cache / v_cache: [layers, B, heads, 17 * cache_frames, head_dim], keys before RoPE. Attention
        runs over [cache, new] keys without a mask; the caches are read only.
        Returns (video velocity [B,n,C,H,W], audio velocity [B,n,audio_channels]).
        """
        self._check_cache(x, k_cache, v_cache)
        video, audio_out, _, _ = self._run(
            x, audio, t, mouse, buttons, k_cache, v_cache, attn_mask=None, return_kv=False
        )
        return video, audio_out

    def forward_sequence(
        self,
        x: torch.Tensor,
        audio: torch.Tensor,
        t: torch.Tensor,
        mouse: torch.Tensor,
        buttons: torch.Tensor,
        *,
        causal: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Uncached forward over a whole sequence of n <= n_frames frames (the reference for the step).

        causal=True masks block-causally by frame (a frame sees itself and earlier frames), so the
        K/V of the first frames do not depend on later ones; causal=False is upstream's av.yml
        setting (full attention). Either way the last frame attends to every frame.
        Returns (video [B,n,C,H,W], audio [B,n,A], k [layers,B,H,17n,hd] before RoPE, v [same]).
        Caching the first 17 * c tokens of k / v and calling ``forward`` on frame c reproduces
        the last frame's outputs when n = c + 1.
        """
        n, m = x.shape[1], self.config.tokens_per_frame
        mask = None
        if causal:
            frame = torch.arange(n * m, device=x.device) // m  # (N,)
            mask = frame[:, None] >= frame[None, :]  # (N, N), True = may attend
        return self._run(x, audio, t, mouse, buttons, None, None, attn_mask=mask, return_kv=True)

    # ----------------------------------------------------------------------------------------------

    def _check_cache(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        c = self.config
        B, n = x.shape[:2]
        if k_cache.shape != v_cache.shape:
            raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
        expected = (c.n_layers, B, c.n_heads, c.head_dim)
        if k_cache.dim() != 5 or (*k_cache.shape[:3], k_cache.shape[4]) != expected:
            raise ValueError(
                f"cache shape {tuple(k_cache.shape)} is not [layers={c.n_layers}, B={B}, heads={c.n_heads},"
                f" L, head_dim={c.head_dim}]"
            )
        L = k_cache.shape[3]
        if L % c.tokens_per_frame or L // c.tokens_per_frame + n > c.n_frames:
            raise ValueError(
                f"cache length {L} must be {c.tokens_per_frame} * cache_frames with"
                f" cache_frames + {n} new <= n_frames={c.n_frames}"
            )

    def _rope_tables(self, n_frames: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin tables (n_frames * 17, head_dim / 4) for an axial grid of n_frames x 17 tokens, fp32."""
        c = self.config
        m, n_freqs = c.tokens_per_frame, c.head_dim // 8
        freqs = torch.linspace(1.0, c.rope_max_freq / 2, n_freqs, device=device) * math.pi  # (F,)
        # "pixel" mode: coordinates linspace(-1, 1, length) along each axis
        frame_pos = torch.linspace(-1.0, 1.0, n_frames, device=device)  # (n,)
        token_pos = torch.linspace(-1.0, 1.0, m, device=device)  # (m,)
        angles = torch.cat(
            (
                (frame_pos[:, None, None] * freqs).expand(n_frames, m, n_freqs),
                (token_pos[None, :, None] * freqs).expand(n_frames, m, n_freqs),
            ),
            dim=-1,
        ).reshape(n_frames * m, 2 * n_freqs)  # (n*m, P): frame pairs first, then token pairs
        return angles.cos(), angles.sin()

    def _run(
        self,
        x: torch.Tensor,
        audio: torch.Tensor,
        t: torch.Tensor,
        mouse: torch.Tensor,
        buttons: torch.Tensor,
        k_cache: torch.Tensor | None,
        v_cache: torch.Tensor | None,
        *,
        attn_mask: torch.Tensor | None,
        return_kv: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        c = self.config
        B, n, C, H, W = x.shape
        m = c.tokens_per_frame
        if n * m > self.pos_enc.p.shape[0]:
            raise ValueError(f"{n} frames exceed the window of n_frames={c.n_frames}")

        cond = self.control_embed(mouse, buttons) + self.t_embed(t)  # (B, n, d)
        silu_cond = F.silu(cond)  # every AdaLN / gate applies SiLU to the same cond: do it once

        video_tok = self.proj_in(x.permute(0, 1, 3, 4, 2).reshape(B, n, H * W, C))  # (B, n, HW, d)
        audio_tok = self.audio_proj_in(audio).unsqueeze(2)  # (B, n, 1, d)
        h = torch.cat((video_tok, audio_tok), dim=2).reshape(B, n * m, -1)  # (B, N, d), audio last per frame
        h = self.pos_enc(h)

        cached_frames = 0 if k_cache is None else k_cache.shape[3] // m
        rope_cos, rope_sin = self._rope_tables(cached_frames + n, x.device)  # (Lc + N, P)

        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        for i, block in enumerate(self.transformer.blocks):
            kc = None if k_cache is None else k_cache[i]  # (B, H, Lc, hd)
            vc = None if v_cache is None else v_cache[i]
            h, k, v = block(h, silu_cond, rope_cos, rope_sin, kc, vc, attn_mask)
            if return_kv:
                ks.append(k)
                vs.append(v)

        h = h.view(B, n, m, -1)  # (B, n, m, d)
        video = self.proj_out(h[:, :, :-1].reshape(B, n * H * W, -1), silu_cond)  # (B, n*HW, C)
        video = video.view(B, n, H, W, C).permute(0, 1, 4, 2, 3)  # (B, n, C, H, W)
        audio_out = self.audio_proj_out(h[:, :, -1], silu_cond)  # (B, n, A)
        if not return_kv:
            return video, audio_out, None, None
        return video, audio_out, torch.stack(ks), torch.stack(vs)  # kv: (layers, B, H, N, hd)


# --------------------------------------------------------------------------------------------------
# benchmark interface


def _cache_frames(config: OwlWorldModelConfig, options: dict[str, object]) -> int:
    """Validate the shape options; returns cache_frames (default n_frames - 1, a full window)."""
    unknown = set(options) - {"cache_frames"}
    if unknown:
        raise TypeError(f"unknown option(s) for owl_world_model: {', '.join(sorted(unknown))}")
    cache_frames = options.get("cache_frames", config.n_frames - 1)
    if not isinstance(cache_frames, int) or isinstance(cache_frames, bool):
        raise TypeError(f"cache_frames must be an int, got {cache_frames!r}")
    if not 0 <= cache_frames <= config.n_frames - 1:
        raise ValueError(f"cache_frames={cache_frames} must be in [0, {config.n_frames - 1}]")
    return cache_frames


def example_inputs(
    config: OwlWorldModelConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: object,
) -> tuple[torch.Tensor, ...]:
    """(x, audio, t, mouse, buttons, k_cache, v_cache) for one step of one new frame.

    Options: ``cache_frames`` (default ``n_frames - 1``: the new frame completes a full window), the
    number of cached frames; the caches hold 17 * cache_frames tokens. Keys and values are N(0, 1),
    the scale QK-normed keys have.
    """
    cache_frames = _cache_frames(config, options)
    c = config
    g = torch.Generator(device="cpu").manual_seed(seed)
    cache_shape = (c.n_layers, batch, c.n_heads, c.tokens_per_frame * cache_frames, c.head_dim)
    tensors = (
        torch.randn(batch, 1, c.channels, c.sample_size, c.sample_size, generator=g),  # x
        torch.randn(batch, 1, c.audio_channels, generator=g),  # audio
        torch.rand(batch, 1, generator=g),  # t in [0, 1)
        torch.randn(batch, 1, 2, generator=g),  # mouse deltas
        torch.randint(0, 2, (batch, 1, c.n_buttons), generator=g).float(),  # buttons pressed or not
        torch.randn(cache_shape, generator=g),  # k_cache (pre-RoPE)
        torch.randn(cache_shape, generator=g),  # v_cache
    )
    return tuple(x.to(device=device, dtype=dtype) for x in tensors)


def step_info(config: OwlWorldModelConfig, *, batch: int = 1, **options: object) -> dict[str, float]:
    """One step predicts one new frame (video latent plus its audio chunk) per batch element."""
    _cache_frames(config, options)
    return {"frames": float(batch)}
