"""The leave-in API (perfgate.profile.api, .profiler): annotate, profile, Profiler.

Disabled, it starts nothing and adds no work."""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from perfgate.profile import Profiler, annotate, api, profile, profiler


@pytest.fixture(autouse=True)
def clean_profiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Profiler]:
    monkeypatch.delenv("PERFGATE_PROFILE", raising=False)
    monkeypatch.setenv("PERFGATE_PROFILE_DIR", str(tmp_path / "out"))
    p = Profiler()
    p.reset()
    yield p
    p.reset()


class CountingNvtx:
    name = "fake"

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def push(self, message: str, color: Any, domain: Any) -> None:
        self.events.append(("push", message))

    def pop(self, domain: Any) -> None:
        self.events.append(("pop", domain))


def _disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api._STATE, "nvtx", None)
    monkeypatch.setattr(api._STATE, "record", False)
    monkeypatch.setattr(api._STATE, "active", False)


def test_profile_returns_the_function_itself() -> None:
    def f(x: int) -> int:
        return x + 1

    assert profile(f) is f  # no wrapper: a call does exactly what it did

    class C:
        @profile
        @staticmethod
        def g() -> int:
            return 2

    assert C.g() == 2 and isinstance(C.__dict__["g"], staticmethod)


def test_disabled_annotate_calls_no_backend_and_starts_no_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    _disabled(monkeypatch)

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("a disabled annotate must not open a range")

    monkeypatch.setattr(torch.profiler, "record_function", boom)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", boom)

    @annotate("decorated")
    def work(x: int) -> int:
        return x * 2

    with annotate("ctx", color="blue", domain="forward"):
        assert work(3) == 6
    assert not torch.autograd.profiler._is_profiler_enabled
    assert sys.gettrace() is None


