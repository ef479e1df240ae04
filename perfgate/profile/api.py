"""Leave-in profiling tools: `annotate`, `profile` and `Profiler` (the PhysicsNeMo tutorial's API).

    from perfgate.profile import Profiler, annotate, profile

    @profile                                   # line_profiler, when that tool is on
    def forward(self, x): ...

    with annotate("forward", color="blue"):    # an NVTX range where NVTX exists
        out = model(x)

    p = Profiler()                             # one per process
    p.enable("torch")                          # or p.configure({"torch": True}), or PERFGATE_PROFILE=torch
    p.output_dir("runs/profile")
    with p:                                    # initialises on entry, writes outputs on exit
        for batch in loader:
            step(batch)
            p.step()

`Profiler` and its tools ("torch", "line_profiler", "nvtx", "cuda_memory") are in
`perfgate.profile.profiler`. `perfgate profile` and the suite's evidence name their steps and layers
with `annotate` and trace through those tools.

Disabled, the tools cost (nearly) nothing:
- `@profile` returns the function itself: a call does no extra work at all. The function is only
  remembered, and handed to line_profiler when that tool starts (line_profiler then times the
  registered code objects without a wrapper).
- `annotate` checks one module flag on entry and exit; it emits an NVTX range only where NVTX
  exists (a CUDA build of torch or the `nvtx` package; PERFGATE_NVTX=0 turns that off) and a
  torch.profiler range only while the "torch" tool runs.
- `Profiler()` with no tool enabled starts nothing on `initialize()`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


# --- NVTX backends -----------------------------------------------------------------------------


class _NvtxPackage:
    """The `nvtx` package: colours and domains are kept."""

    name = "nvtx"

    def __init__(self, mod: Any) -> None:
        self._nvtx = mod

    def push(self, message: str, color: str | None, domain: str | None) -> None:
        self._nvtx.push_range(message=message, color=color, domain=domain)

    def pop(self, domain: str | None) -> None:
        self._nvtx.pop_range(domain=domain)


class _NvtxTorch:
    """torch.cuda.nvtx (CUDA builds of torch): message only."""

    name = "torch.cuda.nvtx"

    def push(self, message: str, color: str | None, domain: str | None) -> None:
        torch.cuda.nvtx.range_push(message)

    def pop(self, domain: str | None) -> None:
        torch.cuda.nvtx.range_pop()


def find_nvtx() -> _NvtxPackage | _NvtxTorch | None:
    """The NVTX backend of this process, or None (the CPU build of torch has none)."""
    if os.environ.get("PERFGATE_NVTX", "").lower() in ("0", "false", "no"):
        return None
    try:
        import nvtx  # optional package

        return _NvtxPackage(nvtx)
    except ImportError:
        pass
    if torch.version.cuda is None:
        return None
    try:  # NVTX is a separate library from the CUDA runtime: probing it creates no CUDA context
        torch.cuda.nvtx.range_push("perfgate-probe")
        torch.cuda.nvtx.range_pop()
    except (RuntimeError, AttributeError):
        return None
    return _NvtxTorch()


class _State:
    """What `annotate` emits; `active` is the one flag the disabled path reads."""

    __slots__ = ("nvtx", "record", "active")

    def __init__(self) -> None:
        self.nvtx = find_nvtx()
        self.record = False  # torch.profiler is running: also emit record_function ranges
        self.active = self.nvtx is not None

    def update(self) -> None:
        self.active = self.nvtx is not None or self.record


_STATE = _State()


# --- annotate ----------------------------------------------------------------------------------


class annotate:  # noqa: N801 - lower case like nvtx.annotate, which it stands in for
    """An NVTX range (and a torch.profiler range while that runs), as a context or a decorator.

    `with annotate("forward"):`, `@annotate(domain="forward", color="blue")`, or `@annotate()`
    (the range is named after the function). Where neither is on, it does nothing.
    """

    __slots__ = ("message", "color", "domain", "_opened")

    def __init__(
        self, message: str | None = None, color: str | None = None, domain: str | None = None, category: Any = None
    ) -> None:
        self.message = message
        self.color = color
        self.domain = domain
        self._opened: list[tuple[bool, Any]] | None = None  # made only when a range opens

    def __enter__(self) -> annotate:
        if not _STATE.active:
            return self
        name = self.message or self.domain or "annotate"
        pushed = _STATE.nvtx is not None
        if pushed:
            _STATE.nvtx.push(name, self.color, self.domain)
        rf = None
        if _STATE.record:
            rf = torch.profiler.record_function(name)
            rf.__enter__()
        if self._opened is None:
            self._opened = []
        self._opened.append((pushed, rf))
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._opened:  # entered while disabled: nothing to close
            return
        pushed, rf = self._opened.pop()
        if rf is not None:
            rf.__exit__(None, None, None)
        if pushed and _STATE.nvtx is not None:
            _STATE.nvtx.pop(self.domain)

    def __call__(self, func: F) -> F:
        message = self.message or self.domain or getattr(func, "__qualname__", "annotate")
        color, domain = self.color, self.domain

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _STATE.active:
                return func(*args, **kwargs)
            with annotate(message, color, domain):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


# --- profile -----------------------------------------------------------------------------------

_PROFILED: list[Callable[..., Any]] = []
_LINE_PROFILER: Any = None  # the running line_profiler.LineProfiler, if any


def profile(func: F) -> F:
    """Mark a function for line_profiler; returns the function itself (no wrapper, no cost).

    Takes no arguments, like the tutorial's `@profile`. Works on plain functions and methods;
    on a staticmethod / classmethod object the underlying function is registered.
    """
    target = getattr(func, "__func__", func)
    _PROFILED.append(target)
    if _LINE_PROFILER is not None:
        _LINE_PROFILER.add_function(target)
    return func
