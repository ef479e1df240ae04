"""The timed step of a workload, built by its step kind (`ModelSpec.step_kind`: inference, train,
ddp-train, dp-inference).

The step is the zero-argument callable the measurement core times. Every kind's builder is here,
the data-parallel ones included, so `STEP_KIND_BUILDERS` is complete by construction (a test
checks it against `STEP_KINDS`) without any registration. A builder takes `(workload, module,
inputs, context)` and returns the step. The kinds' names (`STEP_KINDS`) live in
perfgate.cases.workload, which validates a spec against them; this module builds each and
imports nothing back.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from perfgate.cases.workload import Workload, is_training
from perfgate.measure.topology import ensure_process_group, rank_and_world

StepBuilder = Callable[[Workload, nn.Module, tuple[torch.Tensor, ...], Callable[[], Any]], Callable[[], Any]]


def train_loss(out: torch.Tensor) -> torch.Tensor:
    """The tutorial's loss: mean over the batch of each sample's sum of squares."""
    return out.float().pow(2).flatten(1).sum(dim=1).mean()


def make_batch_source(wl: Workload) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """Inputs for the i-th step: the fixed inputs, or a batch generated on the host or the device."""
    if wl.spec.data == "static":
        return lambda i: wl.inputs
    gen = wl.family.host_batch if wl.spec.data == "host" else wl.family.device_batch
    shape = tuple(wl.inputs[0].shape)
    return lambda i: (gen(shape, index=i, device=wl.device, dtype=wl.inputs[0].dtype),)


def sgd_step(
    module: nn.Module, batch: Callable[[int], tuple[torch.Tensor, ...]], context: Callable[[], Any]
) -> Callable[[], torch.Tensor]:
    """The tutorial's step on the i-th batch: forward, loss, backward, SGD (lr 1e-4, momentum 0.9)."""
    opt = torch.optim.SGD(module.parameters(), lr=1e-4, momentum=0.9)
    counter = iter(range(sys.maxsize))

    def train() -> torch.Tensor:
        with context():
            loss = train_loss(module(*batch(next(counter))))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return train


def inference_step(
    wl: Workload, module: nn.Module, inputs: tuple[torch.Tensor, ...], context: Callable[[], Any]
) -> Callable[[], Any]:
    """Forward only, under inference_mode."""

    def infer() -> Any:
        with torch.inference_mode(), context():
            return module(*inputs)

    return infer


def train_step(
    wl: Workload, module: nn.Module, inputs: tuple[torch.Tensor, ...], context: Callable[[], Any]
) -> Callable[[], Any]:
    """Forward, loss, backward and an SGD step with momentum (lr 1e-4, momentum 0.9, as in the
    tutorial); returns the loss before the update, comparable with the reference loss."""
    source = make_batch_source(wl)
    static = wl.spec.data == "static"
    return sgd_step(module, lambda i: inputs if static else tuple(t.to(inputs[0].dtype) for t in source(i)), context)


# --------------------------------------------------------------------- data-parallel step kinds


def batch_multiplier(wl: Workload) -> int:
    """The `batch` the workload was built with, from its items per step (linear in batch)."""
    per_one = wl.family.step_info(wl.config, batch=1, **wl.options)[wl.unit]
    return max(1, round(wl.throughput[wl.unit] / per_one))


def shard_inputs(wl: Workload, like: Sequence[torch.Tensor], rank: int) -> tuple[torch.Tensor, ...]:
    """This rank's own inputs: the family's example inputs drawn with seed + rank, converted to the
    dtype and device of `like` (the variant's inputs)."""
    xs = wl.family.example_inputs(
        wl.config, batch=batch_multiplier(wl), seed=wl.seed + rank, device=wl.device, dtype=torch.float32, **wl.options
    )
    out = tuple(
        x.to(device=ref.device, dtype=ref.dtype) if x.is_floating_point() else x.to(ref.device)
        for x, ref in zip(xs, like)
    )
    if len(out) != len(like) or any(a.shape != b.shape for a, b in zip(out, like)):
        raise ValueError(
            f"model {wl.spec.name!r}: example_inputs(seed={wl.seed + rank}) gave shapes "
            f"{[tuple(a.shape) for a in out]}, the workload's inputs are {[tuple(b.shape) for b in like]}"
        )
    return out


