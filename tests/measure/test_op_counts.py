"""A live profiler window read from the profiler's memory: the same events, counts and busy times as
its exported trace, whose reading it replaces (an eager world-model step is 3.5 MB of JSON).

Three producers: this torch's profiler on the CPU (its memory and its export of one window); the
kept H200 traces (torch 2.11.0+cu130), each X event given back as the `_KinetoEvent` that kineto
wrote it from (the mapping `memory_events` reads, from torch's and libkineto's sources: the
category is `activity_type()`, the pid `device_index()`, the time `start_ns()` on the export's
`baseTimeNanoseconds`, `args.correlation` `correlation_id()`); and a real GPU, where there is one.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from perfgate.measure import op_counts
from perfgate.measure.device_time import DEVICE_CATS, LAUNCH_CATS, STEP_MARK, device_ms_per_marked_step
from tests.measure.test_device_time import H200_RUN, _launch_spans, _marks_like_record_function

needs_types = pytest.mark.skipif(
    not op_counts._events_have_types(), reason="this torch's profiler events carry no activity_type()"
)


def _marked_window(steps: list, rounds: int, device: str = "cpu"):
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.startswith("cuda")
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(rounds):
            for i, step in enumerate(steps):
                with record_function(f"{STEP_MARK}{i}"):
                    step()
        if cuda:
            torch.cuda.synchronize()
    return prof


@needs_types
def test_a_cpu_window_reads_from_memory_what_its_export_reads() -> None:
    lin = torch.nn.Linear(32, 32)
    x = torch.randn(8, 32)
    prof = _marked_window([lambda: lin(x), lambda: torch.relu(lin(x))], rounds=3)
    mine = op_counts.memory_events(prof.profiler.kineto_results.events())
    theirs = op_counts.exported_events(prof)
    assert op_counts.disagreement(mine, theirs) is None
    read = {"cpu_op", "user_annotation"}

    def rows(events: list[dict]) -> list[tuple]:
        return sorted((e["cat"], e["name"], e["tid"], e["dur"]) for e in events if e.get("cat") in read)

    assert rows(mine) == rows(theirs) and len(rows(mine)) > 20
    offsets = [t["ts"] - m["ts"] for m, t in zip(*(sorted((e for e in ev if e.get("cat") in read),
               key=lambda e: (e["ts"], e["name"])) for ev in (mine, theirs)), strict=True)]  # fmt: skip
    assert max(offsets) - min(offsets) < 0.002  # one clock, the bases apart (to the export's float rounding)
    assert device_ms_per_marked_step(mine) == {"0": [0.0] * 3, "1": [0.0] * 3}  # no device work on a CPU
    # a device-time window reads its marks, launches and device activities only
    marks = op_counts.memory_events(prof.profiler.kineto_results.events(), {"user_annotation", "kernel"})
    want = [e for e in mine if e["cat"] == "user_annotation"]
    assert [{**e, "ts": 0} for e in marks] == [{**e, "ts": 0} for e in want] and len(marks) == 6
    assert [e["ts"] for e in marks] == pytest.approx([e["ts"] - want[0]["ts"] for e in want], abs=1e-6)


@dataclass(frozen=True)
class KeptEvent:
    """A kept trace's X event as the `_KinetoEvent` kineto wrote it from (the module docstring)."""

    e: dict
    base_ns: int
    kernel_type: str = "kernel"  # what activity_type() says of a kernel
    corr_from: str = "correlation"

    def activity_type(self) -> str:
        return self.kernel_type if self.e["cat"] == "kernel" else self.e["cat"]

    def name(self) -> str:
        return self.e["name"]

    def device_index(self) -> int:
        return self.e["pid"]

    def device_resource_id(self) -> int:
        return self.e["tid"]

    # kineto printed its exact nanoseconds as `us.nnn`: read back as decimals, they are exact again
    def start_ns(self) -> int:
        return self.base_ns + round(Decimal(str(self.e["ts"])) * 1000)

    def duration_ns(self) -> int:
        return round(Decimal(str(self.e.get("dur", 0))) * 1000)

    def correlation_id(self) -> int:
        return (self.e.get("args") or {}).get(self.corr_from, 0)


