"""Owl image VAE decoder ("cod_128x"): a DC-AE style convolutional decoder.

Source: Wayfarer-Labs/owl-vaes (the submodule pinned by Wayfarer-Labs/owl-wms at 4f23ef2, owl-vaes commit
303c2ee): `owl_vaes/models/dcae.py` (`Decoder`), `owl_vaes/nn/resnet.py` (`ResBlock`, `UpBlock`,
`SameBlock`, `SquareToLandscape`), `owl_vaes/nn/sana.py` (`ChannelToSpace`),
`owl_vaes/nn/normalization.py` (`GroupNorm`); config `configs/owl_vaes/cod_128x.yml` in owl-wms.

One step decodes a batch of latents to frames:
    latent (B, latent_channels, latent_size, latent_size) -> image (B, 3, H, W)
At the "full" size that is (B, 128, 4, 4) -> (B, 3, 360, 640), 73,355,776 parameters.

Flow: 1x1 conv_in plus a channel-repeat residual; a starter of ResBlocks at ch_max; up-blocks
(1x1 projection when the channel count changes, bicubic x2, ResBlocks), each with a pixel-shuffle
residual; a 16:9 "square to landscape" stage (3x3 conv, bicubic resize); GroupNorm, SiLU, 3x3 conv to RGB.

State-dict keys follow upstream's `Decoder` module (a full DCAE checkpoint loads after stripping the
"decoder." prefix): conv_in, starter.blocks.{j}.*, blocks.{i}.up.proj, blocks.{i}.blocks.{j}.*,
s_to_l.proj, norm_out.gain, conv_out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

OUTPUT_KIND: str = "image"


@dataclass(frozen=True, kw_only=True)
class OwlImageDecoderConfig:
    latent_channels: int = 128
    latent_size: int = 4  # latent is square: (latent_size, latent_size)
    ch_0: int = 128  # channels at the highest resolution; multiple of 32 (norm_out has 32 groups)
    ch_max: int = 1024  # channels at the lowest resolutions; multiple of latent_channels
    # ResBlocks per stage, as upstream indexes them: entry i is up-block i in run order (lowest resolution
    # first), the last entry is the starter at ch_max; len(...) - 1 is the number of x2 upsamplings.
    blocks_per_stage: tuple[int, ...] = (3, 3, 3, 3, 3, 3, 3, 3)
    landscape: bool = True  # resize the square to 16:9 (512x512 -> 360x640) before the output head
    group_size: int = 16  # channels per group in the ResBlock GroupNorms and grouped 3x3 conv
    out_groups: int = 32  # groups of norm_out

    @property
    def square_size(self) -> int:
        return self.latent_size * 2 ** (len(self.blocks_per_stage) - 1)

    @property
    def sample_size(self) -> tuple[int, int]:
        """Output (H, W)."""
        s = self.square_size
        if not self.landscape:
            return (s, s)
        return (round(s * 360 / 512), round(s * 640 / 512))


CONFIGS: dict[str, OwlImageDecoderConfig] = {
    # The CPU pull-request gate's counting size (tier cpu-pr): 2x2 -> 16x16 square -> 11x20, under
    # 30 s a case under callgrind (tiny: about 210 s, its JIT convolutions slow under valgrind).
    "micro": OwlImageDecoderConfig(latent_channels=8, latent_size=2, ch_0=32, ch_max=64, blocks_per_stage=(1, 1, 1, 1)),
    # CPU CI: 4x4 -> 64x64 square -> 45x80.
    "tiny": OwlImageDecoderConfig(latent_channels=8, ch_0=32, ch_max=64, blocks_per_stage=(1, 1, 1, 1, 1)),
    # CPU size where compile / bf16 / int8 show: 4x4 -> 128x128 square -> 90x160.
    "medium": OwlImageDecoderConfig(latent_channels=32, ch_0=32, ch_max=256, blocks_per_stage=(1, 1, 1, 1, 2, 2)),
    # cod_128x: 4x4 -> 512x512 square -> 360x640.
    "full": OwlImageDecoderConfig(),
}


def _small_init_(weight: torch.Tensor, gain: float = 0.2) -> None:
    # Upstream zero-initialises this weight (each ResBlock starts as the identity). Here it gets small
    # random values so an untrained model's output depends on every layer and accuracy checks mean something.
    fan_in = weight.shape[1] * math.prod(weight.shape[2:])
    nn.init.normal_(weight, std=gain / math.sqrt(fan_in))


class GroupNorm(nn.Module):
    """Group "norm" that divides by each group's std (variance in fp32) without subtracting the mean,
    then scales by (1 + gain)."""

    def __init__(self, dim: int, groups: int = 32, eps: float = 1e-6) -> None:
        super().__init__()
        self.groups = groups
        self.eps = eps
        self.gain = nn.Parameter(torch.randn(dim) * 0.02)  # upstream init: small, default to no gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        xg = x.reshape(b, self.groups, c // self.groups, h, w)  # (B, G, C/G, H, W)
        var = xg.float().var(dim=(2, 3, 4), keepdim=True, unbiased=False)  # (B, G, 1, 1, 1)
        xg = xg / (var + self.eps).sqrt().to(x.dtype)
        return xg.reshape(b, c, h, w) * (1.0 + self.gain[None, :, None, None])


class ResBlock(nn.Module):
    """R3GAN-style bottleneck: 1x1 ch->2ch, GN, LeakyReLU, grouped 3x3, GN, LeakyReLU, 1x1 2ch->ch."""

    def __init__(self, ch: int, total_res_blocks: int, group_size: int = 16) -> None:
        super().__init__()
        n_grps = (2 * ch) // group_size
        self.conv1 = nn.Conv2d(ch, 2 * ch, 1, 1, 0)
        self.norm1 = GroupNorm(2 * ch, n_grps)
        self.conv2 = nn.Conv2d(2 * ch, 2 * ch, 3, 1, 1, groups=n_grps)
        self.norm2 = GroupNorm(2 * ch, n_grps)
        self.conv3 = nn.Conv2d(2 * ch, ch, 1, 1, 0, bias=False)
        self.act1 = nn.LeakyReLU()
        self.act2 = nn.LeakyReLU()

        # Fixup-style init as upstream: scale the first two convs by total_res_blocks ** -0.25.
        # Upstream zeroes conv1/conv2 biases and conv3; here biases keep PyTorch's default init and
        # conv3 gets small random values (see _small_init_).
        scale = total_res_blocks**-0.25
        with torch.no_grad():
            for conv in (self.conv1, self.conv2):
                nn.init.kaiming_uniform_(conv.weight)
                conv.weight.mul_(scale)
        _small_init_(self.conv3.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W)
        h = self.act1(self.norm1(self.conv1(x)))  # (B, 2C, H, W)
        h = self.act2(self.norm2(self.conv2(h)))  # (B, 2C, H, W)
        return x + self.conv3(h)  # (B, C, H, W)


class SameBlock(nn.Module):
    def __init__(self, ch: int, num_res: int, total_blocks: int, group_size: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResBlock(ch, num_res * total_blocks, group_size) for _ in range(num_res))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Upsample(nn.Module):
    """1x1 projection (only when the channel count changes), then bicubic x2."""

    def __init__(self, ch_in: int, ch_out: int) -> None:
        super().__init__()
        # nn.Identity keeps the key set equal to upstream's (an empty nn.Sequential has no parameters).
        self.proj = nn.Identity() if ch_in == ch_out else nn.Conv2d(ch_in, ch_out, 1, 1, 0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.proj(x), scale_factor=2, mode="bicubic")  # (B, C_out, 2H, 2W)


class UpBlock(nn.Module):
    def __init__(self, ch_in: int, ch_out: int, num_res: int, total_blocks: int, group_size: int) -> None:
        super().__init__()
        self.up = Upsample(ch_in, ch_out)
        self.blocks = nn.ModuleList(ResBlock(ch_out, num_res * total_blocks, group_size) for _ in range(num_res))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.up(x)
        for block in self.blocks:
            x = block(x)
        return x


class SquareToLandscape(nn.Module):
    """3x3 conv, then bicubic resize of the square to 16:9 (512x512 -> 360x640)."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        size = (round(h * 360 / 512), round(w * 640 / 512))
        return F.interpolate(self.proj(x), size=size, mode="bicubic")  # (B, C, H', W')


