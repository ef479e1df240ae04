"""CPU tests for models/vjepa2_encoder.py (V-JEPA 2 video encoder with 3D RoPE)."""

from __future__ import annotations

import pytest
import torch

from models.vjepa2_encoder import (
    CONFIGS,
    OUTPUT_KIND,
    VJEPA2Encoder,
    VJEPA2EncoderConfig,
    apply_rope,
    example_inputs,
    rope_tables,
    step_info,
)

# Trainable parameter counts of the RoPE variants, from models.md section 4.
FULL_SIZE_PARAMS = {
    "large": 303_885_312,
    "huge": 631_648_000,
    "giant": 1_012_173_952,
}


@pytest.mark.parametrize("size", list(FULL_SIZE_PARAMS), ids=list(FULL_SIZE_PARAMS))
def test_full_size_param_count(size: str) -> None:
    with torch.device("meta"):
        model = VJEPA2Encoder(CONFIGS[size])
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == FULL_SIZE_PARAMS[size]
    assert list(model.buffers()) == []  # RoPE tables are built in forward, never stored


def test_sizes_present() -> None:
    assert {"tiny", "medium", *FULL_SIZE_PARAMS} <= set(CONFIGS)
    assert OUTPUT_KIND == "tensor"


def test_full_size_state_dict_keys_follow_upstream() -> None:
    with torch.device("meta"):
        model = VJEPA2Encoder(CONFIGS["large"])
    keys = set(model.state_dict())
    expected = {"patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight", "norm.bias"}
    for i in range(24):
        for name in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
            expected |= {f"blocks.{i}.{name}.weight", f"blocks.{i}.{name}.bias"}
    assert keys == expected


@pytest.mark.parametrize(
    ("size", "split"),
    [("tiny", (8, 0)), ("medium", (20, 4)), ("large", (20, 4)), ("giant", (20, 4))],
    ids=["tiny-hd24", "medium-hd64", "large-hd64", "giant-hd64"],
)
def test_rope_split(size: str, split: tuple[int, int]) -> None:
    config = CONFIGS[size]
    axis_dim, unrotated = split
    assert config.rope_axis_dim == axis_dim
    assert config.head_dim - 3 * config.rope_axis_dim == unrotated


def test_tiny_forward_shape_and_finite() -> None:
    config = CONFIGS["tiny"]
    torch.manual_seed(0)
    model = VJEPA2Encoder(config).eval()
    (video,) = example_inputs(config, batch=2)
    assert video.shape == (2, 3, 4, 64, 64)
    with torch.no_grad():
        tokens = model(video)
    assert tokens.shape == (2, (4 // 2) * (64 // 16) ** 2, 96)
    assert torch.isfinite(tokens).all()
    assert tokens.std() > 0.1  # LayerNorm output, not a constant


def test_tiny_forward_with_shape_options() -> None:
    config = CONFIGS["tiny"]
    model = VJEPA2Encoder(config).eval()
    (video,) = example_inputs(config, img_size=32, num_frames=6)
    assert video.shape == (1, 3, 6, 32, 32)
    with torch.no_grad():
        tokens = model(video)
    assert tokens.shape == (1, 3 * 2 * 2, 96)
    assert torch.isfinite(tokens).all()


def test_rope_positions_matter() -> None:
    # Reversing the order of whole patch columns moves each token's content to another position.
    # Without position information the output would be the same tokens reordered; RoPE breaks that.
    config = CONFIGS["tiny"]
    torch.manual_seed(0)
    model = VJEPA2Encoder(config).eval()
    (video,) = example_inputs(config)  # (1, 3, 4, 64, 64)
    moved = video.unflatten(-1, (4, 16)).flip(-2).flatten(-2)  # patch columns reversed, pixels kept
    with torch.no_grad():
        out = model(video).unflatten(1, (2, 4, 4))  # (B, T', H', W', D)
        out_moved = model(moved).unflatten(1, (2, 4, 4)).flip(3)  # back to the original order
        no_rope = torch.ones(32, 24), torch.zeros(32, 24)
        x = model.patch_embed(video).flatten(2).transpose(1, 2)
        xm = model.patch_embed(moved).flatten(2).transpose(1, 2)
        for block in model.blocks:
            x, xm = block(x, *no_rope), block(xm, *no_rope)
    # Sanity: with identity rotation the reordering is exactly undone.
    torch.testing.assert_close(x.unflatten(1, (2, 4, 4)), xm.unflatten(1, (2, 4, 4)).flip(3), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, out_moved, atol=1e-3)


def test_rope_tables_and_rotation() -> None:
    cos, sin = rope_tables((2, 3, 4), axis_dim=8, base=10000.0, device=torch.device("cpu"))
    assert cos.shape == sin.shape == (24, 24)
    # Token 0 sits at the origin: no rotation.
    assert torch.equal(cos[0], torch.ones(24)) and torch.equal(sin[0], torch.zeros(24))
    # Token (t=1, h=2, w=3) is the last: the width block rotates by 3 * omega, tiled like upstream.
    omega = 10000.0 ** -(torch.arange(4) / 4)
    torch.testing.assert_close(sin[-1, 16:], torch.cat([(3 * omega).sin()] * 2))
    torch.testing.assert_close(sin[-1, :8], torch.cat([(1 * omega).sin()] * 2))
    # Unrotated tail passes through unchanged.
    x = torch.randn(1, 2, 24, 28)
    y = apply_rope(x, cos, sin)
    assert torch.equal(y[..., 24:], x[..., 24:])


@pytest.mark.parametrize(
    "options",
    [{"img_size": 72}, {"num_frames": 5}, {"img_size": 0}, {"num_frames": 2.0}],
    ids=["img-not-multiple-of-patch", "frames-not-multiple-of-tubelet", "img-zero", "frames-float"],
)
def test_shape_options_validated(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        example_inputs(CONFIGS["tiny"], **options)
    with pytest.raises(ValueError, match=next(iter(options))):
        step_info(CONFIGS["tiny"], **options)


def test_step_info_defaults() -> None:
    assert step_info(CONFIGS["tiny"]) == {"frames": 4.0}
    assert step_info(CONFIGS["medium"]) == {"frames": 8.0}
    assert step_info(CONFIGS["large"]) == {"frames": 16.0}
    assert step_info(CONFIGS["large"], batch=2, num_frames=8) == {"frames": 16.0}


def test_config_defaults_and_validation() -> None:
    config = CONFIGS["large"]
    shape = (config.img_size, config.num_frames, config.tubelet_size, config.patch_size)
    assert shape == (256, 16, 2, 16)
    with pytest.raises(ValueError):
        VJEPA2EncoderConfig(embed_dim=100, depth=1, num_heads=3, mlp_hidden_dim=64)
