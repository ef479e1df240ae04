"""Tests of the Wan2.1 VAE decoder family (models/wan_vae_decoder.py), CPU only."""

from __future__ import annotations

import pytest
import torch

from models.wan_vae_decoder import (
    CONFIGS,
    OUTPUT_KIND,
    WanVAEDecoder,
    WanVAEDecoderConfig,
    example_inputs,
    step_info,
)

FULL_PARAMS = {"full": 73_295_603}  # models.md section 6 (decoder plus post-quant conv2)


@pytest.fixture(scope="module")
def tiny() -> WanVAEDecoder:
    torch.manual_seed(0)
    return WanVAEDecoder(CONFIGS["tiny"]).eval()


def _decode_frames(model: WanVAEDecoder, z: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
    """Decode z (B, C, T, h, w) one latent frame per call; returns the video and each call's caches."""
    videos, caches_seen, cache = [], [], ()
    for i in range(z.shape[2]):
        out = model(z[:, :, i : i + 1], *cache)
        videos.append(out[0])
        cache = out[1:]
        caches_seen.append(cache)
    return torch.cat(videos, dim=2), caches_seen


@pytest.mark.parametrize("size", sorted(FULL_PARAMS), ids=str)
def test_full_size_parameter_count(size: str) -> None:
    with torch.device("meta"):
        model = WanVAEDecoder(CONFIGS[size])
    assert sum(p.numel() for p in model.parameters()) == FULL_PARAMS[size]
    assert model.num_caches == 32  # the CausalConv3d count upstream caches (decoder_conv_num)


def test_state_dict_follows_upstream_keys() -> None:
    with torch.device("meta"):
        keys = set(WanVAEDecoder(CONFIGS["full"]).state_dict())
    for key in (
        "conv2.weight",
        "decoder.conv1.weight",
        "decoder.middle.0.residual.0.gamma",
        "decoder.middle.0.residual.6.bias",
        "decoder.middle.1.to_qkv.weight",
        "decoder.middle.1.proj.weight",
        "decoder.upsamples.3.resample.1.weight",
        "decoder.upsamples.3.time_conv.weight",
        "decoder.upsamples.4.shortcut.weight",
        "decoder.upsamples.11.resample.1.weight",
        "decoder.head.0.gamma",
        "decoder.head.2.weight",
    ):
        assert key in keys, key
    assert "decoder.upsamples.11.time_conv.weight" not in keys  # third Resample is 2-D only
    assert "mean" not in keys and "std" not in keys  # not in the Wan checkpoint


def test_state_dict_round_trip_strict(tiny: WanVAEDecoder) -> None:
    other = WanVAEDecoder(CONFIGS["tiny"])
    other.load_state_dict(tiny.state_dict(), strict=True)


@pytest.mark.parametrize(("frame_index", "frames"), [(0, 1), (1, 4), (3, 4)], ids=["first", "second", "later"])
def test_tiny_forward_shapes(tiny: WanVAEDecoder, frame_index: int, frames: int) -> None:
    cfg = CONFIGS["tiny"]
    inputs = example_inputs(cfg, batch=2, frame_index=frame_index)
    assert len(inputs) == (1 if frame_index == 0 else 1 + tiny.num_caches)
    with torch.no_grad():
        out = tiny(*inputs)
    h, w = cfg.latent_hw
    assert out[0].shape == (2, 3, frames, 8 * h, 8 * w)
    assert out[0].isfinite().all()
    assert out[0].abs().max() <= 1.0
    # New caches keep the shapes of the caches a later step takes (a static-shape stream).
    later = example_inputs(cfg, batch=2, frame_index=2)
    assert [c.shape for c in out[1:]] == [c.shape for c in later[1:]]
    assert all(c.isfinite().all() for c in out[1:])


def test_latent_hw_option(tiny: WanVAEDecoder) -> None:
    inputs = example_inputs(CONFIGS["tiny"], latent_hw=(1, 3))
    assert inputs[0].shape == (1, 4, 1, 1, 3)
    with torch.no_grad():
        assert tiny(*inputs)[0].shape == (1, 3, 4, 8, 24)


def test_repeated_calls_are_idempotent(tiny: WanVAEDecoder) -> None:
    inputs = example_inputs(CONFIGS["tiny"])
    copies = [t.clone() for t in inputs]
    with torch.no_grad():
        first, second = tiny(*inputs), tiny(*inputs)
    assert all(torch.equal(x, y) for x, y in zip(first, second, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(inputs, copies, strict=True))  # no in-place writes


STREAM_HW = (2, 3)  # latent size of the streaming tests (non-square on purpose)


@pytest.fixture(scope="module")
def stream(tiny: WanVAEDecoder) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, ...]]]:
    """A 3-latent-frame video decoded without a cache in one pass, and frame by frame with it."""
    z = torch.randn(1, CONFIGS["tiny"].z_dim, 3, *STREAM_HW, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        reference = tiny.decode_sequence(z)  # (1, 3, 1 + 4 + 4, 16, 24)
        streamed, caches_seen = _decode_frames(tiny, z)
    return reference, streamed, caches_seen


def test_cached_frames_equal_full_sequence_decode(stream) -> None:
    reference, streamed, _ = stream
    assert reference.shape == (1, 3, 9, 8 * STREAM_HW[0], 8 * STREAM_HW[1])
    assert streamed.shape == reference.shape
    scale = reference.abs().max().clamp_min(1e-6)
    torch.testing.assert_close(streamed, reference, atol=1e-4 * float(scale), rtol=0)


def test_example_cache_zero_slots_match_a_real_stream(stream) -> None:
    """Slots a real stream still holds as zeros are zero in example_inputs, and only those."""
    _, _, caches_seen = stream
    for frame_index in (1, 2, 3):
        real = caches_seen[frame_index - 1]  # the caches frame `frame_index` receives
        fake = example_inputs(CONFIGS["tiny"], frame_index=frame_index, latent_hw=STREAM_HW)[1:]
        for r, f in zip(real, fake, strict=True):
            assert r.shape == f.shape
            for slot in range(r.shape[2]):
                assert bool((r[:, :, slot] == 0).all()) == bool((f[:, :, slot] == 0).all())


def test_step_info() -> None:
    cfg = CONFIGS["tiny"]
    assert step_info(cfg) == {"frames": 4.0}
    assert step_info(cfg, frame_index=0) == {"frames": 1.0}
    assert step_info(CONFIGS["full"], batch=2) == {"frames": 8.0}
    assert step_info(cfg, batch=3, frame_index=0, latent_hw=(2, 2)) == {"frames": 3.0}


def test_output_kind_and_config_frozen() -> None:
    assert OUTPUT_KIND == "image"
    cfg = CONFIGS["full"]
    assert isinstance(cfg, WanVAEDecoderConfig)
    assert (cfg.dim, cfg.z_dim, cfg.dim_mult, cfg.latent_hw) == (96, 16, (1, 2, 4, 4), (60, 104))
    with pytest.raises(AttributeError):
        cfg.dim = 8  # type: ignore[misc]