def _channel_to_space(x: torch.Tensor, ch_out: int) -> torch.Tensor:
    """Parameter-free up-block shortcut: pixel-shuffle x2, then repeat channels up to ch_out."""
    x = F.pixel_shuffle(x, 2)  # (B, C/4, 2H, 2W)
    return x.repeat(1, ch_out // x.shape[1], 1, 1)  # (B, ch_out, 2H, 2W); "b c h w -> b (rep c) h w"


class OwlImageDecoder(nn.Module):
    def __init__(self, config: OwlImageDecoderConfig) -> None:
        super().__init__()
        c = config
        if c.ch_0 % c.out_groups or c.ch_max % c.latent_channels:
            raise ValueError("ch_0 must be a multiple of out_groups and ch_max of latent_channels")
        self.config = c
        self.rep_factor = c.ch_max // c.latent_channels
        total_blocks = len(c.blocks_per_stage)

        self.conv_in = nn.Conv2d(c.latent_channels, c.ch_max, 1, 1, 0, bias=False)
        self.starter = SameBlock(c.ch_max, c.blocks_per_stage[-1], total_blocks, c.group_size)

        # Stage channels from the highest resolution down: ch_0, 2*ch_0, ... capped at ch_max.
        # Built highest resolution first, then reversed so blocks[i] runs i-th with blocks_per_stage[i] ResBlocks.
        blocks, out_chs = [], []
        ch = c.ch_0
        for count in reversed(c.blocks_per_stage[:-1]):
            next_ch = min(ch * 2, c.ch_max)
            blocks.append(UpBlock(next_ch, ch, count, total_blocks, c.group_size))
            out_chs.append(ch)
            ch = next_ch
        self.blocks = nn.ModuleList(reversed(blocks))
        self._shortcut_ch: list[int] = out_chs[::-1]  # output channels of blocks[i], for its shortcut

        self.s_to_l = SquareToLandscape(c.ch_0) if c.landscape else nn.Identity()
        self.norm_out = GroupNorm(c.ch_0, c.out_groups)
        self.act_out = nn.SiLU()
        self.conv_out = nn.Conv2d(c.ch_0, 3, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, latent_channels, h, w)
        res = x.repeat(1, self.rep_factor, 1, 1)  # (B, ch_max, h, w); "b c h w -> b (rep c) h w"
        x = self.conv_in(x) + res  # (B, ch_max, h, w)
        x = self.starter(x) + x  # upstream adds the input again around the whole starter

        for block, ch_out in zip(self.blocks, self._shortcut_ch):
            x = block(x) + _channel_to_space(x, ch_out)  # (B, C_out, 2h, 2w)

        x = self.s_to_l(x)  # (B, ch_0, H, W)
        x = self.conv_out(self.act_out(self.norm_out(x)))  # (B, 3, H, W)
        return x


def example_inputs(
    config: OwlImageDecoderConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options,
) -> tuple[torch.Tensor, ...]:
    """(latent,) with latent (batch, latent_channels, latent_size, latent_size) ~ N(0, 1). No options."""
    if options:
        raise TypeError(f"unknown option(s) for owl-image-decoder: {', '.join(sorted(options))}")
    g = torch.Generator().manual_seed(seed)
    s = config.latent_size
    latent = torch.randn(batch, config.latent_channels, s, s, generator=g)
    return (latent.to(device, dtype),)


def step_info(config: OwlImageDecoderConfig, *, batch: int = 1, **options) -> dict[str, float]:
    """One call decodes one frame per batch element."""
    if options:
        raise TypeError(f"unknown option(s) for owl-image-decoder: {', '.join(sorted(options))}")
    return {"frames": float(batch)}
