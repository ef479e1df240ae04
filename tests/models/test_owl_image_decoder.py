"""Tests of the Owl image VAE decoder family (models/owl_image_decoder.py)."""

import pytest
import torch

from models.owl_image_decoder import (
    CONFIGS,
    OUTPUT_KIND,
    OwlImageDecoder,
    OwlImageDecoderConfig,
    example_inputs,
    step_info,
)

FULL_PARAMS = {"full": 73_355_776}  # models.md section 2 (cod_128x)


def _meta_model(config: OwlImageDecoderConfig) -> OwlImageDecoder:
    with torch.device("meta"):
        return OwlImageDecoder(config)


@pytest.mark.parametrize("size", sorted(FULL_PARAMS))
def test_full_param_count(size: str) -> None:
    model = _meta_model(CONFIGS[size])
    assert sum(p.numel() for p in model.parameters()) == FULL_PARAMS[size]


@pytest.mark.parametrize("size", sorted(CONFIGS))
def test_output_shape_on_meta(size: str) -> None:
    config = CONFIGS[size]
    model = _meta_model(config)
    (latent,) = example_inputs(config, batch=2, device="meta")
    out = model(latent)
    assert out.shape == (2, 3, *config.sample_size)


def test_full_shapes_match_models_md() -> None:
    config = CONFIGS["full"]
    (latent,) = example_inputs(config, device="meta")
    assert latent.shape == (1, 128, 4, 4)
    assert config.sample_size == (360, 640)


def test_upstream_state_dict_keys() -> None:
    keys = set(_meta_model(CONFIGS["full"]).state_dict())
    for key in (
        "conv_in.weight",
        "starter.blocks.2.conv1.weight",
        "starter.blocks.2.conv1.bias",
        "starter.blocks.2.norm1.gain",
        "starter.blocks.2.conv2.weight",
        "starter.blocks.2.norm2.gain",
        "starter.blocks.2.conv3.weight",
        "blocks.0.blocks.2.conv3.weight",
        "blocks.4.up.proj.weight",  # 1024 -> 512: the first stage that changes channels
        "blocks.6.up.proj.weight",
        "s_to_l.proj.weight",
        "norm_out.gain",
        "conv_out.weight",
    ):
        assert key in keys, key
    assert "blocks.0.up.proj.weight" not in keys  # 1024 -> 1024 has no projection upstream
    assert "starter.blocks.2.conv3.bias" not in keys


def test_blocks_per_stage_indexing_follows_upstream() -> None:
    # Upstream: up-block i (run order) gets blocks_per_stage[i] ResBlocks, the starter gets the last entry.
    config = OwlImageDecoderConfig(latent_channels=8, ch_0=32, ch_max=64, blocks_per_stage=(1, 2, 3, 4))
    model = _meta_model(config)
    assert [len(b.blocks) for b in model.blocks] == [1, 2, 3]
    assert len(model.starter.blocks) == 4


def test_tiny_forward() -> None:
    config = CONFIGS["tiny"]
    torch.manual_seed(0)
    model = OwlImageDecoder(config).eval()
    (latent,) = example_inputs(config, batch=2)
    with torch.no_grad():
        out = model(latent)
    assert out.shape == (2, 3, 45, 80)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    # Batch elements differ (the output depends on the input, not just on the weights).
    assert not torch.allclose(out[0], out[1])


def test_no_zero_initialised_output_convs() -> None:
    torch.manual_seed(0)
    model = OwlImageDecoder(CONFIGS["tiny"])
    for name, p in model.named_parameters():
        if name.endswith("conv3.weight"):
            assert p.abs().max() > 0, name


def test_example_inputs_shape() -> None:  # seeds, dtype, unknown options: tests/models/test_contract.py
    config = CONFIGS["tiny"]
    (a,) = example_inputs(config, batch=2, seed=3)
    assert a.shape == (2, config.latent_channels, config.latent_size, config.latent_size)


def test_step_info() -> None:
    assert step_info(CONFIGS["full"]) == {"frames": 1.0}
    assert step_info(CONFIGS["tiny"], batch=4) == {"frames": 4.0}


def test_output_kind() -> None:
    assert OUTPUT_KIND == "image"


def test_ch_0_must_fit_out_groups() -> None:
    with pytest.raises(ValueError):
        _meta_model(OwlImageDecoderConfig(latent_channels=8, ch_0=48, ch_max=96, blocks_per_stage=(1, 1)))
