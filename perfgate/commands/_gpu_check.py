"""The GPU acceptance run behind `scripts/gpu-check`: one command for whoever has a GPU.

A driver of `perfgate` commands (it runs them as subprocesses), so it sits with them; the leading
underscore keeps it out of the `perfgate` subcommands: `python -m perfgate.commands._gpu_check`.

Stages, each a subprocess with its own log and JUnit XML under the output folder:

1. `perfgate health` of the device (persistence mode, clocks, other processes, ECC, free memory):
   a failed check fails the acceptance but the stages after it still run, for the whole picture;
2. `perfgate doctor` on the device;
3. the harness's tests (`pytest tests`; `-n auto` when pytest-xdist is installed);
4. every variant of one small family (physicsnemo-block, full size: Linear layers, so int8 and FP8
   run; 12.6 M parameters, so the compiled variants build in seconds) on the default device,
   recorded as a baseline in a folder of its own;
5. the same selection again, unchanged, gated against that record: what a pull request sees;
6. a summary of what passed (`summary.md`, `summary.json`), printed at the end.

`--quality` runs the GPU gate's quality run instead of stages 2-5 (`perfgate gpu-quality`:
compute- and launch-bound cases, unchanged comparisons and sized GPU- and host-side slowdowns,
each judged by wall time stored and A/B, device time and kernel counts; 4 min 4 s on one H200,
2026-11-27: docs/gpu-runs.md), its detection table in `quality/quality.md` and in the summary.

`--tier-time TIER` measures what a tier costs on this runner instead of stages 2-5: the tier run
twice, ungated, into one fresh inductor cache (`tier-cold`, then `tier-warm`), each case's own
seconds from the JUnit XML beside each run's total (`--tier-phases cold`, then `warm` into the same
`--out`, splits the two across calls of a leased GPU). `--stage-limit-s N` interrupts a stage after
N seconds as Ctrl-C would (pytest still writes its JSON and XML), so a leased GPU's minutes give a
partial timing instead of none; the summary says which stages were cut.

Without CUDA it says so and exits 5 (perfgate's "cannot run here"), unless `--device cpu` asks for
a rehearsal of the flow on the CPU (how this module is tested). Exit 0 when every stage passed,
else 1. It installs nothing: scripts/gpu-check uses the project's set-up (`PERFGATE_SKIP_INSTALL=1`
takes the machine's Python as it is).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfgate import files
from perfgate.exitcodes import BAD_INPUT as EXIT_BAD_INPUT
from perfgate.exitcodes import FAILED as EXIT_FAILED
from perfgate.exitcodes import OK as EXIT_OK
from perfgate.exitcodes import UNAVAILABLE as EXIT_UNAVAILABLE
from perfgate.results import benchmarks, read_benchmark_json

ROOT = Path(__file__).resolve().parents[2]


@dataclass(kw_only=True)
class StageResult:
    name: str
    command: list[str]
    rc: int
    wall_s: float
    log: str
    outcomes: dict[str, int] = field(default_factory=dict)  # from the JUnit XML: passed, failed, skipped, errors
    cut: bool = False  # interrupted at --stage-limit-s

    @property
    def ok(self) -> bool:
        return self.rc == 0


def junit_outcomes(path: Path) -> dict[str, int]:
    """Passed / failed / skipped / errors of a pytest JUnit XML (empty if it was not written)."""
    if not path.is_file():
        return {}
    out = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None:
            out["failed"] += 1
        elif case.find("error") is not None:
            out["errors"] += 1
        elif case.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


# Seconds between SIGINTs while a cut stage shows no sign of one (see run_stage).
INTERRUPT_RESEND_S = 5.0


def run_stage(
    name: str, command: list[str], out: Path, *, junit: Path | None = None, limit_s: float | None = None
) -> StageResult:
    """Run one stage, its output both to the terminal (progress survives a killed run) and its log;
    after `limit_s` seconds it gets SIGINT, as Ctrl-C would send (pytest then still writes its files).
    A SIGINT can be lost (one sent 0.5 s into a pytest's start-up was never seen, and the stage ran
    to its end: CI, 2026-11-28), so it is sent again every INTERRUPT_RESEND_S until the stage prints
    `KeyboardInterrupt` after the cut (perfgate's line the moment pytest takes it, before the files
    are written; Python's last line elsewhere) or ends: a second one never interrupts pytest writing
    its files, and a test's name printed before the cut never stops the first."""
    log = out / f"{name}.log"
    print(f"gpu-check: [{name}] {shlex.join(command)}", flush=True)
    t0 = time.perf_counter()
    cut, seen = threading.Event(), threading.Event()
    with log.open("w", encoding="utf8") as fh:
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )

        def interrupt() -> None:
            cut.set()
            while proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                if seen.wait(INTERRUPT_RESEND_S):
                    return

        timer = threading.Timer(limit_s, interrupt) if limit_s else None
        if timer is not None:
            timer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            if cut.is_set() and "KeyboardInterrupt" in line:  # not a test's name printed before the cut
                seen.set()
            sys.stdout.write(line)
            fh.write(line)
        rc = proc.wait()
        seen.set()  # ends the resending
        if timer is not None:
            timer.cancel()
    wall = time.perf_counter() - t0
    result = StageResult(
        name=name,
        command=command,
        rc=rc,
        wall_s=wall,
        log=str(log.relative_to(out)),
        outcomes=junit_outcomes(junit) if junit else {},
        cut=cut.is_set(),
    )
    print(
        f"gpu-check: [{name}] exit {rc} in {wall:.0f} s{' (cut at --stage-limit-s)' if result.cut else ''}", flush=True
    )
    return result


