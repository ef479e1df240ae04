"""Owl audio VAE decoder (Oobleck-style 1D convolutional decoder with SnakeBeta activations).

Source: Wayfarer-Labs/owl-vaes (the submodule pinned by Wayfarer-Labs/owl-wms at 4f23ef2, owl-vaes commit
303c2ee): `owl_vaes/models/oobleck.py` (`Decoder`, `DecoderBlock`, `Block`), `owl_vaes/nn/audio_blocks.py`
(`ResBlock`, `SnakeBeta`), `owl_vaes/nn/normalization.py` (`RMSNorm1d`); config
`configs/owl_vaes/cod_audio.yml` in owl-wms.

One step decodes a batch of latent sequences to stereo waveforms:
    latent (B, latent_channels, latent_len) -> audio (B, channels, latent_len * prod(strides)) in [-1, 1]
At the "full" size that is (B, 64, 120) -> (B, 2, 88200): 2 s at 44.1 kHz, 735 samples per latent step,
20,950,528 parameters.

Flow: 1x1 conv_in to ch_max; a starter block (3 residual units with dilations 1/3/9, SnakeBeta, 1x1 conv);
decoder blocks (nearest upsample, 'same' conv with kernel 2*stride, SnakeBeta, 3 residual units), upsampling
by strides[-2], ..., strides[0]; final k=7 conv to `channels`, tanh.

State-dict keys follow upstream's `Decoder` module (a full OobleckVAE checkpoint loads after stripping the
"decoder." prefix): conv_in, starter.block{1,2,3}.*, starter.act.{alpha,beta}, starter.proj,
blocks.{i}.proj, blocks.{i}.act.*, blocks.{i}.block{1,2,3}.*, conv_out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

OUTPUT_KIND: str = "audio"

DEFAULT_LATENT_LEN = 120  # latent steps per decode: 2 s at 44.1 kHz with the full strides


@dataclass(frozen=True, kw_only=True)
class OwlAudioDecoderConfig:
    latent_channels: int = 64
    channels: int = 2  # output audio channels (stereo)
    ch_0: int = 128  # channels at the highest time resolution
    ch_max: int = 512
    # Encoder-order strides as upstream: the decoder upsamples by strides[-2], ..., strides[0];
    # the last entry belongs to the starter block, which does not resample (upstream uses 1).
    strides: tuple[int, ...] = (3, 5, 7, 7, 1)
    sample_rate: int = 44100
    group_size: int = 16  # channels per group of the residual units' k=7 conv
    kernel_size: int = 7  # residual unit conv kernel
    dilations: tuple[int, int, int] = (1, 3, 9)

    @property
    def hop_length(self) -> int:
        """Audio samples per latent step."""
        return math.prod(self.strides[:-1])


CONFIGS: dict[str, OwlAudioDecoderConfig] = {
    # The CPU pull-request gate's counting size (tier cpu-pr): (1, 16, 120) -> (1, 2, 360), one
    # upsampling; under 30 s a case under callgrind (tiny: about 90 s).
    "micro": OwlAudioDecoderConfig(latent_channels=16, ch_0=16, ch_max=32, strides=(3, 1)),
    # CPU CI: (1, 16, 120) -> (1, 2, 1800).
    "tiny": OwlAudioDecoderConfig(latent_channels=16, ch_0=16, ch_max=32, strides=(3, 5, 1)),
    # CPU size where compile / bf16 / int8 show: (1, 32, 120) -> (1, 2, 12600).
    "medium": OwlAudioDecoderConfig(latent_channels=32, ch_0=32, ch_max=128, strides=(3, 5, 7, 1)),
    # cod_audio: (1, 64, 120) -> (1, 2, 88200).
    "full": OwlAudioDecoderConfig(),
}


def _small_init_(weight: torch.Tensor, gain: float = 0.2) -> None:
    # Upstream zero-initialises this weight (each residual unit starts as the identity). Here it gets small
    # random values so an untrained model's output depends on every layer and accuracy checks mean something.
    fan_in = weight.shape[1] * math.prod(weight.shape[2:])
    nn.init.normal_(weight, std=gain / math.sqrt(fan_in))


class SnakeBeta(nn.Module):
    """x + sin^2(x * (1 + alpha)) / (eps + exp(beta)), per channel (BigVGAN's SnakeBeta, reparametrised)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        # Upstream initialises alpha and beta to zero (frequency 1, magnitude 1); here small random values
        # around that point, so the per-channel parameters are exercised by accuracy checks.
        self.alpha = nn.Parameter(torch.randn(dim) * 0.02)
        self.beta = nn.Parameter(torch.randn(dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        alpha = self.alpha[None, :, None]  # (1, C, 1)
        beta = self.beta[None, :, None]
        return x + (1.0 / (self.eps + beta.exp())) * torch.sin(x * (1.0 + alpha)).pow(2)


class RMSNorm1d(nn.Module):
    """RMS norm with gain (1 + g). As upstream, the mean square is taken over the TIME axis (the last dim)
    per channel, not over channels: kept as is because the trained checkpoint depends on it; it also makes
    every output sample depend on the whole latent sequence."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.randn(dim) * 0.02)  # upstream init: small, default to no gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        rms = (x.float().pow(2).mean(-1, keepdim=True) + self.eps).rsqrt().to(x.dtype)  # (B, C, 1)
        return x * rms * (1.0 + self.gain[None, :, None])


class ResBlock(nn.Module):
    """Residual unit: 1x1 ch->2ch, RMSNorm, SnakeBeta, grouped dilated k=7 conv, RMSNorm, SnakeBeta, 1x1 2ch->ch."""

    def __init__(self, ch: int, dilation: int, total_res_blocks: int, group_size: int = 16, kernel: int = 7) -> None:
        super().__init__()
        n_grps = (2 * ch) // group_size
        pad = dilation * (kernel - 1) // 2
        self.conv1 = nn.Conv1d(ch, 2 * ch, 1, 1, 0)
        self.norm1 = RMSNorm1d(2 * ch)
        self.conv2 = nn.Conv1d(2 * ch, 2 * ch, kernel, dilation=dilation, padding=pad, groups=n_grps)
        self.norm2 = RMSNorm1d(2 * ch)
        self.conv3 = nn.Conv1d(2 * ch, ch, 1, 1, 0, bias=False)
        self.act1 = SnakeBeta(2 * ch)
        self.act2 = SnakeBeta(2 * ch)

        # Fixup-style init as upstream: scale the first two convs by total_res_blocks ** -0.25.
        # Upstream zeroes conv1/conv2 biases and conv3; here biases keep PyTorch's default init and
        # conv3 gets small random values (see _small_init_).
        scale = total_res_blocks**-0.25
        with torch.no_grad():
            for conv in (self.conv1, self.conv2):
                nn.init.kaiming_uniform_(conv.weight)
                conv.weight.mul_(scale)
        _small_init_(self.conv3.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        h = self.act1(self.norm1(self.conv1(x)))  # (B, 2C, T)
        h = self.act2(self.norm2(self.conv2(h)))  # (B, 2C, T)
        return x + self.conv3(h)  # (B, C, T)


class Block(nn.Module):
    """Starter: three residual units at ch_max, SnakeBeta, 1x1 conv (no resampling)."""

    def __init__(self, ch_in: int, ch_out: int, total_blocks: int, c: OwlAudioDecoderConfig) -> None:
        super().__init__()
        d1, d2, d3 = c.dilations
        self.block1 = ResBlock(ch_in, d1, total_blocks * 3, c.group_size, c.kernel_size)
        self.block2 = ResBlock(ch_in, d2, total_blocks * 3, c.group_size, c.kernel_size)
        self.block3 = ResBlock(ch_in, d3, total_blocks * 3, c.group_size, c.kernel_size)
        self.act = SnakeBeta(ch_in)
        self.proj = nn.Conv1d(ch_in, ch_out, 1, 1, 0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        x = self.block3(self.block2(self.block1(x)))
        return self.proj(self.act(x))  # (B, C_out, T)


class DecoderBlock(nn.Module):
    """Nearest upsample by `stride`, 'same' conv with kernel 2*stride, SnakeBeta, three residual units."""

    def __init__(self, ch_in: int, ch_out: int, stride: int, total_blocks: int, c: OwlAudioDecoderConfig) -> None:
        super().__init__()
        d1, d2, d3 = c.dilations
        self.block1 = ResBlock(ch_out, d1, total_blocks * 3, c.group_size, c.kernel_size)
        self.block2 = ResBlock(ch_out, d2, total_blocks * 3, c.group_size, c.kernel_size)
        self.block3 = ResBlock(ch_out, d3, total_blocks * 3, c.group_size, c.kernel_size)
        self.act = SnakeBeta(ch_out)
        # Upstream uses padding='same' with this even kernel; forward pads explicitly the way PyTorch's 'same'
        # does (stride - 1 on the left, stride on the right), which avoids its copy warning and suits export.
        self.proj = nn.Conv1d(ch_in, ch_out, 2 * stride, stride=1, padding=0, bias=False)
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C_in, T)
        x = F.interpolate(x, scale_factor=self.stride, mode="nearest")  # (B, C_in, T * stride)
        x = F.pad(x, (self.stride - 1, self.stride))  # (B, C_in, T * stride + 2 * stride - 1)
        x = self.act(self.proj(x))  # (B, C_out, T * stride)
        return self.block3(self.block2(self.block1(x)))


class OwlAudioDecoder(nn.Module):
    def __init__(self, config: OwlAudioDecoderConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        total_blocks = len(c.strides)

        self.conv_in = nn.Conv1d(c.latent_channels, c.ch_max, 1, 1, 0, bias=False)
        self.starter = Block(c.ch_max, c.ch_max, total_blocks, c)

        # Built highest time resolution first (ch_0, 2*ch_0, ... capped at ch_max), then reversed so that
        # blocks[0] runs first, at the lowest resolution, as upstream.
        blocks = []
        ch = c.ch_0
        for stride in c.strides[:-1]:
            next_ch = min(ch * 2, c.ch_max)
            blocks.append(DecoderBlock(next_ch, ch, stride, total_blocks, c))
            ch = next_ch
        self.blocks = nn.ModuleList(reversed(blocks))

        self.conv_out = nn.Conv1d(c.ch_0, c.channels, 7, 1, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, latent_channels, L)
        x = self.conv_in(x)  # (B, ch_max, L)
        x = self.starter(x)  # (B, ch_max, L)
        for block in self.blocks:
            x = block(x)  # (B, C_out, T * stride)
        return torch.tanh(self.conv_out(x))  # (B, channels, L * hop_length)


def _check_options(options: dict) -> int:
    latent_len = options.pop("latent_len", DEFAULT_LATENT_LEN)
    if options:
        raise TypeError(f"unknown option(s) for owl-audio-decoder: {', '.join(sorted(options))}")
    return int(latent_len)


def example_inputs(
    config: OwlAudioDecoderConfig,
    *,
    batch: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    **options,
) -> tuple[torch.Tensor, ...]:
    """(latent,) with latent (batch, latent_channels, latent_len) ~ N(0, 1).

    Options: latent_len (default 120): latent steps to decode; the output has latent_len * hop_length samples.
    """
    latent_len = _check_options(dict(options))
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(batch, config.latent_channels, latent_len, generator=g)
    return (latent.to(device, dtype),)


def step_info(config: OwlAudioDecoderConfig, *, batch: int = 1, **options) -> dict[str, float]:
    """Seconds of audio decoded by one call (2.0 per batch element at the full size's defaults)."""
    latent_len = _check_options(dict(options))
    return {"audio_s": latent_len * config.hop_length / config.sample_rate * batch}
