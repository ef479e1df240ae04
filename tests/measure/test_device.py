"""The run's device: default, validation and binding, through a fake `torch.cuda` on the CPU.

The first H100 run failed every case on the default device: `run_case` called
`torch.cuda.set_device(torch.device("cuda"))`, which raises "Expected a torch.device with a specified
index". The fake's `set_device` runs torch's own `_get_device_index` (the function that raised there),
so a device without an index fails here exactly as it did on the GPU.
"""

from __future__ import annotations

import pytest
import torch
from torch.cuda._utils import _get_device_index

from perfgate.measure.device import bind, default_device, device_error, resolve


class FakeCuda:
    """`torch.cuda`'s device bookkeeping with the real index semantics and no GPU behind it."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.current = 0
        self.set_calls: list[int] = []

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current

    def set_device(self, device: torch.device | str | int) -> None:
        index = _get_device_index(device)  # raises for torch.device("cuda"), as on a GPU
        if not 0 <= index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        self.current = index
        self.set_calls.append(index)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    for name in ("is_available", "device_count", "current_device", "set_device"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    return fake


def test_the_fake_raises_where_the_gpu_raised(fake_cuda: FakeCuda) -> None:
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_device(torch.device("cuda"))


def test_default_device_is_bound_by_its_index(fake_cuda: FakeCuda) -> None:
    assert default_device() == "cuda" and device_error("cuda") is None
    assert bind(default_device()) == torch.device("cuda", 0)
    assert fake_cuda.set_calls == [0]


def test_cuda_n_is_kept_and_becomes_current(fake_cuda: FakeCuda) -> None:
    assert bind("cuda:1") == torch.device("cuda", 1)
    assert fake_cuda.current == 1
    assert resolve("cuda") == torch.device("cuda", 1)  # a bare "cuda" is the current device
    assert "no such CUDA device" in device_error("cuda:2")


def test_cpu_is_never_bound(fake_cuda: FakeCuda) -> None:
    assert bind("cpu") == torch.device("cpu") and fake_cuda.set_calls == []


def test_run_case_binds_the_default_device_before_any_cuda_work(
    fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_case on the bare default device gets past set_device (the H100 failure) and fails only
    at the first real CUDA call, which this CPU build cannot make."""
    from perfgate.cases import runner

    reached: list[torch.device] = []

    def isolate(device: torch.device) -> None:
        reached.append(device)
        raise RuntimeError("stop: no real CUDA here")

    monkeypatch.setattr(runner, "isolate", isolate)
    case = runner.Case(model="physicsnemo-block", size="tiny", variant="baseline", device="cuda")
    with pytest.raises(RuntimeError, match="stop: no real CUDA here"):
        runner.run_case(case)
    assert reached == [torch.device("cuda", 0)] and fake_cuda.set_calls == [0]
