"""Tests of the Owl audio VAE decoder family (models/owl_audio_decoder.py)."""

import pytest
import torch

from models.owl_audio_decoder import (
    CONFIGS,
    OUTPUT_KIND,
    OwlAudioDecoder,
    OwlAudioDecoderConfig,
    example_inputs,
    step_info,
)

FULL_PARAMS = {"full": 20_950_528}  # models.md section 3 (cod_audio)


def _meta_model(config: OwlAudioDecoderConfig) -> OwlAudioDecoder:
    with torch.device("meta"):
        return OwlAudioDecoder(config)


@pytest.mark.parametrize("size", sorted(FULL_PARAMS))
def test_full_param_count(size: str) -> None:
    model = _meta_model(CONFIGS[size])
    assert sum(p.numel() for p in model.parameters()) == FULL_PARAMS[size]


@pytest.mark.parametrize("size", sorted(CONFIGS))
def test_output_shape_on_meta(size: str) -> None:
    config = CONFIGS[size]
    (latent,) = example_inputs(config, batch=2, device="meta", latent_len=10)
    out = _meta_model(config)(latent)
    assert out.shape == (2, config.channels, 10 * config.hop_length)


def test_full_shapes_match_models_md() -> None:
    config = CONFIGS["full"]
    assert config.hop_length == 735
    (latent,) = example_inputs(config, device="meta")
    assert latent.shape == (1, 64, 120)
    assert _meta_model(config)(latent).shape == (1, 2, 88200)


def test_upstream_state_dict_keys() -> None:
    keys = set(_meta_model(CONFIGS["full"]).state_dict())
    for key in (
        "conv_in.weight",
        "starter.block1.conv1.weight",
        "starter.block1.conv1.bias",
        "starter.block1.norm1.gain",
        "starter.block1.act1.alpha",
        "starter.block1.act1.beta",
        "starter.block3.conv2.weight",
        "starter.block3.act2.beta",
        "starter.block3.conv3.weight",
        "starter.act.alpha",
        "starter.proj.weight",
        "blocks.0.proj.weight",
        "blocks.0.act.beta",
        "blocks.3.block3.norm2.gain",
        "conv_out.weight",
    ):
        assert key in keys, key
    assert "blocks.4.proj.weight" not in keys
    # blocks[0] runs first: 512 -> 512 with the x7 upsampling (kernel 14); blocks[3] is 256 -> 128, x3.
    sd = _meta_model(CONFIGS["full"]).state_dict()
    assert sd["blocks.0.proj.weight"].shape == (512, 512, 14)
    assert sd["blocks.3.proj.weight"].shape == (128, 256, 6)


def test_tiny_forward() -> None:
    config = CONFIGS["tiny"]
    torch.manual_seed(0)
    model = OwlAudioDecoder(config).eval()
    (latent,) = example_inputs(config, batch=2)
    with torch.no_grad():
        out = model(latent)
    assert out.shape == (2, 2, 120 * 15)
    assert torch.isfinite(out).all()
    assert out.abs().max() <= 1.0  # tanh output
    assert not torch.allclose(out[0], out[1])


def test_no_zero_initialised_parameters() -> None:
    torch.manual_seed(0)
    model = OwlAudioDecoder(CONFIGS["tiny"])
    for name, p in model.named_parameters():
        if name.endswith(("conv3.weight", ".alpha", ".beta")):
            assert p.abs().max() > 0, name


def test_example_inputs_shapes() -> None:  # seeds, dtype, unknown options: tests/models/test_contract.py
    config = CONFIGS["tiny"]
    (a,) = example_inputs(config, batch=2, seed=3)
    assert a.shape == (2, config.latent_channels, 120)
    (d,) = example_inputs(config, latent_len=7)
    assert d.shape == (1, config.latent_channels, 7)


def test_step_info() -> None:
    assert step_info(CONFIGS["full"]) == {"audio_s": 2.0}
    assert step_info(CONFIGS["full"], batch=3) == {"audio_s": 6.0}
    assert step_info(CONFIGS["full"], latent_len=60) == {"audio_s": 1.0}
    assert step_info(CONFIGS["tiny"]) == pytest.approx({"audio_s": 1800 / 44100})


def test_output_kind_and_sample_rate() -> None:
    assert OUTPUT_KIND == "audio"
    assert CONFIGS["full"].sample_rate == 44100
