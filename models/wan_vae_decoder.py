"""Wan2.1 video VAE decoder (causal 3D convolutions), decoding one latent frame per call.

Architecture: the decoder half of the Wan2.1 video VAE (the one Self Forcing uses to stream
frames). A 1x1x1 post-quant conv (`conv2`, z_dim -> z_dim), then `decoder`:
CausalConv3d(z_dim -> 4*dim), a middle of ResidualBlock / single-head spatial AttentionBlock /
ResidualBlock, four up-stages (channels 4d, 4d, 2d, d) of 3 ResidualBlocks each, the first three
followed by a Resample (nearest x2 in space + Conv2d halving the channels; the first two also
double time with a causal (3,1,1) conv to 2*C channels whose halves are interleaved as frames),
and a head RMSNorm / SiLU / CausalConv3d(d -> 3). Every temporal-kernel-3 CausalConv3d keeps a
2-frame feature cache of its input, so a video decodes one latent frame at a time: the first
latent frame gives 1 video frame (no temporal upsampling yet), each later one 4.

Source (facts and state-dict key names only): Wan-Video/Wan2.1 and guandeh17/Self-Forcing
`wan/modules/vae.py` (`Decoder3d`, `ResidualBlock`, `AttentionBlock`, `Resample`, `RMS_norm`,
`CausalConv3d`, `WanVAE_.decode`), Self-Forcing `demo_utils/vae_block3.py` (`VAEDecoderWrapper`:
latent un-normalisation, `conv2`, per-frame decoder with a tensor feature cache, clamp to [-1, 1]).
Keys: `conv2.*`, `decoder.conv1.*`, `decoder.middle.{0,1,2}.*`, `decoder.upsamples.{i}.*`,
`decoder.head.2.*`, so the `decoder.*` and `conv2.*` entries of `Wan2.1_VAE.pth` load with
`load_state_dict(strict=True)` (latent mean/std are non-persistent buffers, as upstream holds
them outside the checkpoint).

The step: `forward(z, *feat_cache)` with z [B, z_dim, 1, h, w] (one latent frame, normalised as
the diffusion model outputs it) and either no cache (first latent frame, output [B, 3, 1, 8h, 8w])
or all `num_caches` cache tensors (a later frame, output [B, 3, 4, 8h, 8w]). Each cache is
[B, C_in, 2, h_l, w_l]: the last two input frames of one causal conv, oldest first, zeros where
the stream has no history yet. The new caches are returned after the video instead of being
written in place, so repeated calls with the same inputs give the same result.
Full size: latent [B, 16, 1, 60, 104] -> video 480x832, 32 caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CONFIGS",
    "OUTPUT_KIND",
    "WanVAEDecoder",
    "WanVAEDecoderConfig",
    "example_inputs",
    "step_info",
]

OUTPUT_KIND = "image"

CACHE_T = 2  # frames of history per causal conv (temporal kernel 3 -> 2 frames of left context)

# Per-channel latent statistics of the Wan2.1 VAE (z_dim 16): the decoder input is z * std + mean.
WAN21_LATENT_MEAN = (
    -0.7571,
    -0.7089,
    -0.9113,
    0.1075,
    -0.1745,
    0.9653,
    -0.1517,
    1.5508,
    0.4134,
    -0.0715,
    0.5517,
    -0.3632,
    -0.1922,
    -0.9497,
    0.2503,
    -0.2921,
)
WAN21_LATENT_STD = (
    2.8184,
    1.4541,
    2.3275,
    2.6558,
    1.2196,
    1.7708,
    2.6052,
    2.0743,
    3.2687,
    2.1526,
    2.8652,
    1.5579,
    1.6382,
    1.1253,
    2.8251,
    1.9160,
)


@dataclass(frozen=True, kw_only=True)
class WanVAEDecoderConfig:
    dim: int = 96  # base channels; stage widths are dim * dim_mult, widest first
    z_dim: int = 16  # latent channels
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    # Upstream passes num_res_blocks=2 and the decoder builds num_res_blocks + 1 per stage.
    res_blocks_per_stage: int = 3
    # One flag per Resample, widest stage first (upstream temperal_upsample = [True, True, False]).
    temporal_upsample: tuple[bool, ...] = (True, True, False)
    latent_hw: tuple[int, int] = (60, 104)  # default latent spatial size (480x832 video)
    # Latent un-normalisation z * std + mean; None means identity (small sizes have no statistics).
    latent_mean: tuple[float, ...] | None = WAN21_LATENT_MEAN
    latent_std: tuple[float, ...] | None = WAN21_LATENT_STD

    def __post_init__(self) -> None:
        if len(self.temporal_upsample) != len(self.dim_mult) - 1:
            raise ValueError("temporal_upsample needs one flag per Resample (len(dim_mult) - 1)")
        for stats in (self.latent_mean, self.latent_std):
            if stats is not None and len(stats) != self.z_dim:
                raise ValueError("latent_mean / latent_std need z_dim values")

    @property
    def spatial_scale(self) -> int:
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_scale(self) -> int:
        return 2 ** sum(self.temporal_upsample)


CONFIGS: dict[str, WanVAEDecoderConfig] = {
    # The CPU pull-request gate's counting size (tier cpu-pr): two stages, one x2 up-sampling in
    # space and time on a 2x2 latent (4x4 video); under 30 s a case under callgrind (tiny: about 33 s).
    "micro": WanVAEDecoderConfig(
        dim=8,
        z_dim=4,
        dim_mult=(1, 2),
        res_blocks_per_stage=2,
        temporal_upsample=(True,),
        latent_hw=(2, 2),
        latent_mean=None,
        latent_std=None,
    ),
    # Same structure as full, 8 base channels on a 2x2 latent (16x16 video): CPU plumbing only.
    "tiny": WanVAEDecoderConfig(dim=8, z_dim=4, latent_hw=(2, 2), latent_mean=None, latent_std=None),
    # 16 base channels (widths 16..64, all multiples of 16), z_dim 16, on an 8x8 latent (64x64
    # video), 3.9 GFLOP a later frame. CPU Conv3d takes the native (im2col) path at these sizes,
    # so this is already ~0.1-0.2 s a step on 2 threads.
    "medium": WanVAEDecoderConfig(dim=16, latent_hw=(8, 8)),
    "full": WanVAEDecoderConfig(),
}


class CausalConv3d(nn.Conv3d):
    """Conv3d padded in time only on the left (2 * padding_t frames), with optional cached history.

    Spatial padding stays symmetric (done by the convolution itself). A cache holds the real
    input frames before x and replaces the leading zero frames, so chunked decoding equals
    decoding the whole sequence.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        pt, ph, pw = self.padding  # type: ignore[misc]
        self.causal_pad_t = 2 * pt
        self.padding = (0, ph, pw)

    def _with_history(self, x: torch.Tensor, cache: torch.Tensor | None) -> torch.Tensor:
        # x (B, C, T, H, W) -> (B, C, causal_pad_t + T, H, W): zeros or the cached frames in front
        if cache is None:
            return F.pad(x, (0, 0, 0, 0, self.causal_pad_t, 0))
        return torch.cat([cache, x], dim=2)

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None) -> torch.Tensor:
        if self.causal_pad_t == 0:
            return super().forward(x)
        return super().forward(self._with_history(x, cache))

    def forward_cached(self, x: torch.Tensor, cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Output and the next cache: the last CACHE_T input frames, zero-padded at the start.

        The cache is cloned so the caller does not keep the whole padded input alive.
        """
        assert self.causal_pad_t == CACHE_T, "only temporal-kernel-3 convs carry a cache"
        x = self._with_history(x, cache)  # (B, C, CACHE_T + T, H, W)
        return super().forward(x), x[:, :, -CACHE_T:].clone()


class RMS_norm(nn.Module):
    """Channel RMSNorm as upstream: L2-normalise over channels, times sqrt(C) and a gain `gamma`."""

    def __init__(self, dim: int, *, images: bool) -> None:
        super().__init__()
        # gamma shape (C, 1, 1) for 4-D images, (C, 1, 1, 1) for 5-D video, as in the checkpoint.
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim, *((1, 1) if images else (1, 1, 1))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=1) * self.scale * self.gamma


class ResidualBlock(nn.Module):
    """RMSNorm/SiLU/CausalConv3d(k=3) twice plus a 1x1x1 shortcut when the width changes."""

    num_caches = 2

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        # Indices as upstream's nn.Sequential (SiLU / Dropout(0) hold places 1, 4, 5): keys
        # residual.0.gamma, residual.2.weight, residual.3.gamma, residual.6.weight.
        self.residual = nn.ModuleList(
            [
                RMS_norm(in_dim, images=False),
                nn.SiLU(),
                CausalConv3d(in_dim, out_dim, 3, padding=1),
                RMS_norm(out_dim, images=False),
                nn.SiLU(),
                nn.Dropout(0.0),
                CausalConv3d(out_dim, out_dim, 3, padding=1),
            ]
        )
        # A 1x1x1 conv has no temporal context, so the shortcut needs no cache.
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else nn.Identity()

    def forward(self, x: torch.Tensor, caches: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # x (B, C_in, T, H, W) -> (B, C_out, T, H, W)
        norm1, _, conv1, norm2, _, _, conv2 = self.residual
        c1, c2 = caches if caches is not None else (None, None)
        h = self.shortcut(x)
        y, new1 = conv1.forward_cached(F.silu(norm1(x)), c1)
        y, new2 = conv2.forward_cached(F.silu(norm2(y)), c2)
        return y + h, [new1, new2]


class AttentionBlock(nn.Module):
    """Single-head self-attention over the pixels of each frame (no attention across time)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RMS_norm(dim, images=True)
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1)
        # Upstream zero-initialises proj.weight; kept at PyTorch's random init here so the block
        # is not an identity and accuracy checks see it.
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        y = x.transpose(1, 2).reshape(b * t, c, h, w)  # (B*T, C, H, W)
        qkv = self.to_qkv(self.norm(y)).reshape(b * t, 1, 3 * c, h * w).transpose(2, 3)
        q, k, v = qkv.chunk(3, dim=-1)  # each (B*T, 1, H*W, C)
        y = F.scaled_dot_product_attention(q, k, v)  # (B*T, 1, H*W, C)
        y = self.proj(y.squeeze(1).transpose(1, 2).reshape(b * t, c, h, w))
        return x + y.reshape(b, t, c, h, w).transpose(1, 2)  # (B, C, T, H, W)


