"""torch.profiler's operator rows (`key_averages()`, what `perfgate profile` ranks) rebuilt from a
kept chrome trace, for the GPU traces kept without their profiler object.

Each complete event becomes the `FunctionEvent` torch's own `_parse_kineto_results` builds for it:
host events (`cpu_op`, `user_annotation`, `cuda_runtime`, `cuda_driver`) on the CPU, device
activities (`kernel`, `gpu_memcpy`, `gpu_memset`, `gpu_user_annotation`) on the device kineto wrote
as their pid, the two annotation categories flagged as user annotations. A device activity's time
is appended to the op whose "External id" it carries (torch: `append_kernel` through the linked
correlation id), runtime and driver calls likewise move to that op's thread. Everything after that
is torch's: the nesting (`EventList._build_tree`), the self times and the grouping (`key_averages`),
and the table (`EventList.table`), so the rows read as a live profiler's would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

HOST_CATS = {"cpu_op": False, "user_annotation": True, "cuda_runtime": False, "cuda_driver": False}
DEVICE_CATS = {"kernel": False, "gpu_memcpy": False, "gpu_memset": False, "gpu_user_annotation": True}
FILTERED = {"profiler::_record_function_enter_new", "profiler::_record_function_exit", "aten::is_leaf",
            "aten::output_nr", "aten::_version"}  # fmt: skip  # torch's _filter_name


def function_events(events: Iterable[Mapping[str, Any]], use_device: str = "cuda") -> EventList:
    """The trace's events as torch's FunctionEvents, nested as the profiler nests them."""
    out: list[FunctionEvent] = []
    frontend: dict[int, FunctionEvent] = {}
    linked: list[tuple[int, FunctionEvent]] = []
    for e in events:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if e.get("ph") != "X" or (cat not in HOST_CATS and cat not in DEVICE_CATS) or name in FILTERED:
            continue
        args = e.get("args") or {}
        ext = int(args.get("External id", 0))
        device = cat in DEVICE_CATS
        start = float(e["ts"])
        fe = FunctionEvent(
            id=ext,
            name="ProfilerStep*" if name.startswith("ProfilerStep#") else name,
            thread=int(e["tid"]) if not device else int(e.get("tid", 0)),
            start_us=start,
            end_us=start + float(e.get("dur", 0.0)),
            use_device=use_device,
            device_type=DeviceType.CUDA if device else DeviceType.CPU,
            device_index=int(e["pid"]) if device else 0,
            is_user_annotation=(DEVICE_CATS if device else HOST_CATS)[str(cat)],
            input_shapes=[],
            stack=[],
        )
        out.append(fe)
        if cat in ("cpu_op", "user_annotation"):
            frontend.setdefault(ext, fe)  # a frontend event: its own correlation id, nothing linked
        elif ext:
            linked.append((ext, fe))
    for ext, fe in linked:
        op = frontend.get(ext)
        if op is None:
            continue
        if fe.device_type == DeviceType.CPU:
            fe.thread = op.thread
        else:
            op.append_kernel(fe.name, fe.device_index, fe.time_range.end - fe.time_range.start)
    out.sort(key=lambda fe: (fe.time_range.start, -fe.time_range.end))
    rebuilt = EventList(out, use_device=use_device)
    rebuilt._build_tree()
    return rebuilt
