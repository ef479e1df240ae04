"""Instructions per step under callgrind: many cases in one valgrind process, each counted over a
window of steps after its warm-up, so that unchanged code gives the same count in every process.

The count process sees what the timed process sees: the run's environment and `sys.path` (and, from
a pytest run, its plugins, conftest fixtures and options: perfgate.plugin.count_worker), with only
what breaks determinism replaced (each measured, docs/instructions.md "What the count process
inherits"):
- one thread (torch.set_num_threads(1), OMP/MKL_NUM_THREADS=1): how work splits changes it;
- PYTHONHASHSEED=0 and PYTHONMALLOC=malloc: dict order and pymalloc arenas move it by ~0.05%;
- `setarch -R` (no address randomisation) and an environment of fixed size: the stack's layout
  moves it (3 KB more environment: -0.1%), so the environment is padded to a multiple of ENV_BYTES
  (argv and the pointers included), the job on stdin rather than argv;
- the CPU it runs on: none of the host's. valgrind shows the program its own canned CPUID (on an
  AVX2 host an Intel i7-4910MQ with AVX2, AVX-512 hidden), so counts may agree across CPU
  generations; `key()` names what the counts depend on, for portable baselines.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.measure import callgrind
from perfgate.record import InstructionCount

STEPS = 10  # at least 10: an every-Nth slowdown must not fall between the counted steps
# Python 3.11 quickens a code object after 8 calls: a window after fewer warm-up steps counts the
# quickening, once per process, so a case counted after others that ran the same code read 0.17% less.
WARMUP = 10
# The worker's argv + environment (strings and pointers) padded to a multiple of this: a CI runner's
# environment is 5-10 KB, and one the same size in every run keeps the stack where it was.
ENV_BYTES = 65536
PAD = "PERFGATE_PAD"
# The run's variables the count process gets replaced: each breaks determinism (module docstring).
PINNED = {
    "PYTHONHASHSEED": "0",
    "PYTHONMALLOC": "malloc",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # Nothing written into the run's tree; a module compiled in one pass and read in the next moves counts.
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Set unless the run set them: inductor's C++ kernels for the CPU the program sees. Valgrind's virtual
# CPU (x86-64) has AVX2 and no AVX-512, and every library reads it through CPUID but inductor, which
# reads /proc/cpuinfo for its vector ISA and compiles with g++ -march=native (g++ runs outside
# valgrind): on an AVX-512 host a compiled case's first kernel died with SIGILL before this.
VIRTUAL_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}
INSTALL_HINT = "install valgrind (Debian/Ubuntu: apt-get install valgrind)"


def unavailable_reason() -> str | None:
    """Why instructions cannot be counted here, or None."""
    if platform.system() != "Linux":
        return f"callgrind counts run on Linux only (this is {platform.system()})"
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH: {INSTALL_HINT}"
    return None


def valgrind_version() -> str | None:
    try:
        out = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().removeprefix("valgrind-") or None


def key(virtual_cpu: dict[str, Any], torch_version: str, python_version: str, valgrind: str | None) -> str:
    """What a count depends on, as a directory name: valgrind's virtual CPU (its brand and the
    SIMD it exposes), torch's build, Python, valgrind. Never the host's name or CPU generation."""
    simd = (
        "avx512"
        if any(f.startswith("avx512") for f in virtual_cpu.get("simd", []))
        else ("avx2" if "avx2" in virtual_cpu.get("simd", []) else "sse")
    )
    brand = re.sub(r"[^a-z0-9]+", "-", str(virtual_cpu.get("brand", "unknown")).lower()).strip("-")
    py = ".".join(python_version.split(".")[:2])
    return f"vg{valgrind or 'unknown'}-{brand}-{simd}-torch{torch_version}-py{py}"


def stack_bytes(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """What a process's argv and environment take on its initial stack: the strings (NUL-ended),
    the executable's name, the argv and envp pointer arrays."""
    strings = sum(len(a.encode()) + 1 for a in argv) + len(argv[0].encode()) + 1
    strings += sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())
    return strings + 8 * (len(argv) + len(env) + 2)


