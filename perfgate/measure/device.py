"""The device a run measures: the default, validation, and binding a CUDA device by its index.

`torch.cuda.set_device` needs an index: `torch.cuda.set_device(torch.device("cuda"))` raises
"Expected a torch.device with a specified index". The first run of this suite on an H100
(2026-11-23) failed every case on the default device `cuda` that way, while `cuda:0` passed.
So a device is resolved to its index once, where a run starts (`resolve`), and `bind` is the one
place that makes it current.
"""

from __future__ import annotations

import torch


def default_device() -> str:
    """`cuda` when a GPU is usable, else `cpu` (resolve it before use)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def selection_device(pytest_args: list[str]) -> str | None:
    """The --perfgate-device a pytest selection names, or None (then the default applies)."""
    for i, arg in enumerate(pytest_args):
        if arg == "--perfgate-device" and i + 1 < len(pytest_args):
            return pytest_args[i + 1]
        if arg.startswith("--perfgate-device="):
            return arg.split("=", 1)[1]
    return None


def device_error(device: str) -> str | None:
    """Why `device` cannot be benchmarked here, or None."""
    try:
        d = torch.device(device)
    except RuntimeError:
        return f"{device!r} is not a device: use cpu, cuda or cuda:N"
    if d.type not in ("cpu", "cuda"):
        return f"{device!r}: perfgate measures cpu, cuda or cuda:N"
    if d.type == "cuda" and (not torch.cuda.is_available() or (d.index or 0) >= torch.cuda.device_count()):
        return f"{device}: no such CUDA device here (torch.cuda.is_available() is {torch.cuda.is_available()}); use cpu"
    return None


def resolve(device: torch.device | str) -> torch.device:
    """The device with its index: a bare `cuda` is the current CUDA device (`cuda:0` unless
    something chose another); `cpu` and `cuda:N` are returned as they are."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def bind(device: torch.device | str) -> torch.device:
    """Resolve `device` and, for CUDA, make it the current device: events, side streams, graph
    capture and NCCL use the current device. Returns the resolved device."""
    device = resolve(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def is_cpu(device: torch.device | str) -> bool:
    return torch.device(device).type == "cpu"
