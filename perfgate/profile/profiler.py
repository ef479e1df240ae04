"""The process's one `Profiler` and the tools it switches on by name (see `perfgate.profile.api`).

"torch" (torch.profiler: a Perfetto / chrome://tracing trace and an operator table),
"line_profiler" (per-line times of @profile functions), "nvtx" (an NVTX range for every torch op,
for Nsight Systems) and "cuda_memory" (a CUDA allocator snapshot for pytorch.org/memory_viz).
`perfgate profile` and the suite's evidence run the same tools for their traces and snapshots.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

import perfgate.profile.api as api
from perfgate import files
from perfgate.profile.api import _PROFILED, _STATE

log = logging.getLogger("perfgate.profile")

DEFAULT_OUTPUT_DIR = Path("perfgate_profiling_outputs")


# --- tools -------------------------------------------------------------------------------------


class Tool(Protocol):
    name: str

    def unavailable(self) -> str | None: ...

    def start(self, out_dir: Path) -> None: ...

    def step(self) -> None: ...

    def stop(self) -> list[Path]: ...


class TorchProfilerTool:
    """torch.profiler over the whole initialised span: a chrome trace and an operator table.

    `active_steps` profiles that many steps after `warmup_steps` profiled-but-discarded ones (the
    profiler's own start-up cost stays out of the trace); `cuda` defaults to CUDA being available.
    After `stop()`, `averages` holds the operators' key averages.
    """

    name = "torch"

    def __init__(
        self,
        *,
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_stack: bool = False,
        row_limit: int = 30,
        cuda: bool | None = None,
        warmup_steps: int = 0,
        active_steps: int | None = None,
        trace_file: str = "trace.json",
        table_file: str = "ops.txt",
    ) -> None:
        self.kwargs = dict(record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack)
        self.row_limit = row_limit
        self.cuda = cuda
        self.warmup_steps, self.active_steps = warmup_steps, active_steps
        self.trace_file, self.table_file = trace_file, table_file
        self.averages: Any = None
        self._prof: Any = None
        self._out: Path | None = None

    def unavailable(self) -> str | None:
        return None

    def start(self, out_dir: Path) -> None:
        from torch.profiler import ProfilerActivity, schedule

        if self.cuda is None:
            self.cuda = torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        sched = (
            schedule(wait=0, warmup=self.warmup_steps, active=self.active_steps, repeat=1)
            if self.active_steps
            else None
        )
        self._out = out_dir
        self._prof = torch.profiler.profile(activities=activities, schedule=sched, **self.kwargs)
        self._prof.__enter__()
        _STATE.record = True
        _STATE.update()

    def step(self) -> None:
        if self._prof is not None:
            self._prof.step()

    def stop(self) -> list[Path]:
        if self._prof is None or self._out is None:
            return []
        _STATE.record = False
        _STATE.update()
        self._prof.__exit__(None, None, None)
        trace, table = self._out / self.trace_file, self._out / self.table_file
        # torch writes the trace itself, in place: it goes to a scratch file and reaches `trace`
        # through perfgate.files, so a run killed mid-write leaves the previous run's evidence whole.
        with tempfile.TemporaryDirectory(prefix="perfgate-trace-") as scratch:
            exported = Path(scratch) / self.trace_file
            self._prof.export_chrome_trace(str(exported))
            files.write_text(trace, exported.read_text(encoding="utf8", errors="replace"))
        self.averages = self._prof.key_averages()
        sort = "self_device_time_total" if self.cuda else "self_cpu_time_total"
        files.write_text(table, self.averages.table(sort_by=sort, row_limit=self.row_limit) + "\n")
        self._prof = None
        return [trace, table]


class LineProfilerTool:
    """line_profiler over every @profile function; times calls on the thread that initialised it."""

    name = "line_profiler"

    def __init__(self) -> None:
        self._lp: Any = None
        self._out: Path | None = None

    def unavailable(self) -> str | None:
        try:
            import line_profiler  # noqa: F401
        except ImportError:
            return "line_profiler is not installed (pip install line_profiler)"
        return None

    def start(self, out_dir: Path) -> None:
        from line_profiler import LineProfiler

        self._out = out_dir
        self._lp = LineProfiler()
        for f in _PROFILED:
            self._lp.add_function(f)
        self._lp.enable_by_count()
        api._LINE_PROFILER = self._lp  # `profile` hands it functions decorated from now on

    def step(self) -> None:
        pass

    def stop(self) -> list[Path]:
        if self._lp is None or self._out is None:
            return []
        self._lp.disable_by_count()
        api._LINE_PROFILER = None
        self._out.mkdir(parents=True, exist_ok=True)
        stats, text = self._out / "profile.lprof", self._out / "profile.txt"
        # What LineProfiler.dump_stats writes (LineStats.to_file: the stats pickled at the highest
        # protocol), written atomically: dump_stats opens the target itself and truncates it first.
        files.write_bytes(stats, pickle.dumps(self._lp.get_stats(), pickle.HIGHEST_PROTOCOL))
        buf = io.StringIO()
        self._lp.print_stats(stream=buf)
        files.write_text(text, buf.getvalue())
        self._lp = None
        return [stats, text]


class NvtxTool:
    """torch.autograd.profiler.emit_nvtx: an NVTX range per torch op, for `nsys profile -t cuda,nvtx`."""

    name = "nvtx"

    def __init__(self) -> None:
        self._ctx: Any = None

    @property
    def backend(self) -> str | None:
        """Which NVTX library the ranges go to (the `nvtx` package or torch.cuda.nvtx)."""
        return _STATE.nvtx.name if _STATE.nvtx is not None else None

    def unavailable(self) -> str | None:
        if _STATE.nvtx is None or torch.version.cuda is None:
            return (
                "NVTX needs a CUDA build of torch (this one has none)"
                if torch.version.cuda is None
                else "NVTX is turned off (PERFGATE_NVTX=0)"
            )
        return None

    def start(self, out_dir: Path) -> None:
        self._ctx = torch.autograd.profiler.emit_nvtx(record_shapes=True)
        self._ctx.__enter__()

    def step(self) -> None:
        pass

    def stop(self) -> list[Path]:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        return []  # the ranges live in the Nsight Systems report, which nsys writes


class CudaMemoryTool:
    """The CUDA caching allocator's history, dumped as a snapshot for pytorch.org/memory_viz."""

    name = "cuda_memory"

    def __init__(self, max_entries: int = 100_000, file: str = "snapshot.pickle") -> None:
        self.max_entries = max_entries
        self.file = file
        self._out: Path | None = None

    def unavailable(self) -> str | None:
        return None if torch.cuda.is_available() else "a CUDA memory snapshot needs a CUDA device"

    def start(self, out_dir: Path) -> None:
        self._out = out_dir
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)

    def step(self) -> None:
        pass

    def stop(self) -> list[Path]:
        if self._out is None:
            return []
        self._out.mkdir(parents=True, exist_ok=True)
        path = self._out / self.file
        try:
            # What torch.cuda.memory._dump_snapshot writes (its _snapshot() pickled), written
            # atomically: _dump_snapshot opens the target itself and truncates it first.
            files.write_bytes(path, pickle.dumps(torch.cuda.memory._snapshot()))
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)  # recording costs every allocation
            self._out = None
        return [path]


