"""This repository's benchmarked model families, registered under the names users type.

A registry at the repository's top level, not part of the installed perfgate (the wheel ships no
models): perfgate never imports it; this repository registers the families by naming it,
`[tool.perfgate] registries = ["models"]` (the repository root is on `sys.path`). Each name is the pytest
id and the baseline key: never rename one that has baselines. Model code lives one family per
file beside this one; this registry is the only glue.
"""

from perfgate.cases.workload import ModelSpec, register_model

# Default sizes: the CPU gets the tiny CI size, a GPU the full size of the upstream model.
register_model(
    ModelSpec(
        name="owl-world-model",
        module="models.owl_world_model",
        model_class="OwlWorldModel",
        default_sizes={"cpu": "tiny", "cuda": "1b"},
        sweep={"cache_frames": (0, None)},  # empty cache and the full window: cost grows with the fill
        description="Owl audio-visual diffusion-forcing world model: one frame against a filled KV cache",
    )
)
register_model(
    ModelSpec(
        name="owl-image-decoder",
        module="models.owl_image_decoder",
        model_class="OwlImageDecoder",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        description="Owl image VAE decoder: latent [1,128,4,4] -> image [1,3,360,640]",
    )
)
register_model(
    ModelSpec(
        name="owl-audio-decoder",
        module="models.owl_audio_decoder",
        model_class="OwlAudioDecoder",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        description="Owl audio VAE decoder (Oobleck-style): latent [1,64,120] -> 2 s of stereo 44.1 kHz",
    )
)
register_model(
    ModelSpec(
        name="vjepa2-encoder",
        module="models.vjepa2_encoder",
        model_class="VJEPA2Encoder",
        default_sizes={"cpu": "tiny", "cuda": "large"},
        description="V-JEPA 2 ViT video encoder with 3D RoPE: clip [B,3,T,H,W] -> tokens",
    )
)
register_model(
    ModelSpec(
        name="self-forcing-dit",
        module="models.self_forcing_dit",
        model_class="SelfForcingDiT",
        default_sizes={"cpu": "tiny", "cuda": "1.3b"},
        sweep={"block_index": (0, None)},  # first block and the default, later block: cache fill grows
        description="Self Forcing block-causal Wan 1.3B DiT: one denoising call for a 3-latent-frame block",
    )
)
register_model(
    ModelSpec(
        name="wan-vae-decoder",
        module="models.wan_vae_decoder",
        model_class="WanVAEDecoder",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        description="Wan causal 3D-conv VAE decoder: one latent frame with its feature cache",
    )
)
register_model(
    ModelSpec(
        name="physicsnemo-block",
        module="models.physicsnemo_block",
        model_class="PhysicsNeMoBlock",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        description="PhysicsNeMo tutorial attention block, inference",
    )
)
register_model(
    ModelSpec(
        name="physicsnemo-train",
        module="models.physicsnemo_block",
        model_class="PhysicsNeMoBlock",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        step_kind="train",
        data="device",
        description="PhysicsNeMo tutorial training step, batches generated on the device (the tutorial's fix)",
    )
)
register_model(
    ModelSpec(
        name="physicsnemo-train-host-data",
        module="models.physicsnemo_block",
        model_class="PhysicsNeMoBlock",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        step_kind="train",
        data="host",
        description="PhysicsNeMo tutorial training step, batches generated with numpy on the host (the bottleneck)",
    )
)

# Data-parallel workloads for torchrun runs (step kinds of perfgate.cases.steps): each rank processes
# its own data, throughput is summed over ranks; outside torchrun they run only when named.
register_model(
    ModelSpec(
        name="physicsnemo-ddp-train",
        module="models.physicsnemo_block",
        model_class="PhysicsNeMoBlock",
        default_sizes={"cpu": "tiny", "cuda": "full"},
        step_kind="ddp-train",
        data="device",
        description="PhysicsNeMo tutorial training step under DDP, each rank its own device-generated batches; "
        "throughput summed over ranks",
    )
)
register_model(
    ModelSpec(
        name="vjepa2-dp-inference",
        module="models.vjepa2_encoder",
        model_class="VJEPA2Encoder",
        default_sizes={"cpu": "tiny", "cuda": "large"},
        step_kind="dp-inference",
        description="V-JEPA 2 video encoder, data-parallel inference: each rank encodes its own clips; "
        "throughput summed over ranks",
    )
)
