"""Tests for models/owl_world_model.py: sizes, shapes, the cached step against the uncached forward."""

from __future__ import annotations

import math

import pytest
import torch

from models.owl_world_model import (
    CONFIGS,
    OUTPUT_KIND,
    OwlWorldModel,
    OwlWorldModelConfig,
    _apply_rope,
    example_inputs,
    step_info,
)

# Exact counts from models.md section 1 (the 200m: 262.3M, counted exactly from the upstream modules).
FULL_SIZE_PARAMS = {"1b": 1_093_823_296, "200m": 262_250_816}


@pytest.fixture(scope="module")
def tiny() -> OwlWorldModel:
    torch.manual_seed(0)
    return OwlWorldModel(CONFIGS["tiny"]).eval()


def _frames(config: OwlWorldModelConfig, batch: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random (x, audio, t, mouse, buttons) for n frames."""
    g = torch.Generator().manual_seed(seed)
    c = config
    return (
        torch.randn(batch, n, c.channels, c.sample_size, c.sample_size, generator=g),
        torch.randn(batch, n, c.audio_channels, generator=g),
        torch.rand(batch, n, generator=g),
        torch.randn(batch, n, 2, generator=g),
        torch.randint(0, 2, (batch, n, c.n_buttons), generator=g).float(),
    )


@pytest.mark.parametrize("size", sorted(FULL_SIZE_PARAMS))
def test_full_size_parameter_count(size: str) -> None:
    with torch.device("meta"):
        model = OwlWorldModel(CONFIGS[size])
    assert sum(p.numel() for p in model.parameters()) == FULL_SIZE_PARAMS[size]


@pytest.mark.parametrize("size", sorted(CONFIGS))
def test_meta_construction(size: str) -> None:
    with torch.device("meta"):
        model = OwlWorldModel(CONFIGS[size])
    # The only buffers are upstream's rope frequency vectors, one per layer; never parameters.
    buffers = dict(model.named_buffers())
    assert len(buffers) == CONFIGS[size].n_layers
    assert all(name.endswith("attn.rope.pos_emb.freqs") for name in buffers)


def test_state_dict_keys_follow_upstream(tiny: OwlWorldModel) -> None:
    """Keys of owl-wms GameRFTAudioCore (a checkpoint's keys minus the leading 'core.')."""
    block = [
        "attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "attn.out.bias",
        "attn.qk_norm.q_norm.gain", "attn.qk_norm.k_norm.gain", "attn.rope.pos_emb.freqs",
        "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
        "adaln1.fc.weight", "adaln1.fc.bias", "gate1.fc_c.weight", "gate1.fc_c.bias",
        "adaln2.fc.weight", "adaln2.fc.bias", "gate2.fc_c.weight", "gate2.fc_c.bias",
    ]  # fmt: skip
    mlp = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    final = ["norm.fc.weight", "norm.fc.bias", "proj.weight", "proj.bias"]
    expected = {f"transformer.blocks.{i}.{k}" for i in range(CONFIGS["tiny"].n_layers) for k in block}
    expected |= {"control_embed.mouse.angle_proj.weight", "proj_in.weight", "audio_proj_in.weight"}
    expected |= {"pos_enc.p"}
    expected |= {f"control_embed.mouse.mlp.{k}" for k in mlp}
    expected |= {f"control_embed.button.proj.{k}" for k in mlp}
    expected |= {f"t_embed.mlp.{k}" for k in mlp}
    expected |= {f"proj_out.{k}" for k in final} | {f"audio_proj_out.{k}" for k in final}
    assert set(tiny.state_dict()) == expected
    # A state dict round-trips strictly (what loading a stripped upstream checkpoint needs).
    OwlWorldModel(CONFIGS["tiny"]).load_state_dict(tiny.state_dict(), strict=True)


@pytest.mark.parametrize("cache_frames", [None, 0, 3])
def test_tiny_forward_shapes(tiny: OwlWorldModel, cache_frames: int | None) -> None:
    c = CONFIGS["tiny"]
    opts = {} if cache_frames is None else {"cache_frames": cache_frames}
    inputs = example_inputs(c, batch=2, **opts)
    cf = c.n_frames - 1 if cache_frames is None else cache_frames
    assert inputs[5].shape == (c.n_layers, 2, c.n_heads, 17 * cf, c.head_dim)
    with torch.no_grad():
        video, audio = tiny(*inputs)
    assert video.shape == (2, 1, 128, 4, 4)
    assert audio.shape == (2, 1, 64)
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()
    assert video.std() > 1e-3 and audio.std() > 1e-3  # not trivially constant


def test_example_inputs_are_the_seven_tensors_of_a_step() -> None:  # seeds, dtype: tests/models/test_contract.py
    assert len(example_inputs(CONFIGS["tiny"], seed=3)) == 7


@pytest.mark.parametrize("cache_frames", [-1, CONFIGS["tiny"].n_frames])
def test_cache_frames_range(cache_frames: int) -> None:
    with pytest.raises(ValueError, match="cache_frames"):
        example_inputs(CONFIGS["tiny"], cache_frames=cache_frames)


def test_forward_rejects_bad_cache(tiny: OwlWorldModel) -> None:
    c = CONFIGS["tiny"]
    x, audio, t, mouse, buttons, k, v = example_inputs(c)
    too_long = torch.zeros(c.n_layers, 1, c.n_heads, 17 * c.n_frames, c.head_dim)
    with pytest.raises(ValueError, match="cache length"):
        tiny(x, audio, t, mouse, buttons, too_long, too_long)
    with pytest.raises(ValueError, match="cache length"):
        tiny(x, audio, t, mouse, buttons, k[:, :, :, :-1], v[:, :, :, :-1])


def test_step_info_defaults() -> None:
    assert step_info(CONFIGS["tiny"]) == {"frames": 1.0}
    assert step_info(CONFIGS["1b"], batch=4, cache_frames=0) == {"frames": 4.0}
    assert OUTPUT_KIND == "tensor"


@pytest.mark.parametrize("causal", [True, False], ids=["block_causal", "full_attention"])
@pytest.mark.parametrize("cache_frames", [0, 1, 4, CONFIGS["tiny"].n_frames - 1])
def test_cached_step_matches_full_sequence(tiny: OwlWorldModel, cache_frames: int, causal: bool) -> None:
    """Step on frame c against the cached pre-RoPE K/V of frames 0..c-1 == frame c of a full forward.

    In the full forward the last frame's queries see all c + 1 frames under either mask; with the
    block-causal mask the cached K/V of the history frames also do not depend on the new frame.
    """
    c = CONFIGS["tiny"]
    n, L = cache_frames + 1, 17 * cache_frames
    x, audio, t, mouse, buttons = _frames(c, batch=2, n=n, seed=cache_frames)
    with torch.no_grad():
        video_ref, audio_ref, k, v = tiny.forward_sequence(x, audio, t, mouse, buttons, causal=causal)
        assert k.shape == v.shape == (c.n_layers, 2, c.n_heads, 17 * n, c.head_dim)
        last = slice(n - 1, n)
        new_frame = (x[:, last], audio[:, last], t[:, last], mouse[:, last], buttons[:, last])
        video, audio_out = tiny(*new_frame, k[:, :, :, :L], v[:, :, :, :L])
    scale = video_ref.abs().max().item()
    torch.testing.assert_close(video, video_ref[:, last], rtol=0, atol=1e-4 * scale)
    audio_scale = audio_ref.abs().max().item()
    torch.testing.assert_close(audio_out, audio_ref[:, last], rtol=0, atol=1e-4 * audio_scale)


def test_block_causal_history_independent_of_new_frame(tiny: OwlWorldModel) -> None:
    """Under the block-causal mask, changing the last frame leaves the history's K/V unchanged."""
    c = CONFIGS["tiny"]
    x, audio, t, mouse, buttons = _frames(c, batch=1, n=4, seed=7)
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        _, _, k1, v1 = tiny.forward_sequence(x, audio, t, mouse, buttons)
        _, _, k2, v2 = tiny.forward_sequence(x2, audio, t, mouse, buttons)
    torch.testing.assert_close(k1[..., : 17 * 3, :], k2[..., : 17 * 3, :], rtol=0, atol=1e-6)
    torch.testing.assert_close(v1[..., : 17 * 3, :], v2[..., : 17 * 3, :], rtol=0, atol=1e-6)
    assert not torch.allclose(k1[..., 17 * 3 :, :], k2[..., 17 * 3 :, :])


def test_cache_changes_the_step(tiny: OwlWorldModel) -> None:
    x, audio, t, mouse, buttons, k, v = example_inputs(CONFIGS["tiny"], cache_frames=2)
    with torch.no_grad():
        video_a, _ = tiny(x, audio, t, mouse, buttons, k, v)
        video_b, _ = tiny(x, audio, t, mouse, buttons, k, v * 2)
    assert not torch.allclose(video_a, video_b)


def test_rope_matches_rotary_embedding_torch_axial_pixel(tiny: OwlWorldModel) -> None:
    """RoPE tables == rotary-embedding-torch get_axial_freqs(n, m) with freqs_for='pixel', applied as
    t * cos + rotate_half(t) * sin on the first head_dim / 2 dims (restated here independently)."""
    c = CONFIGS["tiny"]
    n, m, hd = 3, c.tokens_per_frame, c.head_dim
    freqs = torch.linspace(1.0, c.rope_max_freq / 2, hd // 8) * math.pi  # RotaryEmbedding(dim=hd // 4).freqs
    per_axis = []
    for axis, length in enumerate((n, m)):
        f = torch.linspace(-1, 1, length)[:, None] * freqs  # (length, hd // 8)
        f = f.repeat_interleave(2, dim=-1)  # '... n -> ... (n r)', r = 2
        per_axis.append(f[:, None] if axis == 0 else f[None, :])
    axial = torch.cat(torch.broadcast_tensors(*per_axis), dim=-1).reshape(n * m, hd // 2)

    def rotate_half(u: torch.Tensor) -> torch.Tensor:
        u1, u2 = u.unflatten(-1, (-1, 2)).unbind(-1)
        return torch.stack((-u2, u1), dim=-1).flatten(-2)

    q = torch.randn(2, c.n_heads, n * m, hd)
    rot = q[..., : hd // 2]
    expected = torch.cat((rot * axial.cos() + rotate_half(rot) * axial.sin(), q[..., hd // 2 :]), dim=-1)
    cos, sin = tiny._rope_tables(n, torch.device("cpu"))
    torch.testing.assert_close(_apply_rope(q, cos, sin), expected, rtol=1e-6, atol=1e-6)