def _kept(traced: str) -> tuple[list[dict], list[KeptEvent]]:
    """The kept trace as the export reads (floats, as `json.load` gives them) and as the events it was
    written from (exact nanoseconds)."""
    text = gzip.decompress((H200_RUN / "traces" / f"{traced}.trace.json.gz").read_bytes())
    events, exact = json.loads(text)["traceEvents"], json.loads(text, parse_float=Decimal)
    # the export's own span ("Trace"), flows and metadata are not activities: events() has none of them
    raw = [KeptEvent(e, exact["baseTimeNanoseconds"]) for e in exact["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") != "Trace"]  # fmt: skip
    return events, raw


@pytest.mark.parametrize(
    "traced", ["owl-world-model-1b-cacheframes0-cudagraphs", "owl-world-model-1b-cacheframes0-baseline",
               "physicsnemo-block-full-bf16"],
    ids=lambda traced: f"{traced}.trace",
)  # fmt: skip
def test_a_kept_h200_window_reads_alike_from_its_events(tmp_path: Path, traced: str) -> None:
    """The kept GPU windows as events: the same kernels, copies and busy time, and each marked step
    the same GPU work (a graph's replayed kernels found by their cudaGraphLaunch's correlation)."""
    events, raw = _kept(traced)
    marks = _marks_like_record_function(tmp_path, _launch_spans(events, 3), ["A", "B", "A"])
    base_ns = raw[0].base_ns
    mine = op_counts.memory_events([*raw, *(KeptEvent(m, base_ns) for m in marks)])
    assert op_counts.disagreement(mine, events + marks) is None
    got = op_counts.counts_from_events(mine, 3, device_traced=True)
    assert got.kernels_per_step == op_counts.counts_from_events(events, 3, device_traced=True).kernels_per_step > 10
    assert len(device_ms_per_marked_step(mine)["A"]) == 2
    # A torch whose events said otherwise than the sources read (a kernel's type under another name;
    # no correlation ids) reads otherwise: the comparison a live window gets says so, and the process
    # reads the export.
    lost = "marked step 'A''s device activities differ in number"
    for wrong, said in ((dict(kernel_type="concurrent_kernel"), "kernel_names_per_step differ"),
                        (dict(corr_from="no such id"), lost)):  # fmt: skip
        other = op_counts.memory_events([KeptEvent(e, base_ns, **wrong) for e in [*(r.e for r in raw), *marks]])
        assert op_counts.disagreement(other, events + marks) == said


