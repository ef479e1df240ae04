"""aten op calls and CUDA kernel launches per step, from a torch.profiler trace of a few steps.

Why the profiler and not a TorchDispatchMode: a dispatch mode sees ops below autograd, after the
composite ones are decomposed (`aten::linear` reaches it as `aten::t` + `aten::addmm`) and it does
not see inside a compiled graph's extern calls the same way, while the profiler records every
dispatched op at every level (aten::linear and the aten::addmm inside it) in eager and compiled
code alike, and its CUDA activity in the same trace gives the kernel launches: one mechanism for
both counts on every device (and, from the kernels' durations, the device time per step:
perfgate.measure.device_time). Both counts are read from events in the chrome trace's form (the
file `perfgate profile` and `--perfgate-trace` keep), so a stored trace is counted the same way; a
live window's events are taken from the profiler's memory in that form (`window_events`).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.measure.device_time import (
    DEVICE_CATS,
    LAUNCH_CATS,
    STEP_MARK,
    block_means,
    device_ms_per_marked_step,
    device_time_from_events,
    marked_activities,
    merged_us,
)

if TYPE_CHECKING:
    from torch.profiler import profile

STEPS = 10
KERNEL_CATS = ("kernel",)  # CUPTI's kernel activity (memcpy / memset have categories of their own)
COPY_CATS = ("gpu_memcpy", "gpu_memset")
# kineto's names of those activities (libkineto CuptiActivity.tpp: "Memcpy {kind} ({src} -> {dst})", "Memset ({kind})")
COPY_NAMES = ("Memcpy ", "Memset ")


@dataclass(frozen=True, kw_only=True)
class OpCounts:
    steps: int
    aten_ops_per_step: dict[str, float]
    kernels_per_step: float | None  # None: no device activity was traced (a CPU run)
    kernel_names_per_step: dict[str, float] = field(default_factory=dict)
    copies_per_step: float | None = None
    # The GPU's busy time per step (perfgate.measure.device_time), None on a CPU run.
    device_ms_per_step: float | None = None
    kernel_ms_per_step: dict[str, float] = field(default_factory=dict)


def counts_from_events(events: Iterable[Mapping[str, Any]], steps: int, *, device_traced: bool) -> OpCounts:
    """Counts per step from a chrome trace's events (torch.profiler's `export_chrome_trace`)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    events = list(events)
    ops: Counter[str] = Counter()
    kernels: Counter[str] = Counter()
    copies = 0
    for e in events:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if e.get("ph") not in (None, "X"):
            continue
        if cat == "cpu_op" and name.startswith("aten::"):
            ops[name] += 1
        elif cat in KERNEL_CATS:
            kernels[name] += 1
        elif cat in COPY_CATS:
            copies += 1
    dt = device_time_from_events(events, steps) if device_traced else None
    return OpCounts(
        steps=steps,
        aten_ops_per_step={k: v / steps for k, v in sorted(ops.items())},
        kernels_per_step=sum(kernels.values()) / steps if device_traced else None,
        kernel_names_per_step={k: v / steps for k, v in kernels.most_common()} if device_traced else {},
        copies_per_step=copies / steps if device_traced else None,
        device_ms_per_step=dt.device_ms_per_step if dt else None,
        kernel_ms_per_step=dt.kernel_ms_per_step if dt else {},
    )


def read_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """A chrome trace's events (`.json` or `.json.gz`); a one-line error naming the file otherwise."""
    p = Path(path)
    try:
        raw = gzip.open(p, "rt") if p.suffix == ".gz" else open(p, encoding="utf8")
        with raw as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise ValueError(f"{p}: not a readable profiler trace ({exc}); pass the .json torch.profiler wrote") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{p}: no traceEvents list: not a chrome trace from torch.profiler")
    return events


def counts_from_ops_rows(rows: Iterable[Mapping[str, Any]], steps: int) -> OpCounts:
    """Counts per step from `perfgate profile`'s operator rows (report.json `trace.top_ops`: name,
    calls, self_cpu_ms, self_device_ms): a device row is one with device time and no CPU time of
    its own (the profiler's device-side rows), our ranges (`module:`, `perfgate.`) left out. Device
    rows named as kineto names CUPTI's copies ("Memcpy HtoD (Pageable -> Device)", "Memset
    (Device)") are copies, the others kernels, as `counts_from_events` tells them by category (the
    kept H200 bf16 block: 5 memsets per step beside its 11 kernels). Only the rows kept (the top N)
    are counted. A user's own annotation's device-side row (`record_function` outside our ranges)
    also has device time and no CPU time: `trace.top_operators` has left those out since it
    wrote rows with the device total as torch's table sums it; older rows may still hold one."""
    ops: dict[str, float] = {}
    kernels: dict[str, float] = {}
    copies = 0.0
    for r in rows:
        name = str(r["name"])
        if name.startswith(("module:", "perfgate.", "ProfilerStep")):
            continue
        if name.startswith("aten::"):
            ops[name] = r["calls"] / steps
        elif not r.get("self_cpu_ms") and r.get("self_device_ms"):
            if name.startswith(COPY_NAMES):
                copies += r["calls"] / steps
            else:
                kernels[name] = r["calls"] / steps
    return OpCounts(
        steps=steps,
        aten_ops_per_step=ops,
        kernels_per_step=sum(kernels.values()),
        kernel_names_per_step=kernels,
        copies_per_step=copies,
    )