def test_annotate_emits_nvtx_ranges_where_available(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = CountingNvtx()
    monkeypatch.setattr(api._STATE, "nvtx", fake)
    monkeypatch.setattr(api._STATE, "record", False)
    monkeypatch.setattr(api._STATE, "active", True)

    @annotate(domain="forward", color="blue")
    def fwd() -> int:
        return 1

    with annotate("outer"):
        fwd()
    assert fake.events == [("push", "outer"), ("push", "forward"), ("pop", "forward"), ("pop", None)]


def test_perfgate_nvtx_0_turns_nvtx_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFGATE_NVTX", "0")
    assert api.find_nvtx() is None


def test_the_cpu_build_has_no_nvtx(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch has NVTX")
    monkeypatch.setitem(sys.modules, "nvtx", None)  # the optional package, absent
    assert api.find_nvtx() is None


def test_nothing_enabled_initialises_nothing(clean_profiler: Profiler) -> None:
    p = clean_profiler
    assert Profiler() is p  # one per process
    with p:
        assert p.initialized and p.running == ()
        assert not torch.autograd.profiler._is_profiler_enabled
        assert sys.gettrace() is None
    assert p.outputs == {}


def test_tools_by_name_configuration_and_environment(
    clean_profiler: Profiler, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    p = clean_profiler
    with pytest.raises(KeyError, match="known: torch, line_profiler, nvtx, cuda_memory"):
        p.enable("perf")
    p.configure({"torch": True, "line_profiler": False, "output_dir": tmp_path / "cfg"})
    assert p.enabled == ("torch",) and p.output_dir() == tmp_path / "cfg"
    monkeypatch.setenv("PERFGATE_PROFILE", "torch,line_profiler")
    p.reset()
    assert p.enabled == ("torch", "line_profiler")
    assert p.output_dir() == tmp_path / "out"


def test_torch_tool_writes_a_trace_with_the_annotated_ranges(clean_profiler: Profiler, tmp_path: Path) -> None:
    p = clean_profiler.enable("torch")
    p.output_dir(tmp_path / "prof")
    x = torch.randn(32, 32)
    with p:
        assert torch.autograd.profiler._is_profiler_enabled
        with annotate("my-range"):
            (x @ x).sum()
        p.step()
    assert not torch.autograd.profiler._is_profiler_enabled
    trace, table = p.outputs["torch"]
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert "my-range" in names and "aten::mm" in names
    assert "aten::mm" in table.read_text()
    assert not api._STATE.record  # annotate is back to its disabled state


def test_line_profiler_times_functions_decorated_before_it_started(clean_profiler: Profiler, tmp_path: Path) -> None:
    pytest.importorskip("line_profiler")

    @profile
    def hot(n: int) -> int:
        total = 0
        for i in range(n):
            total += i
        return total

    class C:
        @profile
        @staticmethod
        def cold() -> int:
            product = 1
            return product

    p = clean_profiler.enable("line_profiler")
    p.output_dir(tmp_path / "lp")
    with p:
        hot(1000)
        C.cold()
    stats_file, text_file = p.outputs["line_profiler"]
    text = text_file.read_text()
    assert "def hot" in text and "total += i" in text
    assert "def cold" in text and "product = 1" in text  # a staticmethod's function is registered
    assert sys.gettrace() is None
    # The stats as line_profiler's own reader (and `python -m line_profiler`) loads them.
    from line_profiler.line_profiler import LineStats

    timed = {name.rsplit(".", 1)[-1]: lines for (_, _, name), lines in LineStats.from_files(stats_file).timings.items()}
    assert sum(hits for _, hits, _ in timed["hot"]) >= 1000
    assert not list(stats_file.parent.glob(".*.tmp"))


def test_the_cuda_memory_snapshot_is_torchs_pickle_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What torch.cuda.memory._dump_snapshot writes (its _snapshot() pickled), but through
    perfgate.files: a snapshot that cannot be written leaves the earlier file whole. torch's
    recording is faked (no CUDA here); the pickling and the write are perfgate's own."""
    history: list[Any] = []
    snapshot = {"segments": [{"address": 1, "total_size": 2**20}], "device_traces": [[]]}
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: history.append(kw))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: snapshot)
    tool = profiler.CudaMemoryTool(file="snap.pickle")
    tool.start(tmp_path)
    path = tmp_path / "snap.pickle"
    assert tool.stop() == [path]
    assert pickle.loads(path.read_bytes()) == snapshot
    assert history[-1] == {"enabled": None}  # recording stopped: it costs every allocation

    # A snapshot that fails half-way through pickling (torch's own dump had truncated the file by then).
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: {"segments": [b"x" * 2**20], "bad": lambda: 0})
    tool.start(tmp_path)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        tool.stop()
    assert pickle.loads(path.read_bytes()) == snapshot and history[-1] == {"enabled": None}
    assert not list(tmp_path.glob(".*.tmp"))


def test_unavailable_tools_are_skipped_with_their_reason(
    clean_profiler: Profiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        profiler.LineProfilerTool,
        "unavailable",
        lambda self: "line_profiler is not installed (pip install line_profiler)",
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a GPU machine
    p = clean_profiler.enable("line_profiler").enable("cuda_memory")
    p.initialize()
    assert p.running == ()
    assert "pip install line_profiler" in p.skipped["line_profiler"]
    assert "CUDA" in p.skipped["cuda_memory"]

    def f() -> int:
        return 1

    assert profile(f) is f  # still a pass-through


def test_registered_tools_follow_the_lifetime(
    clean_profiler: Profiler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class Recorder:
        name = "recorder"

        def unavailable(self) -> str | None:
            return None

        def start(self, out_dir: Path) -> None:
            calls.append(f"start {out_dir.name}")

        def step(self) -> None:
            calls.append("step")

        def stop(self) -> list[Path]:
            calls.append("stop")
            return [tmp_path / "r.txt"]

    monkeypatch.setitem(profiler.TOOLS, "recorder", Recorder)
    p = clean_profiler.enable("recorder")
    with p:
        p.step()
        p.step()
    assert calls == ["start recorder", "step", "step", "stop"]
    assert p.outputs["recorder"] == [tmp_path / "r.txt"]
