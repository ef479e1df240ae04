"""The memory profile of one step: peak, the weights' and inputs' share, activations, headroom."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perfgate.measure.memory import MIB, MemoryTracker


def tensor_mib(tensors: Any) -> float:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)) / MIB


def memory_profile(
    step: Callable[[], Any], module: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device
) -> dict[str, Any]:
    """Peak memory of one step, the weights' and inputs' share of it, and the headroom left."""
    with MemoryTracker(device) as mem:
        step()
    assert mem.result is not None
    weights = tensor_mib(list(module.parameters()) + list(module.buffers()))
    out: dict[str, Any] = {
        "method": mem.result.method,
        "peak_mem_mib": mem.result.peak_mem_mib,
        "reserved_mem_mib": mem.result.reserved_mem_mib,
        "weights_mib": weights,
        "inputs_mib": tensor_mib(inputs),
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        out["device_total_mib"] = total / MIB
        # Absolute allocator peak: weights and inputs are inside it.
        out["activations_mib"] = max(mem.result.peak_mem_mib - weights - out["inputs_mib"], 0.0)
        out["headroom"] = 1.0 - (mem.result.reserved_mem_mib or mem.result.peak_mem_mib) / (total / MIB)
        out["peak_semantics"] = "absolute CUDA allocator peak (weights included)"
    else:
        import psutil

        vm = psutil.virtual_memory()
        out["device_total_mib"] = vm.total / MIB
        out["available_mib"] = vm.available / MIB
        # The CPU peak is the RSS high-water growth during the step: the activations.
        out["activations_mib"] = mem.result.peak_mem_mib
        out["headroom"] = max(vm.available / MIB - mem.result.peak_mem_mib, 0.0) / (vm.total / MIB)
        out["peak_semantics"] = "growth of the process's RSS high-water mark during one step"
    return out
