"""The process valgrind runs: many cases in one process, so torch loads once (`import torch` alone
takes 15-35 s under valgrind).

Started by `perfgate.measure.instructions.count_cases` as `valgrind --tool=callgrind
--instr-atstart=no --collect-atstart=no python -m perfgate.counts.worker`, its job as JSON on stdin
(not argv: argv sits on the stack, and the stack's layout moves the counts). Per case: build it
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
import traceback
from typing import Any


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


def run(job: dict[str, Any]) -> None:
    import torch

    from perfgate.cases.runner import Case, RunOptions, build_case, isolate
    from perfgate.cases.workload import load_registries

    torch.set_num_threads(1)
    if job.get("inject"):  # perfgate.quality.inject's slowdowns (gate-quality), set here: the env is pinned
        from perfgate.quality import inject

        os.environ[inject.ENV] = job["inject"]
        inject.pytest_configure(None)
    load_registries(job.get("registries", []), job.get("model_files", []), job.get("root", "."))
    steps, warmup = int(job["steps"]), int(job["warmup"])
    opts = RunOptions(count_flops=False, warm_compile=False, telemetry_interval_s=None, energy_window_s=0.0)
    dump = 0
    with open(job["manifest"], "a", encoding="utf8") as out:
        out.write(json.dumps({"virtual_cpu": virtual_cpu(), "torch": torch.__version__}) + "\n")
        out.flush()
        for raw in job["cases"]:
            case = Case(**{**raw, "options": tuple(tuple(kv) for kv in raw.get("options", []))})
            line: dict[str, Any] = {"case": case.id}
            collecting = instrumented = False
            try:
                isolate(torch.device(case.device))
                step = build_case(case, opts).step
                for _ in range(warmup):
                    step()
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
            out.write(json.dumps(line) + "\n")
            out.flush()


if __name__ == "__main__":
    try:
        run(json.loads(sys.stdin.read()))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