# The names `Profiler.enable` and PERFGATE_PROFILE take; another tool is one more entry.
TOOLS: dict[str, Callable[[], Tool]] = {
    "torch": TorchProfilerTool,
    "line_profiler": LineProfilerTool,
    "nvtx": NvtxTool,
    "cuda_memory": CudaMemoryTool,
}


# --- Profiler ----------------------------------------------------------------------------------


class Profiler:
    """The process's one profiler: which tools are on, where they write, and their lifetime.

    Nothing starts until `initialize()` (or entering `with Profiler():`). Tools that cannot run
    here are skipped with their reason in `skipped` (and a log warning), not silently.
    Environment: PERFGATE_PROFILE="torch,line_profiler" enables tools, PERFGATE_PROFILE_DIR sets
    the output folder (default ./perfgate_profiling_outputs).
    """

    _instance: Profiler | None = None

    def __new__(cls) -> Profiler:
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._setup()
            cls._instance = inst
        return cls._instance

    def _setup(self) -> None:
        self._enabled: list[str] = []
        self._running: dict[str, Tool] = {}
        self._dir = Path(os.environ.get("PERFGATE_PROFILE_DIR") or DEFAULT_OUTPUT_DIR)
        self.initialized = False
        self.skipped: dict[str, str] = {}
        self.outputs: dict[str, list[Path]] = {}
        for name in filter(None, (n.strip() for n in os.environ.get("PERFGATE_PROFILE", "").split(","))):
            self.enable(name)

    # configuration

    def enable(self, name: str) -> Profiler:
        if name not in TOOLS:
            raise KeyError(f"unknown profiling tool {name!r}; known: {', '.join(TOOLS)}")
        if name not in self._enabled:
            self._enabled.append(name)
            if self.initialized:
                self._start(name)
        return self

    def disable(self, name: str) -> Profiler:
        if name in self._enabled:
            self._enabled.remove(name)
        if name in self._running:
            self.outputs[name] = self._running.pop(name).stop()
        return self

    def configure(self, config: Mapping[str, Any]) -> Profiler:
        """{"torch": True, "line_profiler": False, "output_dir": "runs/p"}: switches by name."""
        for key, value in config.items():
            if key == "output_dir":
                self.output_dir(value)
            elif value:
                self.enable(key)
            else:
                self.disable(key)
        return self

    def output_dir(self, path: str | os.PathLike[str] | None = None) -> Path:
        """The output folder; with `path`, set it (before initialising)."""
        if path is not None:
            if self.initialized:
                raise RuntimeError("set the profiler's output folder before initialize()")
            self._dir = Path(path)
        return self._dir

    @property
    def enabled(self) -> tuple[str, ...]:
        return tuple(self._enabled)

    @property
    def running(self) -> tuple[str, ...]:
        return tuple(self._running)

    # lifetime

    def _start(self, name: str) -> None:
        tool = TOOLS[name]()
        reason = tool.unavailable()
        if reason:
            self.skipped[name] = reason
            log.warning("perfgate profiler: %s skipped: %s", name, reason)
            return
        tool.start(self._dir / name)
        self._running[name] = tool

    def initialize(self) -> Profiler:
        if not self.initialized:
            self.initialized = True
            for name in self._enabled:
                self._start(name)
        return self

    def step(self) -> None:
        for tool in self._running.values():
            tool.step()

    def finalize(self) -> dict[str, list[Path]]:
        """Stop the tools (last started, first stopped) and return the files each wrote."""
        for name in reversed(list(self._running)):
            self.outputs[name] = self._running.pop(name).stop()
        self.initialized = False
        return dict(self.outputs)

    def reset(self) -> None:
        """Stop everything and forget the configuration (tests, notebooks)."""
        self.finalize()
        self._setup()

    def __enter__(self) -> Profiler:
        return self.initialize()

    def __exit__(self, *exc: object) -> None:
        self.finalize()

    def __repr__(self) -> str:
        state = "initialized" if self.initialized else "not initialized"
        running, out = list(self._running), str(self._dir)
        return f"Profiler({state}, enabled={list(self._enabled)}, running={running}, output_dir={out!r})"