def junit_seconds(path: Path) -> dict[str, float]:
    """Seconds per test of a pytest JUnit XML, by the id in its brackets (the case id for
    benchmarks/test_models.py): set-up, call and tear-down together, as pytest's XML writes them."""
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name:  # a run cut by Ctrl-C: pytest adds a nameless entry for the interrupted test
            continue
        out[name[name.find("[") + 1 : -1] if name.endswith("]") else name] = float(case.get("time") or 0.0)
    return out


@dataclass(frozen=True)
class CaseLine:
    case: str
    median_ms: float | None
    peak_share: float | None
    peak_note: str | None
    unreliable: str | None


def case_lines(results_json: Path) -> list[CaseLine]:
    """Per measured case of a pytest-benchmark JSON: id, median ms, share of peak (or why none)."""
    if not results_json.is_file():
        return []
    return [
        CaseLine(b.name, b.record.median_ms, b.record.peak_share, b.record.peak_note, b.record.unreliable)
        for b in benchmarks(read_benchmark_json(results_json))
    ]


@dataclass(kw_only=True)
class RerunVerdicts:
    """What the unchanged rerun's verdict file says: counts by kind, the failing verdicts and the
    improvements as lines, skipped cases with their reasons."""

    counts: dict[str, int] = field(default_factory=dict)
    failing: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # improvements: unchanged code should read unchanged
    skipped: dict[str, str] = field(default_factory=dict)


def rerun_verdicts(verdicts_json: Path) -> RerunVerdicts:
    """The verdict file of the rerun, read (empty if it was not written). Verdict kinds are the
    gate's words (perfgate.gate.verdicts, a stage above this one: named here, not imported)."""
    if not verdicts_json.is_file():
        return RerunVerdicts()
    data = json.loads(verdicts_json.read_text(encoding="utf8"))
    out = RerunVerdicts(skipped=data.get("skipped", {}))
    for v in data.get("verdicts", []):
        kind = v["verdict"]
        out.counts[kind] = out.counts.get(kind, 0) + 1
        line = f"{v['case'].split('::')[-1]} {v['metric']}: {v['message']}"
        if kind in ("regression", "budget", "error"):
            out.failing.append(line)
        elif kind == "improvement":
            out.moved.append(line)
    return out