def count_env(run_env: Mapping[str, str], argv: Sequence[str]) -> dict[str, str]:
    """The worker's environment: the run's, PINNED replaced, VIRTUAL_CPU added where the run has
    not set them (x86-64), padded (PAD) so that argv and environment take a multiple of ENV_BYTES
    on the stack whatever the run's variables."""
    env = {k: v for k, v in run_env.items() if k != PAD}
    env.update(PINNED)
    if platform.machine() in ("x86_64", "AMD64"):
        env = {**VIRTUAL_CPU, **env}
    used = stack_bytes(argv, {**env, PAD: ""})
    env[PAD] = "x" * (-used % ENV_BYTES)
    return env


@dataclass(frozen=True, kw_only=True)
class CaseCount:
    case: str
    instructions: int  # in the window
    steps: int
    functions: dict[str, list[int]]  # {function: [self, inclusive]} of the window (callgrind.top_functions)
    wall_s: float | None = None  # the case in the process: build, warm-up, window(s)
    # Only when asked for (perfgate.counts.quality): a sized slowdown's calls and doublings in the
    # window, and a calibration's extra windows {name: instructions} with the op calls per window.
    injected: dict[str, int] | None = None
    windows: dict[str, int] | None = None
    calls_per_window: dict[str, int] | None = None

    @property
    def per_step(self) -> float:
        return self.instructions / self.steps


@dataclass(kw_only=True)
class CountPass:
    """One valgrind process's counts: per case a CaseCount or the reason it has none."""

    counts: dict[str, CaseCount] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    virtual_cpu: dict[str, Any] = field(default_factory=dict)
    valgrind: str | None = None
    torch: str = ""
    python: str = field(default_factory=platform.python_version)
    wall_s: float = 0.0
    dumps: str = ""  # where the dumps lie (kept for attribution with `perfgate.measure.attribution`)
    processes: int = 1  # valgrind processes side by side (count_parallel)

    @property
    def key(self) -> str:
        return key(self.virtual_cpu, self.torch, self.python, self.valgrind)

    def block(self, case: str) -> InstructionCount:
        """The record's `instructions` block for one counted case."""
        c = self.counts[case]
        return InstructionCount(
            total=c.instructions,
            steps=c.steps,
            valgrind=self.valgrind,
            virtual_cpu=self.virtual_cpu,
            key=self.key,
            pass_cases=len(self.counts) + len(self.errors),
            pass_wall_s=round(self.wall_s, 1),
            pass_processes=self.processes,
        )


