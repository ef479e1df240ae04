"""Self Forcing causal DiT: parameter counts, shapes, the cache contract and the workload helpers."""

from __future__ import annotations

import pytest
import torch

from models.self_forcing_dit import (
    CONFIGS,
    DEFAULT_BLOCK_INDEX,
    OUTPUT_KIND,
    SelfForcingDiT,
    SelfForcingDiTConfig,
    example_inputs,
    step_info,
)

# models.md section 5 (Wan2.1-T2V-1.3B as built by the original module definitions).
FULL_PARAMS = {"1.3b": 1_418_996_800}
FULL_BLOCK_PARAMS = {"1.3b": 46_440_704}


def _tiny_model(seed: int = 0) -> SelfForcingDiT:
    torch.manual_seed(seed)
    return SelfForcingDiT(CONFIGS["tiny"]).eval()


@pytest.mark.parametrize("size", sorted(FULL_PARAMS), ids=str)
def test_full_size_parameter_count(size: str) -> None:
    with torch.device("meta"):
        model = SelfForcingDiT(CONFIGS[size])
    assert sum(p.numel() for p in model.parameters()) == FULL_PARAMS[size]
    assert sum(p.numel() for p in model.blocks[0].parameters()) == FULL_BLOCK_PARAMS[size]
    assert list(model.buffers()) == []  # RoPE is computed in forward, nothing outside the checkpoint


def test_full_size_shapes() -> None:
    cfg = CONFIGS["1.3b"]
    assert (cfg.head_dim, cfg.tokens_per_frame, cfg.block_tokens, cfg.max_tokens) == (128, 1560, 4680, 32760)
    assert cfg.num_blocks == 7
    assert tuple(2 * p for p in cfg.rope_pairs) == (44, 42, 42)


def test_upstream_state_dict_keys() -> None:
    with torch.device("meta"):
        keys = set(SelfForcingDiT(CONFIGS["tiny"]).state_dict())
    expected = {
        "patch_embedding.weight",
        "patch_embedding.bias",
        "text_embedding.0.weight",
        "text_embedding.2.bias",
        "time_embedding.0.weight",
        "time_embedding.2.weight",
        "time_projection.1.weight",
        "blocks.0.self_attn.q.weight",
        "blocks.0.self_attn.o.bias",
        "blocks.0.self_attn.norm_q.weight",
        "blocks.0.self_attn.norm_k.weight",
        "blocks.0.norm3.weight",
        "blocks.0.norm3.bias",
        "blocks.1.cross_attn.k.weight",
        "blocks.1.cross_attn.norm_k.weight",
        "blocks.1.ffn.0.weight",
        "blocks.1.ffn.2.bias",
        "blocks.1.modulation",
        "head.head.weight",
        "head.head.bias",
        "head.modulation",
    }
    assert expected <= keys
    assert not any(k.startswith(("blocks.0.norm1", "blocks.0.norm2", "head.norm")) for k in keys)


def test_example_inputs_shapes_and_cache_views() -> None:  # seeds: tests/models/test_contract.py
    cfg = CONFIGS["tiny"]
    a = example_inputs(cfg, batch=2, seed=3)
    end = (DEFAULT_BLOCK_INDEX + 1) * cfg.block_tokens
    cache = (cfg.num_layers, 2, end, cfg.num_heads, cfg.head_dim)
    cross = (cfg.num_layers, 2, cfg.text_len, cfg.num_heads, cfg.head_dim)
    assert [tuple(t.shape) for t in a] == [(2, 16, 3, 8, 8), (2, 3), cache, cache, cross, cross, ()]
    assert a[-1].dtype == torch.int64 and int(a[-1]) == DEFAULT_BLOCK_INDEX * cfg.block_tokens
    # The caches are views of full-capacity buffers; only earlier blocks hold data.
    assert a[2]._base is not None and a[2]._base.shape[2] == cfg.max_tokens
    assert a[2][:, :, : int(a[-1])].abs().sum() > 0
    assert a[2]._base[:, :, int(a[-1]) :].abs().sum() == 0
    half = example_inputs(cfg, dtype=torch.bfloat16)
    assert half[0].dtype == torch.bfloat16 and half[2].dtype == torch.bfloat16 and half[-1].dtype == torch.int64


def test_example_inputs_options() -> None:
    cfg = CONFIGS["tiny"]
    with pytest.raises(TypeError, match="frames"):
        example_inputs(cfg, frames=3)
    with pytest.raises(ValueError):
        example_inputs(cfg, block_index=cfg.num_blocks)
    assert example_inputs(cfg, block_index=0)[2].shape[2] == cfg.block_tokens
    assert example_inputs(cfg, block_index=None)[2].shape[2] == (DEFAULT_BLOCK_INDEX + 1) * cfg.block_tokens