def summary(stages: list[StageResult], out: Path, device: str) -> tuple[str, dict[str, Any]]:
    """The Markdown summary and its data."""
    record = case_lines(out / "record.json")
    rerun = rerun_verdicts(out / "rerun-verdicts.json")
    shares = [r.peak_share for r in record if r.peak_share is not None]
    data = {
        "device": device,
        "passed": all(s.ok for s in stages),
        "stages": [{**asdict(s), "ok": s.ok} for s in stages],
        "record_cases": [asdict(r) for r in record],
        "rerun_verdicts": rerun.counts,
        "rerun_failing": rerun.failing,
        "rerun_moved": rerun.moved,
        "skipped": rerun.skipped,
        "max_peak_share": max(shares) if shares else None,
    }
    lines = [
        f"# gpu-check on {device}: {'PASSED' if data['passed'] else 'FAILED'}",
        "",
        "| stage | exit | wall s | passed | failed | skipped |",
        "|---|---|---|---|---|---|",
    ]
    for s in stages:
        o = s.outcomes
        lines.append(
            f"| {s.name} | {s.rc}{' (cut)' if s.cut else ''} | {s.wall_s:.0f} | {o.get('passed', '-')} | "
            f"{o.get('failed', 0) + o.get('errors', 0) if o else '-'} "
            f"| {o.get('skipped', '-')} |"
        )
    lines.append(f"| total | | {sum(s.wall_s for s in stages):.0f} | | | |")
    if record:
        lines += ["", "Recorded cases (median ms, share of the measured peak of the math each runs):", ""]
        lines += [
            f"- {r.case}: {r.median_ms:.3f} ms, "
            + (
                f"{r.peak_share:.0%} of peak"
                if r.peak_share is not None
                else f"no share ({r.peak_note or 'no FLOPs counted'})"
            )
            + (f"; UNRELIABLE: {r.unreliable}" if r.unreliable else "")
            for r in record
        ]
    if rerun.counts:
        lines += [
            "",
            "Unchanged rerun against the record: " + ", ".join(f"{n} {k}" for k, n in sorted(rerun.counts.items())),
        ]
        lines += [f"- FAILING {f}" for f in rerun.failing]
    if rerun.moved:
        # Not a failure (nothing got slower), but the record is no baseline for these cases: it
        # caught a slower phase of the machine than the rerun (both H100 runs: the sub-2 ms cases
        # read 9-12% faster the second time), and a regression of that size would pass against it.
        lines += [
            "",
            f"Moved on unchanged code ({len(rerun.moved)}): the record read these slower than the rerun, so a "
            "regression of that size passes the latency gate against it; rerun, and record again before gating "
            "on this machine:",
        ]
        lines += [f"- MOVED {m}" for m in rerun.moved]
    if rerun.skipped:
        lines += ["", "Skipped, with their reasons:"] + [
            f"- {case}: {reason}" for case, reason in sorted(rerun.skipped.items())
        ]
    return "\n".join(lines) + "\n", data


