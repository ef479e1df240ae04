"""The process valgrind runs: many cases in one process, so torch loads once (`import torch` alone
takes 15-35 s under valgrind).

Started by `perfgate.counts.launcher.count_cases` as `valgrind --tool=callgrind
--instr-atstart=no --collect-atstart=no python -c <import perfgate, main()>`, its job as JSON on stdin
(not argv: argv sits on the stack, and the stack's layout moves the counts). From a pytest run the
same counting runs inside a pytest session on the run's items (perfgate.plugin.count_worker, which
calls `count_case`); outside one (perfgate.counts.quality) `main` here counts the job's cases. Per case: build it
with the suite's own pipeline, run `warmup` steps uninstrumented, switch instrumentation on
(`callgrind_control -i on <pid>`: torch exposes no START_INSTRUMENTATION request), collect exactly
`steps` steps between two `torch._C._valgrind_toggle()` client requests, dump, switch
instrumentation off again. One JSON line per case goes to the manifest as soon as it is counted,
naming its dump (callgrind numbers a process's dumps 1, 2, ...), so a crash keeps earlier cases.
The process ends with os._exit: interpreter shutdown under valgrind costs seconds and counts nothing.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # torch loads only inside the counted process
    from perfgate.cases.runner import Case


def virtual_cpu() -> dict[str, Any]:
    """The CPU the program sees: under valgrind, VEX's canned CPUID (e.g. an Intel i7-4910MQ with
    AVX2 on any AVX2 host, AVX-512 hidden), which is what MKL, oneDNN and ATen dispatch on.
    py-cpuinfo's CPUID runs the instruction in this process (its get_cpu_info reads /proc/cpuinfo,
    the host's)."""
    import torch
    from cpuinfo.cpuinfo import CPUID

    c = CPUID()
    ext = c.get_max_extension_support()
    flags = sorted(c.get_flags(ext))
    simd = [f for f in flags if f.startswith(("avx", "sse", "ssse", "fma", "amx", "f16c", "bmi"))]
    return {
        "vendor": c.get_vendor_id(),
        "brand": c.get_processor_brand(ext),
        "family_model": "{family}/{model}".format(**c.get_info()),
        "simd": simd,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def _ctl(flag: str) -> None:
    subprocess.run(["callgrind_control", "-i", flag, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)


def _window(call: Any, steps: int) -> None:
    """One more counted window (a dump) of `steps` calls, the GC kept out as for the step's."""
    import torch

    gc.collect()
    gc.disable()
    torch._C._valgrind_toggle()
    try:
        for _ in range(steps):
            call()
    finally:
        torch._C._valgrind_toggle_and_dump_stats()
        gc.enable()


def _calibrate(step: Any, module: Any, steps: int, dump: int) -> tuple[dict[str, int], dict[str, int], int]:
    """After the case's window, what sizes a slowdown by instructions (perfgate.counts.quality): a
    window of the step with each shared op done twice on every call, and one of each distinct leaf
    module's extra call alone. Returns {window name: dump number}, the op calls per window, the
    last dump number."""
    from perfgate.quality import inject

    windows, calls = {}, {}
    for short in inject.OPS:
        undo, seen = inject.slow_op(short, 1)
        try:
            for _ in range(3):  # the wrapper's code object quickened before its window
                step()
            n = seen.calls
            _window(step, steps)
            calls[short] = seen.calls - n
        finally:
            undo()
        dump += 1
        windows[short] = dump
    shapes = set()
    for name, (mod, args) in inject.leaf_inputs(step, module).items():
        shape = (type(mod).__name__, tuple(tuple(p.shape) for p in mod.parameters(recurse=False)))
        if shape in shapes or len(shapes) >= 16:  # the same leaf again costs the same: one of each
            continue
        shapes.add(shape)
        work = inject.leaf_call(mod, args)
        for _ in range(3):
            work()
        _window(work, steps)
        dump += 1
        windows[f"leaf:{name}"] = dump
    return windows, calls, dump


def prepare(job: dict[str, Any]) -> None:
    """The process set up for counting, whichever worker: one thread (how work splits moves the
    count), the job's injected slowdown (the direct worker's gate-quality runs)."""
    import torch

    torch.set_num_threads(1)
    if job.get("inject"):  # perfgate.quality.inject's slowdowns (gate-quality), set here from the job
        from perfgate.quality import inject

        os.environ[inject.ENV] = job["inject"]
        inject.pytest_configure(None)


def header(out: TextIO) -> None:
    """The manifest's first line: what the counts depend on."""
    import torch

    out.write(json.dumps({"virtual_cpu": virtual_cpu(), "torch": torch.__version__}) + "\n")
    out.flush()


def count_case(case: Case, job: dict[str, Any], out: TextIO, dump: int) -> int:
    """Build `case` with the suite's pipeline, warm it up, count its window (and what the job asks
    besides); one manifest line. Returns the process's last dump number."""
    import torch

    from perfgate.cases.runner import RunOptions, build_case, isolate

    steps, warmup = int(job["steps"]), int(job["warmup"])
    per_case, calibrate = job.get("per_case") or {}, bool(job.get("calibrate"))
    opts = RunOptions(count_flops=False, warm_compile=False, telemetry_interval_s=None, energy_window_s=0.0)
    line: dict[str, Any] = {"case": case.id}
    collecting = instrumented = False
    undo = None
    t0 = time.perf_counter()
    try:
        isolate(torch.device(case.device))
        built = build_case(case, opts)
        step, module = built.step, built.converted.module
        spec = per_case.get(case.id)
        if spec:  # a sized slowdown for this case only (perfgate.counts.quality)
            from perfgate.quality import inject

            step, undo, seen = inject.apply(spec, step, module)
        phases = line["phases_s"] = {"build": round(time.perf_counter() - t0, 2)}
        for _ in range(warmup):
            step()
        phases["warmup"] = round(time.perf_counter() - t0 - phases["build"], 2)
        if spec:
            before = (seen.calls, seen.doubled)
        # The cyclic GC runs when allocations since its last run pass a threshold: when it
        # falls inside the window depends on the cases before (0.35% on the tiny block).
        gc.collect()
        gc.disable()
        _ctl("on")
        instrumented = True
        torch._C._valgrind_toggle()
        collecting = True
        for _ in range(steps):
            step()
        torch._C._valgrind_toggle_and_dump_stats()
        collecting = False
        dump += 1
        line.update(dump=dump, steps=steps, warmup=warmup)
        phases["window"] = round(time.perf_counter() - t0 - phases["build"] - phases["warmup"], 2)
        if spec:  # calls (or steps) in the window, and how many were done twice
            line["injected"] = {"calls": seen.calls - before[0], "doubled": seen.doubled - before[1]}
        if calibrate:
            line["windows"], line["calls_per_window"], dump = _calibrate(step, module, steps, dump)
    except Exception as exc:  # noqa: BLE001 - one case that fails is that case's reason, not the pass's end
        if collecting:  # close its window so the next case's dump number stays right
            torch._C._valgrind_toggle_and_dump_stats()
            dump += 1
        line["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        line["traceback"] = traceback.format_exc(limit=4)
    finally:
        gc.enable()
        if instrumented:
            _ctl("off")
        if undo is not None:
            undo()
        line["wall_s"] = round(time.perf_counter() - t0, 2)
    write_line(out, line)
    return dump


def write_line(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


def run(job: dict[str, Any]) -> None:
    """The direct worker: the job's cases, outside pytest (perfgate.counts.quality)."""
    from perfgate.cases.runner import Case
    from perfgate.cases.workload import load_registries

    prepare(job)
    load_registries(job.get("registries", []), job.get("model_files", []), job.get("root", "."))
    dump = 0
    with open(job["manifest"], "a", encoding="utf8") as out:
        header(out)
        for raw in job["cases"]:
            case = Case(**{**raw, "options": tuple(tuple(kv) for kv in raw.get("options", []))})
            dump = count_case(case, job, out, dump)


def read_job() -> dict[str, Any]:
    """The job from stdin; the run's sys.path set before anything else is imported."""
    job = json.loads(sys.stdin.read())
    sys.path[:] = job["sys_path"]
    return job


def exit_now() -> None:
    """Interpreter shutdown under valgrind costs seconds and counts nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    try:
        run(read_job())
    finally:
        exit_now()