def test_tiny_forward_shape_finite_and_cache_write() -> None:
    cfg = CONFIGS["tiny"]
    model = _tiny_model()
    inputs = example_inputs(cfg)
    k_buffer = inputs[2]._base
    start, end = int(inputs[-1]), inputs[2].shape[2]
    before = k_buffer.clone()
    with torch.inference_mode():
        out = model(*inputs)
    assert out.shape == inputs[0].shape == (1, 16, 3, 8, 8)
    assert torch.isfinite(out).all() and out.std() > 0
    # New keys land in the full buffer at [block_start, end); the rest is untouched.
    assert k_buffer[:, :, start:end].abs().sum() > 0
    assert torch.equal(k_buffer[:, :, :start], before[:, :, :start])
    assert torch.equal(k_buffer[:, :, end:], before[:, :, end:])
    assert OUTPUT_KIND == "tensor"


def test_repeated_calls_are_idempotent() -> None:
    model = _tiny_model()
    inputs = example_inputs(CONFIGS["tiny"])
    with torch.inference_mode():
        first = model(*inputs)
        k_after = inputs[2].clone()
        second = model(*inputs)
    assert torch.equal(first, second)
    assert torch.equal(k_after, inputs[2])


def test_cached_blocks_match_block_causal_full_sequence() -> None:
    """Cached calls over blocks 0..3 equal one uncached pass with a block-causal mask."""
    cfg = CONFIGS["tiny"]
    model = _tiny_model(1)
    batch, blocks, fpb = 2, 4, cfg.frames_per_block
    gen = torch.Generator().manual_seed(7)
    latents = torch.randn(batch, cfg.in_dim, blocks * fpb, *cfg.latent_hw, generator=gen)
    timestep = torch.rand(batch, blocks * fpb, generator=gen) * 1000
    text = torch.randn(batch, cfg.text_len, cfg.text_dim, generator=gen)
    with torch.no_grad():
        reference = model.forward_uncached(latents, text, timestep)
        cross_k, cross_v = model.cross_attention_cache(text)
        shape = (cfg.num_layers, batch, cfg.max_tokens, cfg.num_heads, cfg.head_dim)
        k_buffer, v_buffer = torch.zeros(shape), torch.zeros(shape)
        for j in range(blocks):
            start, end = j * cfg.block_tokens, (j + 1) * cfg.block_tokens
            frames = slice(j * fpb, (j + 1) * fpb)
            out = model(
                latents[:, :, frames],
                timestep[:, frames],
                k_buffer[:, :, :end],
                v_buffer[:, :, :end],
                cross_k,
                cross_v,
                torch.tensor(start),
            )
            ref = reference[:, :, frames]
            torch.testing.assert_close(out, ref, atol=1e-4 * ref.abs().max().item(), rtol=0)


def test_later_blocks_attend_over_more_keys() -> None:
    cfg = CONFIGS["tiny"]
    lengths = [example_inputs(cfg, block_index=k)[2].shape[2] for k in range(cfg.num_blocks)]
    assert lengths == [(k + 1) * cfg.block_tokens for k in range(cfg.num_blocks)]
    assert lengths[-1] == cfg.max_tokens


def test_forward_rejects_a_cache_that_is_not_block_aligned() -> None:
    cfg = CONFIGS["tiny"]
    model = _tiny_model()
    inputs = list(example_inputs(cfg))
    inputs[2] = inputs[2][:, :, :-1]
    with pytest.raises(ValueError, match="k_cache"):
        model(*inputs)


def test_exports_with_the_cache_write() -> None:
    cfg = CONFIGS["tiny"]
    model = _tiny_model()
    with torch.no_grad():
        expected = model(*example_inputs(cfg))
    program = torch.export.export(model, example_inputs(cfg))
    inputs = example_inputs(cfg)
    out = program.module()(*inputs)
    torch.testing.assert_close(out, expected)
    assert inputs[2][:, :, int(inputs[-1]) :].abs().sum() > 0  # the export still writes the cache


def test_step_info() -> None:
    cfg = CONFIGS["tiny"]
    assert step_info(cfg) == {"frames": 12.0, "blocks": 1.0}
    assert step_info(cfg, batch=2) == {"frames": 24.0, "blocks": 2.0}
    assert step_info(cfg, block_index=0) == {"frames": 9.0, "blocks": 1.0}  # 1 + 4 + 4 video frames
    frames = sum(step_info(CONFIGS["1.3b"], block_index=k)["frames"] for k in range(7))
    assert frames == 81.0
    with pytest.raises(TypeError):
        step_info(cfg, resolution=480)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SelfForcingDiTConfig(dim=100, num_heads=3)
    with pytest.raises(ValueError):
        SelfForcingDiTConfig(latent_hw=(61, 104))