def pytest_command(python: str, *args: str) -> list[str]:
    return [python, "-m", "pytest", *args]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--device", default=None, help="cuda or cuda:N (default: cuda); cpu rehearses the flow without a GPU"
    )
    p.add_argument(
        "--model", default="physicsnemo-block", help="the family whose every variant is run (default physicsnemo-block)"
    )
    p.add_argument("--variants", default=None, help="comma-separated variants or globs (default: every variant)")
    p.add_argument("--budget-s", type=float, default=2.0, help="timed seconds per case (default 2)")
    p.add_argument("--skip-tests", action="store_true", help="leave out the harness's tests (stage 3)")
    p.add_argument(
        "--quality",
        action="store_true",
        help="run the GPU gate's quality run (perfgate gpu-quality) instead of doctor, tests, record and rerun",
    )
    p.add_argument(
        "--tier-time",
        metavar="TIER",
        default=None,
        help="time the tier (e.g. pr) twice into one fresh inductor cache, cold then warm, instead of doctor, "
        "tests, record and rerun",
    )
    p.add_argument(
        "--tier-phases",
        default="cold,warm",
        choices=("cold,warm", "cold", "warm"),
        help="--tier-time: which runs (default cold,warm); warm alone reuses OUT/inductor-cache as a cold run "
        "left it, so a lease's time limit can split the two across calls",
    )
    p.add_argument(
        "--stage-limit-s",
        type=float,
        default=None,
        help="interrupt a stage after this many seconds, as Ctrl-C would: its files so far are kept (default: none)",
    )
    p.add_argument("--repeats", type=int, default=None, help="--quality: comparisons per condition (default 4)")
    p.add_argument("--rounds", type=int, default=None, help="--quality: timed rounds per side (default 30)")
    p.add_argument("--cases", default=None, help="--quality: MODEL:SIZE:VARIANT,... (default: gpu-quality's)")
    p.add_argument(
        "--out", default=str(ROOT / ".perfgate" / "gpu-check"), help="output folder (default .perfgate/gpu-check)"
    )
    p.add_argument("pytest_args", nargs="*", help="more arguments for both benchmark runs (after --)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    only_quality = [f"--{k}" for k in ("repeats", "rounds", "cases") if getattr(args, k) is not None]
    if only_quality and not args.quality:
        why = f"{', '.join(only_quality)} apply to --quality only; add --quality or leave them out"
        print(f"gpu-check: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.tier_phases != "cold,warm" and not args.tier_time:
        print("gpu-check: --tier-phases applies to --tier-time only; add --tier-time TIER or leave it out",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    cache = tier_cache(Path(args.out).resolve())
    if args.tier_phases == "warm" and not cache.is_dir():  # a cold run creates it (empty where no case compiles)
        print(f"gpu-check: --tier-phases warm: no {cache}; run --tier-phases cold into the same --out first "
              "(on the same machine)", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    if args.quality and args.tier_time:
        print("gpu-check: --quality and --tier-time are two runs; pick one per call", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.stage_limit_s is not None and args.stage_limit_s <= 0:
        print(
            f"gpu-check: --stage-limit-s {args.stage_limit_s:g}: give seconds above 0, or leave it out", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    import torch

    device = args.device or "cuda"
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu-check: no CUDA device here (torch {torch.__version__}, built for CUDA {torch.version.cuda}; "
            "torch.cuda.is_available() is False): run it on a machine with an NVIDIA GPU, or --device cpu to "
            "rehearse the flow",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    out = _fresh_output(Path(args.out).resolve())
    py = sys.executable
    health = run_stage(
        "health", [py, "-m", "perfgate", "health", "--device", device, "--json", str(out / "health.json")], out
    )
    if args.quality:
        return quality_main(args, py, device, out, health)
    if args.tier_time:
        return tier_main(args, py, device, out, health)
    stages = [health, run_stage("doctor", [py, "-m", "perfgate", "doctor", "--device", device], out)]
    if not args.skip_tests:
        # -n auto when pytest-xdist is installed (asked of the import system, not imported: pytest's own)
        parallel = ["-n", "auto"] if importlib.util.find_spec("xdist") is not None else []
        stages.append(
            run_stage(
                "tests",
                pytest_command(py, "tests", "-q", *parallel, "--junit-xml", str(out / "tests.xml")),
                out,
                junit=out / "tests.xml",
            )
        )
    stages += benchmark_stages(args, py, device, out)
    text, data = summary(stages, out, device)
    return _finish(out, text, data)


def _fresh_output(out: Path) -> Path:
    """The output folder, emptied of a previous run's files and baselines (the record must be this run's own)."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*"):
        if stale.is_file():
            stale.unlink()
    if (out / "baselines").exists():
        shutil.rmtree(out / "baselines")
    return out


def benchmark_stages(args: argparse.Namespace, py: str, device: str, out: Path) -> list[StageResult]:
    """Stages 4 and 5: the family recorded as a baseline in out/baselines, then rerun gated against it."""
    selection = [
        "--perfgate-device",
        device,
        "--perfgate-models",
        args.model,
        "--perfgate-budget-s",
        str(args.budget_s),
        "--perfgate-baselines",
        str(out / "baselines"),
        "-v",
        "-rs",
        *args.pytest_args,
    ]
    if args.variants:
        selection += ["--perfgate-variants", args.variants]
    stages: list[StageResult] = []
    stages.append(
        run_stage(
            "record",
            pytest_command(
                py,
                "benchmarks",
                *selection,
                "--perfgate-record",
                "gpu-check",
                "--perfgate-no-gate",
                "--benchmark-json",
                str(out / "record.json"),
                "--perfgate-verdicts",
                str(out / "record-verdicts.json"),
                "--junit-xml",
                str(out / "record.xml"),
            ),
            out,
            junit=out / "record.xml",
            limit_s=args.stage_limit_s,
        )
    )
    stages.append(
        run_stage(
            "rerun",
            pytest_command(
                py,
                "benchmarks",
                *selection,
                "--benchmark-json",
                str(out / "rerun.json"),
                "--perfgate-verdicts",
                str(out / "rerun-verdicts.json"),
                "--junit-xml",
                str(out / "rerun.xml"),
            ),
            out,
            junit=out / "rerun.xml",
            limit_s=args.stage_limit_s,
        )
    )
    return stages


def _finish(out: Path, text: str, data: dict[str, Any]) -> int:
    files.write_text(out / "summary.md", text)
    files.write_json(out / "summary.json", data)
    print("\n" + text + f"\ngpu-check: everything is in {out}")
    return EXIT_OK if data["passed"] else EXIT_FAILED


def quality_main(args: argparse.Namespace, py: str, device: str, out: Path, health: StageResult) -> int:
    """`--quality`: the health check, then `perfgate gpu-quality` into out/quality; the summary
    holds both stages and the detection table."""
    command = [py, "-m", "perfgate", "gpu-quality", "--device", device, "--out", str(out / "quality")]
    for flag, value in (("--repeats", args.repeats), ("--rounds", args.rounds), ("--cases", args.cases)):
        if value is not None:
            command += [flag, str(value)]
    command += args.pytest_args  # after --: more gpu-quality options (--passes, --profile-steps, --sizes)
    stages = [health, run_stage("quality", command, out, limit_s=args.stage_limit_s)]
    text, data = summary(stages, out, device)
    table = out / "quality" / "quality.md"
    if table.is_file():
        text += "\n" + table.read_text(encoding="utf8")
    data["quality"] = str(table.relative_to(out)) if table.is_file() else None
    return _finish(out, text, data)


def tier_cache(out: Path) -> Path:
    """The inductor cache a `--tier-time` cold call fills and a warm call (maybe a later one) reuses."""
    return out / "inductor-cache"


def tier_main(args: argparse.Namespace, py: str, device: str, out: Path, health: StageResult) -> int:
    """`--tier-time TIER`: the tier run twice, ungated, into one inductor cache emptied first: what a
    pull request's benchmark job costs on this runner with a cold and with a warm cache.
    `--tier-phases warm` runs the second alone on the cache a `cold` call left in the same folder."""
    cache = tier_cache(out)
    phases = args.tier_phases.split(",")
    if phases != ["warm"]:  # warm alone: the cache a cold call left (main checked it is there)
        shutil.rmtree(cache, ignore_errors=True)
    selection = [
        "benchmarks",
        "--perfgate-device",
        device,
        "--perfgate-tier",
        args.tier_time,
        "--perfgate-no-gate",
        "--perfgate-inductor-cache",
        str(cache),
        "-v",
        "-rs",
        *args.pytest_args,
    ]
    stages = [health]
    for phase in phases:
        stem = out / f"tier-{phase}"
        files_of_run = ["--benchmark-json", f"{stem}.json", "--junit-xml", f"{stem}.xml"]
        command = pytest_command(py, *selection, *files_of_run, "--perfgate-verdicts", f"{stem}-verdicts.json")
        stages.append(run_stage(f"tier-{phase}", command, out, junit=Path(f"{stem}.xml"), limit_s=args.stage_limit_s))
    text, data = summary(stages, out, device)
    seconds = {p: junit_seconds(out / f"tier-{p}.xml") for p in phases}
    names = dict.fromkeys(c for p in phases for c in seconds[p])
    cases = {c: {f"{p}_s": seconds[p].get(c) for p in phases} for c in names}
    totals = {p: st.wall_s for p, st in zip(phases, stages[1:], strict=True)}
    data["tier"] = {
        "name": args.tier_time,
        **{f"{p}_s": t for p, t in totals.items()},
        "cut": [s.name for s in stages if s.cut],
        "cases": cases,
    }
    lines = [
        "",
        f"Tier {args.tier_time}: {', '.join(f'{t:.0f} s {p}' for p, t in totals.items())} (each pytest run whole, "
        "collection and start-up included); per case, seconds from the JUnit XML:",
        "",
        "| case | " + " | ".join(f"{p} s" for p in phases) + " |",
        "|---" * (len(phases) + 1) + "|",
    ]
    lines += [
        f"| {c} | " + " | ".join(_s(t[f"{p}_s"]) for p in phases) + " |"
        for c, t in sorted(cases.items(), key=lambda kv: -(kv[1][f"{phases[0]}_s"] or 0))
    ]
    if data["tier"]["cut"]:
        lines += ["", f"Cut at --stage-limit-s {args.stage_limit_s:g}: {', '.join(data['tier']['cut'])}: "
                  "the cases not listed there never ran."]  # fmt: skip
    return _finish(out, text + "\n".join(lines) + "\n", data)


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


if __name__ == "__main__":
    sys.exit(main())
