"""The GPU's own busy time per step, from the same profiler trace that counts the kernel launches.

torch.profiler (kineto, `ChromeTraceLogger::handleActivity`) writes every CUPTI activity as a
complete event `{"ph": "X", "cat": ..., "name": ..., "pid": device, "tid": stream, "ts": us,
"dur": us, "args": {...}}`, the category being the activity type's name: `kernel` for kernels,
`gpu_memcpy` and `gpu_memset` for copies and memsets (`gpu_user_annotation` spans kernels that are
already counted and is left out). The busy time of a device is the union of those intervals: two
streams running at once count once. Each kernel name's time is the sum of its own durations
(overlaps are not split between names), so the names may add up to more than the busy time.

Host phases (a slow CPU, a busy hypervisor sibling) move wall time, not the kernels' durations:
the device time is what the GPU did, and the wall time minus it is what the host added.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # kineto's names of CUPTI's activity types
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")  # the host calls that launched them (cudaLaunchKernel, cudaGraphLaunch)
STEP_MARK = "perfgate.step:"  # a record_function range around one step's launches: `perfgate.step:<label>`
LAUNCH_BOUND_SHARE = 0.5  # the GPU busy less than half the step: the host decides the step's time


@dataclass(frozen=True, kw_only=True)
class DeviceTime:
    steps: int
    device_ms_per_step: float  # busy time: every device's merged kernel, copy and memset intervals
    kernel_ms_per_step: dict[str, float] = field(default_factory=dict)  # per activity name, largest first
    intervals: int = 0  # device activities seen in the window


def merged_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (microseconds in, microseconds out)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def device_time_from_events(events: Iterable[Mapping[str, Any]], steps: int) -> DeviceTime:
    """Busy time and time per activity name per step, from a chrome trace's events."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    per_device: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    per_name: dict[str, float] = defaultdict(float)
    seen = 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS:
            continue
        ts, dur = float(e.get("ts") or 0.0), float(e.get("dur") or 0.0)
        per_device[e.get("pid")].append((ts, ts + dur))
        per_name[str(e.get("name", ""))] += dur
        seen += 1
    busy_us = sum(merged_us(iv) for iv in per_device.values())
    names = sorted(per_name.items(), key=lambda kv: (-kv[1], kv[0]))
    return DeviceTime(
        steps=steps,
        device_ms_per_step=busy_us / 1000 / steps,
        kernel_ms_per_step={k: v / 1000 / steps for k, v in names},
        intervals=seen,
    )


def marked_activities(
    events: Iterable[Mapping[str, Any]], prefix: str = STEP_MARK
) -> list[tuple[str, dict[Any, list[tuple[float, float]]]]]:
    """Each marked step's device activities, as (label, {device: [(start, end) us]}), in the order
    the steps ran.

    A step's GPU work runs after its host code returned (launches are asynchronous), so it is told
    by its launch, not by its time: each device activity carries CUPTI's correlation id, the same
    as the runtime or driver call that launched it (kernels replayed from a CUDA graph carry the
    `cudaGraphLaunch`'s), and that call lies inside the step's `record_function` range (kineto's
    `user_annotation` events). Activities launched outside every mark (a synchronize) are left out."""
    marks: list[tuple[float, float, str]] = []
    launches: dict[Any, float] = {}
    activities: list[tuple[Any, Any, float, float]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        ts, dur = float(e.get("ts") or 0.0), float(e.get("dur") or 0.0)
        if cat == "user_annotation" and (name := str(e.get("name", ""))).startswith(prefix):
            marks.append((ts, ts + dur, name[len(prefix) :]))
        elif cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = ts
        elif cat in DEVICE_CATS and "correlation" in args:
            activities.append((args["correlation"], e.get("pid"), ts, ts + dur))
    marks.sort()
    starts = [m[0] for m in marks]
    per_mark: list[dict[Any, list[tuple[float, float]]]] = [defaultdict(list) for _ in marks]
    for corr, device, start, end in activities:
        launched = launches.get(corr)
        i = bisect.bisect_right(starts, launched) - 1 if launched is not None else -1
        if i >= 0 and launched <= marks[i][1]:  # type: ignore[operator]
            per_mark[i][device].append((start, end))
    return [(label, dict(per_device)) for (_, _, label), per_device in zip(marks, per_mark, strict=True)]


def device_ms_per_marked_step(events: Iterable[Mapping[str, Any]], prefix: str = STEP_MARK) -> dict[str, list[float]]:
    """The GPU busy time (ms) of each marked step, per label, in the order the steps ran: its
    activities (`marked_activities`) merged per device and summed over devices, like
    `device_time_from_events`'s, so a step on two GPUs reads here what the stored figure reads."""
    out: dict[str, list[float]] = defaultdict(list)
    for label, per_device in marked_activities(events, prefix):
        out[label].append(sum(merged_us(iv) for iv in per_device.values()) / 1000)
    return dict(out)


@dataclass(frozen=True, kw_only=True)
class HostShare:
    host_ms_per_step: float  # wall minus device: what the host added (launches, Python, syncs)
    device_busy_share: float  # device / wall
    bound: str  # "launch-bound" (the GPU idles most of the step) or "device-bound"


def block_means(values: Sequence[float], block: int) -> list[float]:
    """The means of consecutive blocks of `block` values (a trailing partial block dropped): per-step
    figures of one side of an interleaved window, as per-block figures of `block` steps each."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    return [fmean(values[i : i + block]) for i in range(0, len(values) - block + 1, block)]


def host_share(wall_ms: float, device_ms: float) -> HostShare:
    """The step's host share beside its device time (wall: the timed rounds' median)."""
    if wall_ms <= 0:
        raise ValueError(f"wall time must be > 0 ms, got {wall_ms}")
    share = device_ms / wall_ms
    return HostShare(
        host_ms_per_step=max(0.0, wall_ms - device_ms),
        device_busy_share=share,
        bound="launch-bound" if share < LAUNCH_BOUND_SHARE else "device-bound",
    )


def grown(base: Mapping[str, float], cur: Mapping[str, float], top: int = 3) -> list[str]:
    """The activity names whose time per step grew most, as `name 0.41 -> 0.45 ms (+9.8%)` (new
    names too), largest growth first."""
    rows = []
    for name in set(base) | set(cur):
        b, c = float(base.get(name, 0.0)), float(cur.get(name, 0.0))
        if c > b:
            rows.append((c - b, name, b, c))
    rows.sort(key=lambda r: (-r[0], r[1]))
    out = []
    for _, name, b, c in rows[:top]:
        short = name if len(name) <= 60 else name[:57] + "..."
        pct = f" ({(c / b - 1) * 100:+.1f}%)" if b > 0 else " (new)"
        out.append(f"{short} {b:.3g} -> {c:.3g} ms{pct}")
    return out