def count_step(
    step: Callable[[], Any], device: str, steps: int = STEPS, *, warmup: int = 1, keep: Path | None = None
) -> OpCounts:
    """Profile `steps` calls of a warmed-up step (CPU ops; CUDA activity on a GPU) and count them.
    `keep`: write the trace there (gzipped when it ends in .gz) instead of a scratch file."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = str(device).startswith("cuda")
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(torch.device(device))
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(keep))  # torch gzips a path ending in .gz
        return counts_from_events(read_trace(keep), steps, device_traced=cuda)
    return counts_from_events(window_events(prof), steps, device_traced=cuda)


def exported_events(prof: profile) -> list[dict[str, Any]]:
    """A finished profiler's chrome-trace events, through a scratch file read back at once (the
    same export `keep` writes)."""
    with tempfile.TemporaryDirectory(prefix="perfgate-ops-") as scratch:
        path = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(path)
        return read_trace(path)


def memory_events(raw: Iterable[Any], cats: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The profiler's own events (`prof.profiler.kineto_results.events()`, torch's `_KinetoEvent`) in
    the chrome trace's form, the fields the readers here use. Kineto writes the trace from the same
    activities (libkineto `ChromeTraceLogger::handleActivity`): `cat` is the activity type's name,
    which `activity_type()` returns; `pid` the device (`device_index()`: the GPU for a device
    activity, the process for a host one); `tid` the stream or thread; `ts` and `dur` microseconds
    (here from the window's first start, as the export counts from a base of its own: only
    differences are read); `args.correlation` CUPTI's id, shared by a device activity and the
    runtime call that launched it, which `correlation_id()` returns for both. `cats`: those
    categories only (a device-time window reads no operator: 6,000 of an eager world-model step's
    7,600 events)."""
    linked = (*DEVICE_CATS, *LAUNCH_CATS)
    out: list[dict[str, Any]] = []
    for e in raw:
        cat = e.activity_type()
        if cats is not None and cat not in cats:
            continue
        out.append({"ph": "X", "cat": cat, "name": e.name(), "pid": e.device_index(), "tid": e.device_resource_id(),
                    "ts": e.start_ns(), "dur": e.duration_ns() / 1000,
                    "args": {"correlation": e.correlation_id()} if cat in linked else {}})  # fmt: skip
    base = min((r["ts"] for r in out), default=0)
    for r in out:
        r["ts"] = (r["ts"] - base) / 1000
    return out


# Per kind of window (device activity traced or not, the categories read), whether this process's
# first such window read the same both ways; a kind not yet compared is absent. A CPU window's
# agreement says nothing of kernels and correlation ids, so a GPU window is compared for itself.
_MEMORY_AGREES: dict[tuple[bool, frozenset[str] | None], bool] = {}


def window_events(prof: profile, cats: Collection[str] | None = None) -> list[dict[str, Any]]:
    """A finished profiler window's events, from the profiler's memory (`memory_events`) rather than
    an exported file: an eager world-model step is 3.5 MB of exported JSON, so a device-time A/B
    window of 50 steps was ~350 MB written and parsed (~12 s of `json.load` alone). The first window
    of each kind in a process (device activity traced or not, the categories read) is also read
    through the export and the two readings compared (the kernel and op counts, the busy time, each
    marked step's): where they differ (a torch whose events say otherwise than the sources read),
    the process reads the export for that kind from then on and says so once. A torch without
    `activity_type()` on its events (before 2.12) always reads the export. `cats`: the categories to
    read (all by default), from either source."""
    from torch.profiler import ProfilerActivity

    def exported() -> list[dict[str, Any]]:
        return [e for e in exported_events(prof) if cats is None or e.get("cat") in cats]

    kind = (ProfilerActivity.CUDA in prof.activities, frozenset(cats) if cats is not None else None)
    if _MEMORY_AGREES.get(kind) is False or not _events_have_types():
        return exported()
    raw = prof.profiler.kineto_results.events()  # type: ignore[union-attr]
    if raw and not isinstance(raw[0].activity_type(), str):
        # pytorch#178086's binding gave kineto's enum value; #178597 (days later) its name, as read here
        _MEMORY_AGREES[kind] = False
        print("perfgate: this torch's profiler events give no category name; reading the exported trace",
              file=sys.stderr)  # fmt: skip
        return exported()
    mine = memory_events(raw, cats)
    if kind not in _MEMORY_AGREES:
        theirs = exported()
        why = disagreement(mine, theirs)
        _MEMORY_AGREES[kind] = why is None
        if why is not None:
            print(f"perfgate: the profiler's events in memory disagree with its exported trace ({why}); "
                  "reading the export from here on", file=sys.stderr)  # fmt: skip
            return theirs
    return mine