class Upsample(nn.Module):
    """Nearest-neighbour x2 in H and W (upstream nn.Upsample 'nearest-exact'; no parameters)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2.0, mode="nearest-exact")


class Resample(nn.Module):
    """x2 spatial upsampling (Conv2d to dim // 2); in 'upsample3d' mode also x2 in time.

    Time doubling: a causal (3,1,1) conv maps C -> 2C and the two halves become two frames.
    Upstream skips it for the first latent frame (1 frame in, 1 out) and starts its zero-padded
    history at the second one, so the first frame never enters this conv's window.
    """

    def __init__(self, dim: int, temporal: bool) -> None:
        super().__init__()
        self.resample = nn.Sequential(Upsample(), nn.Conv2d(dim, dim // 2, 3, padding=1))
        self.time_conv = CausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0)) if temporal else None
        self.num_caches = 1 if temporal else 0

    def _double_time(self, x: torch.Tensor, cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, t, h, w = x.shape
        y, new_cache = self.time_conv.forward_cached(x, cache)  # (B, 2C, T, H, W)
        # Channel halves (2, C) become frames 2i and 2i+1.
        y = y.reshape(b, 2, c, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)
        return y, new_cache

    def forward(self, x: torch.Tensor, caches: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # x (B, C, T, H, W) -> (B, C // 2, T' , 2H, 2W), T' = 2T, or 1 + 2(T - 1) from the start
        new_caches: list[torch.Tensor] = []
        if self.time_conv is not None:
            if caches is None:
                # Stream start: frame 0 passes through, frames 1.. are doubled with zero history.
                if x.shape[2] == 1:
                    b, c, _, h, w = x.shape
                    new_caches.append(x.new_zeros(b, c, CACHE_T, h, w))
                else:
                    rest, new_cache = self._double_time(x[:, :, 1:], None)
                    x = torch.cat([x[:, :, :1], rest], dim=2)
                    new_caches.append(new_cache)
            else:
                x, new_cache = self._double_time(x, caches[0])
                new_caches.append(new_cache)
        b, c, t, h, w = x.shape
        y = self.resample(x.transpose(1, 2).reshape(b * t, c, h, w))  # (B*T, C // 2, 2H, 2W)
        return y.reshape(b, t, *y.shape[1:]).transpose(1, 2), new_caches


class Decoder3d(nn.Module):
    """Upstream `Decoder3d`: conv1, middle, upsamples, head; threads the feature caches."""

    def __init__(self, config: WanVAEDecoderConfig) -> None:
        super().__init__()
        dim, mult = config.dim, config.dim_mult
        dims = [dim * u for u in (mult[-1], *mult[::-1])]  # e.g. 384, 384, 384, 192, 96

        self.conv1 = CausalConv3d(config.z_dim, dims[0], 3, padding=1)
        self.middle = nn.Sequential(
            ResidualBlock(dims[0], dims[0]), AttentionBlock(dims[0]), ResidualBlock(dims[0], dims[0])
        )
        upsamples: list[nn.Module] = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            if i > 0:
                in_dim //= 2  # the previous Resample halved the channels
            for _ in range(config.res_blocks_per_stage):
                upsamples.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if i < len(mult) - 1:
                upsamples.append(Resample(out_dim, temporal=config.temporal_upsample[i]))
        self.upsamples = nn.Sequential(*upsamples)
        # Keys head.0.gamma and head.2.*; SiLU holds place 1.
        self.head = nn.Sequential(RMS_norm(dims[-1], images=False), nn.SiLU(), CausalConv3d(dims[-1], 3, 3, padding=1))
        blocks = (*self.middle, *self.upsamples)
        self.num_caches = 2 + sum(m.num_caches for m in blocks if not isinstance(m, AttentionBlock))

    def forward(self, x: torch.Tensor, caches: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # x (B, z_dim, T, h, w) -> video (B, 3, T_out, 8h, 8w) and the new caches in upstream order
        new: list[torch.Tensor] = []

        def take(n: int) -> list[torch.Tensor] | None:
            return None if caches is None else caches[len(new) : len(new) + n]

        (c,) = take(1) or (None,)
        x, c = self.conv1.forward_cached(x, c)  # (B, 4d, T, h, w)
        new.append(c)

        for layer in (*self.middle, *self.upsamples):
            if isinstance(layer, AttentionBlock):
                x = layer(x)
                continue
            x, layer_new = layer(x, take(layer.num_caches))
            new.extend(layer_new)

        norm, _, conv = self.head
        (c,) = take(1) or (None,)
        x, c = conv.forward_cached(F.silu(norm(x)), c)  # (B, 3, T_out, 8h, 8w)
        new.append(c)
        return x, new


class WanVAEDecoder(nn.Module):
    """Streaming Wan2.1 VAE decode step: latent un-normalisation, conv2, Decoder3d, clamp."""

    def __init__(self, config: WanVAEDecoderConfig) -> None:
        super().__init__()
        self.config = config
        z = config.z_dim
        mean = config.latent_mean if config.latent_mean is not None else (0.0,) * z
        std = config.latent_std if config.latent_std is not None else (1.0,) * z
        # Not in the Wan checkpoint (upstream keeps them in the wrapper): non-persistent.
        for name, values in (("mean", mean), ("std", std)):
            buffer = torch.tensor(values, dtype=torch.float32).view(1, z, 1, 1, 1)
            self.register_buffer(name, buffer, persistent=False)
        self.conv2 = CausalConv3d(z, z, 1)  # post-quant 1x1x1 conv
        self.decoder = Decoder3d(config)

    @property
    def num_caches(self) -> int:
        return self.decoder.num_caches

    def forward(self, z: torch.Tensor, *feat_cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """z (B, z_dim, T, h, w), usually T = 1; feat_cache: none (stream start) or num_caches tensors.

        Returns (video (B, 3, T_out, 8h, 8w) in [-1, 1], *new_feat_cache). T_out = 1 + 4 (T - 1) at
        the stream start and 4 T afterwards (full size).
        """
        if len(feat_cache) not in (0, self.num_caches):
            raise ValueError(f"expected 0 or {self.num_caches} cache tensors, got {len(feat_cache)}")
        x = z * self.std.to(z.dtype) + self.mean.to(z.dtype)  # (B, z_dim, T, h, w)
        x = self.conv2(x)
        video, new_cache = self.decoder(x, list(feat_cache) if feat_cache else None)
        return (video.clamp(-1.0, 1.0), *new_cache)

    def decode_sequence(self, z: torch.Tensor) -> torch.Tensor:
        """Non-cached causal decode of a whole latent video z (B, z_dim, T, h, w) in one pass.

        Every causal conv sees zero padding before the first frame instead of a cache; the
        reference that frame-by-frame decoding with the cache must reproduce.
        Returns video (B, 3, 1 + 4 (T - 1), 8h, 8w) at full size.
        """
        return self(z)[0]


def _cache_specs(config: WanVAEDecoderConfig, latent_hw: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """(channels, height, width, time_conv_rank) of each cache in forward's order.

    time_conv_rank is -1 for an ordinary causal conv, else how many temporal upsamplings come
    before that time conv (it sees 2**rank frames per later call).
    """
    dim, mult = config.dim, config.dim_mult
    dims = [dim * u for u in (mult[-1], *mult[::-1])]
    h, w = latent_hw
    specs = [(config.z_dim, h, w, -1)]
    specs += [(dims[0], h, w, -1)] * 4  # middle: two residual blocks
    rank = 0
    for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0:
            in_dim //= 2
        for _ in range(config.res_blocks_per_stage):
            specs += [(in_dim, h, w, -1), (out_dim, h, w, -1)]
            in_dim = out_dim
        if i < len(mult) - 1:
            if config.temporal_upsample[i]:
                specs.append((out_dim, h, w, rank))
                rank += 1
            h, w = 2 * h, 2 * w
    specs.append((dims[-1], h, w, -1))  # head conv
    return specs


_OPTIONS = ("frame_index", "latent_hw")


def _check_options(options: dict) -> tuple[int, tuple[int, int] | None]:
    for name in options:
        if name not in _OPTIONS:
            known = ", ".join(_OPTIONS)
            raise TypeError(f"unknown option {name!r} for wan-vae-decoder (known: {known})")
    frame_index = options.get("frame_index", 1)
    if not isinstance(frame_index, int) or frame_index < 0:
        raise ValueError(f"frame_index must be an int >= 0, got {frame_index!r}")
    return frame_index, options.get("latent_hw")


def example_inputs(
    config: WanVAEDecoderConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options,
) -> tuple[torch.Tensor, ...]:
    """(z, *feat_cache) for one decode step.

    Options: `frame_index` (default 1): 0 = first latent frame, no cache (1 output frame); >= 1 =
    a later frame with all caches (4 output frames). `latent_hw` (default config.latent_hw).
    z is standard normal (B, z_dim, 1, h, w). Caches are standard normal, deterministic in the
    seed, not decoded from real frames (no model here); the slots a real stream would still hold
    as zeros are zero: at frame_index 1 the older frame of every cache and all of the temporal
    upsampling convs' caches (their history starts one latent frame later); at frame_index 2 the
    older frame of the first temporal upsampling conv. From 3 on every slot is filled.
    """
    frame_index, latent_hw = _check_options(options)
    h, w = latent_hw if latent_hw is not None else config.latent_hw
    gen = torch.Generator(device="cpu").manual_seed(seed)
    z = torch.randn(batch, config.z_dim, 1, h, w, generator=gen)  # (B, z_dim, 1, h, w)
    tensors = [z]
    if frame_index >= 1:
        for c, ch, cw, rank in _cache_specs(config, (h, w)):
            cache = torch.randn(batch, c, CACHE_T, ch, cw, generator=gen)  # (B, C, 2, H, W)
            # Real frames in front of this step: an ordinary conv got 1 from the first latent frame
            # and >= 1 per later call; a time conv skips the first and gets 2**rank per later call.
            seen = frame_index if rank < 0 else (frame_index - 1) * 2**rank
            history = min(CACHE_T, seen)
            cache[:, :, : CACHE_T - history] = 0.0
            tensors.append(cache)
    return tuple(t.to(device, dtype) for t in tensors)


def step_info(config: WanVAEDecoderConfig, *, batch: int = 1, **options) -> dict[str, float]:
    """Video frames produced by one call: 1 per batch element for the first latent frame, else 4."""
    frame_index, _ = _check_options(options)
    frames = 1 if frame_index == 0 else config.temporal_scale
    return {"frames": float(frames * batch)}