def rank_batches(
    wl: Workload, inputs: tuple[torch.Tensor, ...], rank: int, world: int
) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """Inputs of the i-th call on this rank.

    Call 0 (the untimed first call) takes the shared reference batch on every rank, so the
    accuracy check compares the output with the fp32 reference of the same inputs; later calls
    take the rank's own data: fixed inputs drawn with seed + rank, or generated batches interleaved
    across ranks like a DistributedSampler (rank r takes global batches r, r + world, ...).
    """
    dtype = inputs[0].dtype
    if wl.spec.data == "static":
        own = shard_inputs(wl, inputs, rank)
        return lambda i: inputs if i == 0 else own
    gen = wl.family.host_batch if wl.spec.data == "host" else wl.family.device_batch
    shape = tuple(inputs[0].shape)
    return lambda i: (
        gen(shape, index=0 if i == 0 else i * world + rank, device=wl.device, dtype=torch.float32).to(dtype),
    )


def ddp_train_step(
    wl: Workload, module: nn.Module, inputs: tuple[torch.Tensor, ...], context: Callable[[], Any]
) -> Callable[[], Any]:
    """train_step under DistributedDataParallel: forward, loss, backward (gradients all-reduced
    across ranks), SGD with momentum (lr 1e-4, momentum 0.9); each rank trains on its own batches.
    Without torchrun the group is a single rank, so the step still runs (DDP's hooks, no peers)."""
    from torch.nn.parallel import DistributedDataParallel

    from perfgate.cases.conversions import VariantError

    if not any(p.requires_grad for p in module.parameters()):
        raise VariantError("this variant leaves no trainable parameters, so there is nothing for DDP to synchronise")
    ensure_process_group(wl.device)
    rank, world = rank_and_world()
    device_ids = (
        [wl.device.index if wl.device.index is not None else torch.cuda.current_device()]
        if wl.device.type == "cuda"
        else None
    )
    ddp = DistributedDataParallel(module, device_ids=device_ids)  # broadcasts rank 0's weights: all ranks start equal
    return sgd_step(ddp, rank_batches(wl, inputs, rank, world), context)


def dp_inference_step(
    wl: Workload, module: nn.Module, inputs: tuple[torch.Tensor, ...], context: Callable[[], Any]
) -> Callable[[], Any]:
    """inference_step on this rank's own shard of inputs; ranks do not communicate, so no
    process group is needed and a single process is simply rank 0 of 1."""
    rank, world = rank_and_world()
    source = rank_batches(wl, inputs, rank, world)
    counter = itertools.count()

    def infer() -> Any:
        batch = source(next(counter))
        with torch.inference_mode(), context():
            return module(*batch)

    return infer


# Which kinds are data-parallel (throughput summed over ranks): perfgate.cases.workload.DATA_PARALLEL_STEP_KINDS.
STEP_KIND_BUILDERS: dict[str, StepBuilder] = {
    "inference": inference_step,
    "train": train_step,
    "ddp-train": ddp_train_step,
    "dp-inference": dp_inference_step,
}


def make_step(
    wl: Workload,
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    context: Callable[[], Any],
) -> Callable[[], Any]:
    """The zero-argument step the measurement core times, built by the spec's step kind."""
    return STEP_KIND_BUILDERS[wl.spec.step_kind](wl, module, inputs, context)


def reference_output(wl: Workload) -> Any:
    """The fp32 eager output the variants are checked against (the loss for a train step)."""
    first = make_batch_source(wl)(0)
    with torch.no_grad():
        out = wl.module(*first)
        return train_loss(out) if is_training(wl.spec.step_kind) else out