DIRECT_WORKER = "perfgate.counts.worker"  # counts the job's cases outside pytest


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What the count process takes from the run it counts for: its working folder, its `sys.path`
    (set first thing in the worker) and, from a pytest run, its arguments and the worker that counts
    through pytest on the same items (the plugin names its own, perfgate.plugin.count_worker: the
    run's `-p` plugins, conftest fixtures and ini options then apply as they do to the timed step)."""

    cwd: str
    sys_path: tuple[str, ...]
    pytest_args: tuple[str, ...] | None = None
    worker: str = DIRECT_WORKER  # the module the valgrind process runs (its `main`)

    @classmethod
    def here(cls) -> RunContext:
        return cls(cwd=os.getcwd(), sys_path=tuple(sys.path))


def worker_argv(module: str, perfgate_root: str) -> list[str]:
    """The worker's command line: perfgate found first (its `main` then sets the run's sys.path);
    the run's PYTHONPATH is left as it was, so its sitecustomize and .pth files apply."""
    boot = f"import sys; sys.path.insert(0, {perfgate_root!r}); from {module} import main; main()"
    return [sys.executable, "-c", boot]


def _case_json(case: Any) -> dict[str, Any]:
    return {
        "model": case.model,
        "size": case.size,
        "variant": case.variant,
        "device": case.device,
        "options": [list(kv) for kv in case.options],
    }


def count_cases(
    cases: Sequence[Any],
    *,
    root: str | os.PathLike[str] = ".",
    registries: Sequence[str] = (),
    model_files: Sequence[str] = (),
    steps: int = STEPS,
    warmup: int = WARMUP,
    out_dir: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
    inject: str | None = None,
    per_case: dict[str, dict[str, Any]] | None = None,
    calibrate: bool = False,
    on_case: Callable[[str, float | None], None] | None = None,
    run: RunContext | None = None,
) -> CountPass:
    """Count `cases` (perfgate.cases.runner.Case objects on the CPU) in one valgrind process. `run`:
    the run counted for (default: this process, counted by the direct worker; with pytest arguments,
    through the run's own pytest session, whose plugins apply whatever slowdown it has). `inject`: a
    perfgate.quality.inject slowdown (`shared:5`, `local:2`) the direct worker applies, by default
    this process's PERFGATE_INJECT. `per_case`: a sized slowdown per case id
    (perfgate.quality.inject.apply); `calibrate`: also count the windows that size them
    (perfgate.counts.worker._calibrate); `on_case(case_id, wall_s)`: called as each case's count is
    written (a pass takes minutes: its progress)."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got {steps} and {warmup}")
    result = CountPass(valgrind=valgrind_version())
    why = unavailable_reason()
    if why:
        result.errors = {c.id: why for c in cases}
        return result
    out = Path(out_dir or tempfile.mkdtemp(prefix="perfgate-callgrind-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.jsonl"
    manifest.unlink(missing_ok=True)
    for old in out.glob("callgrind.*"):
        old.unlink()
    job = {
        "cases": [_case_json(c) for c in cases],
        "case_ids": [c.id for c in cases],
        "steps": steps,
        "warmup": warmup,
        "manifest": str(manifest),
        "root": str(Path(root).resolve()),
        "registries": list(registries),
        "model_files": list(model_files),
    }
    run = run or RunContext.here()
    job["sys_path"], job["out"] = list(run.sys_path), str(out)
    if run.pytest_args is not None:
        job["pytest_args"] = list(run.pytest_args)
    elif inject is None:
        inject = os.environ.get("PERFGATE_INJECT")
    job["inject"] = inject
    if per_case:
        job["per_case"] = per_case
    if calibrate:
        job["calibrate"] = True
    setarch = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
    cmd = [
        *setarch,
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--callgrind-out-file={out}/callgrind.%p",
    ]
    import perfgate

    argv = worker_argv(run.worker, str(Path(perfgate.__file__).resolve().parents[1]))
    cmd += argv
    env = count_env(os.environ, argv)
    limit = timeout_s if timeout_s is not None else 300 + 240 * len(cases)  # a busy 2-core VM: 1110 s for 10
    t0 = time.perf_counter()
    tail = _run_worker(cmd, json.dumps(job), env, Path(run.cwd), limit, manifest, on_case)
    result.wall_s = time.perf_counter() - t0
    result.dumps = str(out)
    _read_manifest(result, cases, out, manifest, tail)
    return result


def _read_manifest(result: CountPass, cases: Sequence[Any], out: Path, manifest: Path, tail: list[str]) -> None:
    """Each case's count from the worker's manifest and callgrind's dumps into `result` (or why none)."""
    lines, cut = _manifest_lines(manifest)
    if cut:  # the worker was stopped while writing a line: that case reads as not reached, and says so
        tail = [*tail, f"its manifest's last line was cut off ({cut[:80]!r})"]
    if lines and "virtual_cpu" in lines[0]:
        result.virtual_cpu, result.torch = lines[0]["virtual_cpu"], lines[0]["torch"]
        lines = lines[1:]
    done = {ln["case"]: ln for ln in lines}
    for c in cases:
        ln = done.get(c.id)
        if ln is None:
            result.errors[c.id] = "the valgrind worker stopped before this case: " + (" | ".join(tail) or "no output")
        elif "error" in ln:
            result.errors[c.id] = f"counting failed under valgrind: {ln['error']}"
        elif "skipped" in ln:
            result.errors[c.id] = f"not counted: its fixtures skipped it in setup ({ln['skipped']})"
        else:
            found = sorted(out.glob(f"callgrind.*.{ln['dump']}"))
            if not found:
                result.errors[c.id] = f"callgrind wrote no dump number {ln['dump']} in {out}"
                continue
            dump = callgrind.parse(found[0])
            windows = None
            if ln.get("windows"):
                windows = {}
                for name, number in ln["windows"].items():
                    extra = sorted(out.glob(f"callgrind.*.{number}"))
                    if extra:
                        windows[name] = callgrind.parse(extra[0]).total
            result.counts[c.id] = CaseCount(
                case=c.id,
                instructions=dump.total,
                steps=ln["steps"],
                functions=callgrind.top_functions(dump),
                wall_s=ln.get("wall_s"),
                injected=ln.get("injected"),
                windows=windows,
                calls_per_window=ln.get("calls_per_window"),
            )


def _manifest_lines(manifest: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The manifest's lines, parsed, and the unfinished last line if there is one. The worker writes
    a line and its newline at once and flushes (perfgate.counts.worker.write_line), so only text after
    the last newline can be a part: a worker killed (past its limit) or dead while writing it."""
    if not manifest.exists():
        return [], None
    *whole, last = manifest.read_text(errors="replace").split("\n")
    lines = [json.loads(ln) for ln in whole if ln.strip()]
    if not last.strip():
        return lines, None
    try:  # a complete line without its newline (nothing writes one; read as the line it is)
        return [*lines, json.loads(last)], None
    except json.JSONDecodeError:
        return lines, last


def _run_worker(
    cmd: list[str],
    job: str,
    env: dict[str, str],
    cwd: Path,
    limit: float,
    manifest: Path,
    on_case: Callable[[str, float | None], None] | None,
) -> list[str]:
    """Run the valgrind worker to its end or `limit`; report each case as the worker's manifest
    grows. The last lines of its stderr (the reason when it stopped early)."""
    out = manifest.parent
    log, job_file = out / "worker.log", out / "job.json"
    job_file.write_text(job)
    deadline, reported = time.monotonic() + limit, 0
    # Files, not pipes: nothing to feed or drain while polling the manifest.
    with job_file.open() as stdin, log.open("w") as err:
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=err, stderr=err, env=env, cwd=cwd)
        while True:
            try:
                proc.wait(timeout=2.0)
                finished = True
            except subprocess.TimeoutExpired:
                finished = False
            if on_case is not None and manifest.exists():
                # Whole lines only: the part after the last newline may be a line being written.
                lines = [ln for ln in manifest.read_text().split("\n")[:-1] if ln.strip()]
                for ln in lines[reported:]:
                    entry = json.loads(ln)
                    if "case" in entry:
                        on_case(entry["case"], entry.get("wall_s"))
                reported = len(lines)
            if finished:
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return [f"valgrind ran past {limit:.0f} s and was stopped"]
    return log.read_text(errors="replace").strip().splitlines()[-3:]


def count_parallel(
    groups: Sequence[Sequence[Any]], *, out_dir: str | os.PathLike[str] | None = None, **kw: Any
) -> CountPass:
    """Each group of cases counted in its own valgrind process, the processes side by side (a
    2-core machine runs two), merged into one pass. A case's count depends on the cases before it
    in its process (heap history), so the groups must be the same in every run that is compared
    (perfgate.counts.suite.partition fixes them)."""
    groups = [list(g) for g in groups if g]
    if len(groups) <= 1:
        return count_cases(groups[0] if groups else [], out_dir=out_dir, **kw)
    from concurrent.futures import ThreadPoolExecutor

    root = Path(out_dir or tempfile.mkdtemp(prefix="perfgate-callgrind-"))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(groups)) as pool:  # each thread waits on its own valgrind subprocess
        parts = list(
            pool.map(lambda ig: count_cases(ig[1], out_dir=root / f"process{ig[0] + 1}", **kw), enumerate(groups))
        )
    merged = CountPass(valgrind=parts[0].valgrind, wall_s=time.perf_counter() - t0, dumps=str(root.resolve()))
    for part in parts:
        merged.counts.update(part.counts)
        merged.errors.update(part.errors)
        if part.virtual_cpu and not merged.virtual_cpu:
            merged.virtual_cpu, merged.torch = part.virtual_cpu, part.torch
    merged.processes = len(parts)
    return merged
