"""The memory profile of one step: peak, the weights' and inputs' share, activations, headroom."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from perfgate.measure.memory import MIB, MemoryTracker
from perfgate.profile.report import MemoryProfile


def tensor_mib(tensors: Iterable[object]) -> float:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)) / MIB


def memory_profile(
    step: Callable[[], Any], module: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device
) -> MemoryProfile:
    """Peak memory of one step, the weights' and inputs' share of it, and the headroom left."""
    with MemoryTracker(device) as mem:
        step()
    assert mem.result is not None
    peak, reserved = mem.result.peak_mem_mib, mem.result.reserved_mem_mib
    weights, inputs_mib = tensor_mib(list(module.parameters()) + list(module.buffers())), tensor_mib(inputs)
    available: float | None = None
    if device.type == "cuda":
        _, total = torch.cuda.mem_get_info(device)
        total_mib = total / MIB
        activations = max(peak - weights - inputs_mib, 0.0)  # absolute allocator peak: weights and inputs are inside it
        headroom = 1.0 - (reserved or peak) / total_mib
        semantics = "absolute CUDA allocator peak (weights included)"
    else:
        import psutil

        vm = psutil.virtual_memory()
        total_mib, available = vm.total / MIB, vm.available / MIB
        activations = peak  # the CPU peak is the RSS high-water growth during the step: the activations
        headroom = max(available - peak, 0.0) / total_mib
        semantics = "growth of the process's RSS high-water mark during one step"
    return MemoryProfile(
        method=mem.result.method,
        peak_mem_mib=peak,
        reserved_mem_mib=reserved,
        weights_mib=weights,
        inputs_mib=inputs_mib,
        device_total_mib=total_mib,
        available_mib=available,
        activations_mib=activations,
        headroom=headroom,
        peak_semantics=semantics,
    )