def _events_have_types() -> bool:
    from torch._C import _autograd

    return hasattr(getattr(_autograd, "_KinetoEvent", None), "activity_type")


# The export prints each time as `us.nnn` near 5e12 us, which `json.load` rounds to the nearest
# double (~1 ns apart there): each activity's start and end are a few ns off the exact nanoseconds
# in memory, so a busy time may differ by that much per activity merged into it.
EXPORT_ROUNDING_MS_PER_ACTIVITY = 4e-6


def disagreement(mine: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]]) -> str | None:
    """What two readings of one window disagree on (None: nothing): the kernel, copy and op counts
    exactly, each marked step's device activities exactly in number, and the busy times to the
    export's rounding (`EXPORT_ROUNDING_MS_PER_ACTIVITY` per activity) plus 10 ppm: a wrong reading
    is whole kernels off."""
    a, b = counts_from_events(mine, 1, device_traced=True), counts_from_events(theirs, 1, device_traced=True)
    for field_ in ("aten_ops_per_step", "kernel_names_per_step", "copies_per_step"):
        if getattr(a, field_) != getattr(b, field_):
            return f"{field_} differ"

    def close(x: float, y: float, activities: int) -> bool:
        return abs(x - y) <= EXPORT_ROUNDING_MS_PER_ACTIVITY * max(activities, 1) + 1e-5 * abs(y)

    n = sum(e.get("ph") == "X" and e.get("cat") in DEVICE_CATS for e in theirs)
    if not close(a.device_ms_per_step or 0.0, b.device_ms_per_step or 0.0, n):
        return f"busy ms {a.device_ms_per_step} against {b.device_ms_per_step}"
    ma, mb = marked_activities(mine), marked_activities(theirs)
    if [label for label, _ in ma] != [label for label, _ in mb]:
        return "marked steps differ"
    for (label, da), (_, db) in zip(ma, mb, strict=True):
        n = sum(map(len, db.values()))
        if sum(map(len, da.values())) != n:
            return f"marked step {label!r}'s device activities differ in number"
        busy_a, busy_b = (sum(merged_us(iv) for iv in d.values()) / 1000 for d in (da, db))
        if not close(busy_a, busy_b, n):
            return f"marked step {label!r}'s busy ms differ"
    return None


def interleaved_device_ms(
    steps: Sequence[Callable[[], Any]], device: str, rounds: int, rng: random.Random, *, block_steps: int = 1
) -> list[list[float]] | None:
    """Per step, `rounds` GPU busy times (ms per step), the steps interleaved in a random order
    inside ONE profiler window: what drifts between windows (the GPU's clocks and temperature; an
    unchanged bf16 block read -0.3..+7.8% against its record minutes later, docs/gpu-runs.md) hits
    both sides alike, and per-round ratios cancel it. Each round is a block of `block_steps`
    interleaved calls per step, its figure their mean: a slowdown that hits one step in five (every
    Nth `F.linear`, a periodic re-allocation) shows in every block of five, where single-step rounds
    read +12% in one round of five and +0% in the rest. None off a GPU (nothing to time)."""
    if not str(device).startswith("cuda"):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    for s in steps:
        s()  # an untimed call first, as the wall-time rounds do
    order = list(range(len(steps)))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds * block_steps):
            rng.shuffle(order)
            for i in order:
                with record_function(f"{STEP_MARK}{i}"):
                    steps[i]()
        torch.cuda.synchronize(torch.device(device))
    per_step = device_ms_per_marked_step(window_events(prof, ("user_annotation", *LAUNCH_CATS, *DEVICE_CATS)))
    return [block_means(per_step.get(str(i), []), block_steps) for i in range(len(steps))]