def test_small_marked_steps_read_alike_to_the_exports_rounding(tmp_path: Path) -> None:
    """The eager world model's kept window marked every 10 launches (steps of a few small kernels,
    A and B alternating, as a device-time A/B window of a small step is): the events' exact
    nanoseconds and the export's times, which `json.load` rounds near 5e12 us, read alike. With a
    fixed tolerance (1 ns + 10 ppm) several such steps read as disagreeing, and the process fell
    back to the export saying the sources were misread."""
    events, raw = _kept("owl-world-model-1b-cacheframes0-baseline")
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in DEVICE_CATS}
    calls = sorted((e for e in events if e.get("cat") in LAUNCH_CATS and e["args"].get("correlation") in launched),
                   key=lambda e: e["ts"])  # fmt: skip
    groups = [calls[i : i + 10] for i in range(0, len(calls) - 9, 10)]
    spans = [(g[0]["ts"] - 0.2, g[-1]["ts"] + g[-1]["dur"] + 0.2) for g in groups]
    marks = _marks_like_record_function(tmp_path, spans, ["A", "B"] * (len(spans) // 2) + ["A"] * (len(spans) % 2))
    mine = op_counts.memory_events([*raw, *(KeptEvent(m, raw[0].base_ns) for m in marks)])
    assert len(marks) > 100
    assert op_counts.disagreement(mine, events + marks) is None
    # a step that lost one small kernel, or read one 0.5 us longer, is still told apart
    small = next(e for e in mine if e["cat"] == "kernel" and e["dur"] < 5)
    assert op_counts.disagreement([e for e in mine if e is not small], events + marks) is not None
    longer = [{**e, "dur": e["dur"] + 0.5} if e is small else e for e in mine]
    assert op_counts.disagreement(longer, events + marks) == "marked step 'A''s busy ms differ"


@needs_types
def test_a_torch_whose_events_give_no_category_name_reads_the_export(monkeypatch, capsys) -> None:
    """pytorch#178086 bound `activity_type()` as kineto's enum value (a number); #178597 made it the
    name read here. Such a torch's events are not read: every category would be missed."""
    monkeypatch.setattr(op_counts, "_MEMORY_AGREES", {})
    lin, x = torch.nn.Linear(8, 8), torch.randn(2, 8)
    prof = _marked_window([lambda: lin(x)], rounds=2)
    enum = {"cpu_op": 0, "user_annotation": 1}  # libkineto ActivityType's first values

    class Numbered:
        def __init__(self, e: object) -> None:
            self._e = e

        def activity_type(self) -> int:
            return enum[self._e.activity_type()]  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self._e, name)

    numbered = [Numbered(e) for e in prof.profiler.kineto_results.events()]
    results = SimpleNamespace(events=lambda: numbered)
    older = SimpleNamespace(activities=prof.activities, export_chrome_trace=prof.export_chrome_trace,
                            profiler=SimpleNamespace(kineto_results=results))  # fmt: skip
    got = op_counts.window_events(older)  # type: ignore[arg-type]
    assert {e.get("cat") for e in got} >= {"cpu_op", "user_annotation"}  # the export's reading
    assert "give no category name; reading the exported trace" in capsys.readouterr().err
    assert op_counts._MEMORY_AGREES == {(False, None): False}


@needs_types
def test_a_process_whose_memory_disagrees_reads_the_export_and_says_so_once(monkeypatch, capsys) -> None:
    monkeypatch.setattr(op_counts, "_MEMORY_AGREES", {})
    real = op_counts.memory_events
    calls = []

    def lossy(raw, cats=None):  # a torch whose events miss the ops its export has
        calls.append(1)
        return [e for e in real(raw, cats) if e["name"] != "aten::addmm"]

    monkeypatch.setattr(op_counts, "memory_events", lossy)
    lin, x = torch.nn.Linear(8, 8), torch.randn(2, 8)
    first = op_counts.count_step(lambda: lin(x), "cpu", steps=2)
    assert first.aten_ops_per_step["aten::addmm"] == 1  # the export's reading
    assert "disagree with its exported trace (aten_ops_per_step differ)" in capsys.readouterr().err
    again = op_counts.count_step(lambda: lin(x), "cpu", steps=2)
    assert again == first and calls == [1] and capsys.readouterr().err == ""  # not asked again, not said again


@needs_types
def test_a_process_whose_memory_agrees_stops_exporting(monkeypatch) -> None:
    monkeypatch.setattr(op_counts, "_MEMORY_AGREES", {})
    exports = []
    real = op_counts.exported_events
    monkeypatch.setattr(op_counts, "exported_events", lambda prof: exports.append(1) or real(prof))
    lin, x = torch.nn.Linear(8, 8), torch.randn(2, 8)
    counts = [op_counts.count_step(lambda: lin(x), "cpu", steps=2) for _ in range(3)]
    assert exports == [1] and op_counts._MEMORY_AGREES == {(False, None): True}  # the first window only
    assert counts[0] == counts[1] == counts[2]
    # another kind of window (here: marks only, as the device-time window reads its few categories)
    # is compared for itself: the first one's agreement vouches for nothing it did not read
    prof = _marked_window([lambda: lin(x)], rounds=2)
    assert len(op_counts.window_events(prof, {"user_annotation"})) == 2 and exports == [1, 1]
    assert op_counts._MEMORY_AGREES[(False, frozenset({"user_annotation"}))] is True


@pytest.mark.skipif(torch.version.cuda is None or not torch.cuda.is_available(), reason="no GPU (a CPU build of torch)")
@needs_types
def test_a_gpu_window_reads_from_memory_what_its_export_reads() -> None:
    """On a GPU: eager launches, a fill and a CUDA graph's replay, marked and interleaved as the
    device-time A/B window does: both readings agree, and each step got device work."""
    a = torch.randn(512, 512, device="cuda")
    out = torch.relu(a @ a)  # cuBLAS set up before the capture (its first matmul cannot be captured)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out.copy_(torch.relu(a @ a))
    steps = [lambda: torch.relu(a @ a), lambda: out.zero_(), graph.replay]
    prof = _marked_window(steps, rounds=4, device="cuda")
    mine = op_counts.memory_events(prof.profiler.kineto_results.events())
    theirs = op_counts.exported_events(prof)
    assert op_counts.disagreement(mine, theirs) is None
    per_step = device_ms_per_marked_step(mine)
    assert sorted(per_step) == ["0", "1", "2"] and all(len(v) == 4 and min(v) > 0 for v in per_step.values())
    assert op_counts.counts_from_events(mine, 4, device_traced=True).kernels_per_step >= 3
