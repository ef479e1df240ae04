"""The gate's quality on real suite cases: same-job A/B against the stored-baseline gate, side by side.

Per comparison and condition (no slowdown, or K% injected by `perfgate.quality.inject`, in the model
alone or in `F.linear`, an op everything shares):

- same-job A/B as `perfgate ab --mode auto` would run it: a slowdown in the model alone is a
  model-file change, so interleaved mode (fresh processes of this checkout each timing the base and
  the head model of every case round by round, the head's model doing K% more work); a slowdown of
  an op everything shares is a change outside the model files (the harness, torch), so processes
  mode (whole revisions in alternating fresh processes, the head's processes slowed), which is the
  only mode that can see it;
- the stored-baseline gate, as a pull request meets it: a baseline recorded by one `pytest` process,
  then a second process with the slowdown, gated by the session against it (this repository's
  policy, its re-measurement included), and the same two runs judged again at the default policy
  (5%, no re-measurement: what the first judgement before a re-measurement would be).

With `sized` slowdowns (`--sized-by`), the conditions are instead those the instruction gate was
measured on (perfgate.counts.quality): `F.linear` or SDPA done twice every Nth call, or a leaf module
called again after every Nth step, sized per case to grow the step by 1-5% of its instructions. The
op ones run in processes mode (a change outside the model files), the leaf ones interleaved.

Slowdowns round-robin, every process fresh, every verdict and wall time kept (`--json`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.ab import interleave
from perfgate.ab import run as ab_run
from perfgate.ab.job import Measured
from perfgate.counts.suite import NO_COUNTS_ENV
from perfgate.gate.policy import Policy
from perfgate.quality.inject import SIZED_ENV
from perfgate.results import ResultFileError, benchmarks, read_benchmark_json

# The time gates alone: no instruction pass in the experiment's pytest processes, which a repository's
# [tool.perfgate.counts] would otherwise start in each (minutes of valgrind per comparison; the
# instruction gate's own quality is perfgate.counts.quality's).
TIME_ONLY = {NO_COUNTS_ENV: "1"}


@dataclasses.dataclass(frozen=True)
class Condition:
    """One slowdown (or none) as both gates meet it."""

    kind: str  # local / shared (sized by timings), or linear / sdpa / local sized by instructions
    slowdown_pct: float  # the target; 0 is unchanged code
    sized: str | None = None  # the {case id: spec} file of a slowdown sized by instructions

    @property
    def mode(self) -> str:
        """Same-job A/B mode: interleaved for the model's own code, processes for an op it shares."""
        return "interleaved" if self.kind == "local" else "processes"

    def head_env(self) -> dict[str, str]:
        """What slows the A/B's head: its model in the interleaved worker, or its whole processes."""
        if not self.slowdown_pct:
            return {}
        if self.sized:
            return {interleave.INJECT_HEAD_SIZED if self.mode == "interleaved" else SIZED_ENV: self.sized}
        if self.mode == "interleaved":
            return {interleave.INJECT_HEAD: f"local:{self.slowdown_pct:g}"}
        return {"PERFGATE_INJECT": f"shared:{self.slowdown_pct:g}"}

    def stored_env(self) -> dict[str, str]:
        """What slows the stored gate's second run (every process loads the injection plugin)."""
        if not self.slowdown_pct:
            return {}
        if self.sized:
            return {SIZED_ENV: self.sized}
        return {"PERFGATE_INJECT": f"{self.kind}:{self.slowdown_pct:g}"}


CONDITIONS = (
    Condition("local", 0.0),
    Condition("local", 2.0),
    Condition("local", 5.0),
    Condition("local", 10.0),
    Condition("shared", 2.0),
    Condition("shared", 5.0),
    Condition("shared", 10.0),
)


def sized_conditions(counts_jsonl: Path, folder: Path) -> list[Condition]:
    """The slowdowns a perfgate.counts.quality run sized (its lines with `specs`), each written to
    `folder` as the {case id: spec} file the injection reads, after unchanged code."""
    out = [Condition("local", 0.0)]
    for n, line in enumerate(Path(counts_jsonl).read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"{counts_jsonl}:{n}: not a JSON line; give perfgate count-quality's --out") from None
        if not row.get("specs"):
            continue
        kind, _, target = str(row["process"]).partition(":")
        specs = {case: spec for case, spec in row["specs"].items() if "skip" not in spec}
        path = Path(folder) / f"{kind}-{target}.json"
        path.write_text(json.dumps(specs, indent=1))
        out.append(Condition(kind, float(target), sized=str(path)))
    if len(out) == 1:
        raise ValueError(f"{counts_jsonl}: no sized slowdowns (lines with specs); run perfgate count-quality first")
    return out


def _latency(verdicts: Sequence[gate.Verdict]) -> dict[str, str]:
    return {v.case.split("[", 1)[1].rstrip("]"): v.verdict for v in verdicts if v.metric == "latency"}


def interleaved(
    repo: Path, cases: Sequence[str], cond: Condition, policy: Policy, *, max_processes: int
) -> dict[str, Any]:
    """One interleaved A/B comparison of `cases`, base = head = this checkout, the head slowed."""
    side = ab_run.working_tree(repo)
    t0 = time.perf_counter()
    res = ab_run.run_interleaved(side, side, cases, policy, max_processes=max_processes, env=cond.head_env())
    estimates = {c: [r.ratio for r in rows if isinstance(r, Measured)] for c, rows in res.interleaved.items()}
    return {
        "mode": "interleaved",
        "verdicts": _latency(res.verdicts),
        "processes": res.processes,
        "wall_s": time.perf_counter() - t0,
        "ratios": estimates,
    }


def processes(
    repo: Path, cases: Sequence[str], cond: Condition, policy: Policy, *, max_pairs: int, device: str
) -> dict[str, Any]:
    """One processes-mode A/B comparison of `cases`, base = head = this checkout, every head process
    slowed by the condition (`-p perfgate.quality.inject`)."""
    head = ab_run.working_tree(repo)
    base = dataclasses.replace(head, name="base")  # the same checkout: the injection is the only change
    selection = ["--perfgate-device", device]
    inject = cond.head_env()

    def measure(s: ab_run.Side, ids: Sequence[str]) -> ab_run.SideRun:
        if s is head:
            return ab_run.measure(s, ids, [*selection, "-p", "perfgate.quality.inject"], env={**TIME_ONLY, **inject})
        return ab_run.measure(s, ids, selection, env=TIME_ONLY)

    t0 = time.perf_counter()
    res = ab_run.run_ab(base, head, cases, policy, measure_fn=measure, max_pairs=max_pairs)
    estimates = {
        c: [h.median_ms / b.median_ms for b, h in ((p.base, p.head) for p in pairs) if b and h]
        for c, pairs in res.pairs.items()
    }
    return {
        "mode": "processes",
        "verdicts": _latency(res.verdicts),
        "processes": res.processes,
        "wall_s": time.perf_counter() - t0,
        "ratios": estimates,
    }


def _pytest(repo: Path, nodes: Sequence[str], extra: Sequence[str], env: dict[str, str]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *nodes,
        "-q",
        "-p",
        "no:cacheprovider",
        "--perfgate-no-flops",
        "--perfgate-fail-unjudged",
        "no",
        *extra,
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFGATE_INJECT", "CI"))}
    subprocess.run(cmd, cwd=repo, env={**full_env, **TIME_ONLY, **env}, capture_output=True, text=True, timeout=3600)


def stored(repo: Path, cases: Sequence[str], cond: Condition, *, device: str) -> dict[str, Any]:
    """One stored-baseline comparison: record in one process, gate the slowed run in the next."""
    nodes = [f"{ab_run.TEST_FILE}::test_step[{c}]" for c in cases]
    with tempfile.TemporaryDirectory(prefix="perfgate-gq-") as tmp:
        t0 = time.perf_counter()
        common = ["--perfgate-device", device, "--perfgate-baselines", f"{tmp}/baselines"]
        _pytest(
            repo,
            nodes,
            [
                *common,
                "--perfgate-record",
                "--perfgate-no-gate",
                "--benchmark-json",
                f"{tmp}/base.json",
                "--perfgate-verdicts",
                f"{tmp}/v0.json",
            ],
            {},
        )
        inject = cond.stored_env()
        _pytest(
            repo,
            nodes,
            [
                *common,
                "-p",
                "perfgate.quality.inject",
                "--benchmark-json",
                f"{tmp}/cur.json",
                "--perfgate-verdicts",
                f"{tmp}/v1.json",
            ],
            inject,
        )
        wall = time.perf_counter() - t0
        try:
            session = json.loads(Path(f"{tmp}/v1.json").read_text())["verdicts"]
            base = {b.name: b.record for b in benchmarks(read_benchmark_json(f"{tmp}/base.json"))}
            cur = {b.name: b.record for b in benchmarks(read_benchmark_json(f"{tmp}/cur.json"))}
        except (OSError, KeyError, json.JSONDecodeError, ResultFileError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "wall_s": wall}
    repo_policy = {v["case"].split("[", 1)[1].rstrip("]"): v["verdict"] for v in session if v["metric"] == "latency"}
    default = {}
    for name, rec in cur.items():
        if name in base:
            d = gate.decide(name, [rec], base[name], Policy())  # the first judgement, before any re-measurement
            default |= _latency(d.verdicts)
    return {"repo_policy": repo_policy, "default_policy": default, "wall_s": wall}


def run(
    repo: Path,
    cases: Sequence[str],
    *,
    comparisons: dict[Condition, int],
    device: str,
    max_processes: int = 6,
    max_pairs: int = 8,
    out: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Comparisons round-robin over the conditions until each has its count; `out` rewritten after each."""
    from perfgate.gate import policy as policy_mod

    policy = Policy(defaults=policy_mod.GateSettings())  # the default rules: what the experiment measures
    done: list[dict[str, Any]] = []
    left = dict(comparisons)
    while any(left.values()):
        for cond, n in list(left.items()):
            if not n:
                continue
            row = {
                "kind": cond.kind,
                "slowdown_pct": cond.slowdown_pct,
                "sized": bool(cond.sized),
                "interleaved": (
                    interleaved(repo, cases, cond, policy, max_processes=max_processes)
                    if cond.mode == "interleaved"
                    else processes(repo, cases, cond, policy, max_pairs=max_pairs, device=device)
                ),
                "stored": stored(repo, cases, cond, device=device),
            }
            done.append(row)
            left[cond] -= 1
            if progress:
                i, s = row["interleaved"], row["stored"]
                progress(
                    f"[{len(done)}] {cond.kind} +{cond.slowdown_pct:g}%: {i['mode']} {i['verdicts']} "
                    f"({i['processes']} processes, {i['wall_s']:.0f} s); "
                    f"stored {s.get('repo_policy')} / default {s.get('default_policy')} ({s['wall_s']:.0f} s)"
                )
            if out is not None:
                from perfgate import files

                files.write_json(out, {"cases": list(cases), "device": device, "comparisons": done})
    return done


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rate:
    """One condition under one rule: regressions of the judged case comparisons, and wall time."""

    kind: str  # the injected slowdown's kind (local, op, ...)
    mode: str  # the A/B modes that measured it ("" for the stored gate)
    slowdown_pct: float
    rule: str
    alarms: int
    n: int  # judged case comparisons
    unreliable: int
    wall_s_per_comparison: float


def rates(done: Sequence[dict[str, Any]]) -> list[Rate]:
    """Per condition and rule: regressions / judged case comparisons, and wall time per comparison."""
    out = []
    for kind, k in dict.fromkeys((r["kind"], r["slowdown_pct"]) for r in done):  # in the order first measured
        rows = [r for r in done if r["kind"] == kind and r["slowdown_pct"] == k]
        for rule, get in (
            ("same-job A/B", lambda r: r["interleaved"]["verdicts"]),
            ("stored, repo policy", lambda r: r["stored"].get("repo_policy", {})),
            ("stored, default 5% (first judgement)", lambda r: r["stored"].get("default_policy", {})),
        ):
            verdicts = [v for r in rows for v in get(r).values()]
            judged = [v for v in verdicts if v != gate.UNRELIABLE]
            wall = [r["interleaved" if rule.startswith("same") else "stored"]["wall_s"] for r in rows]
            modes = {r["interleaved"].get("mode", "interleaved") for r in rows} if rule.startswith("same") else set()
            out.append(
                Rate(
                    kind=kind,
                    mode="/".join(sorted(modes)),
                    slowdown_pct=k,
                    rule=rule,
                    alarms=sum(v == gate.REGRESSION for v in judged),
                    n=len(judged),
                    unreliable=len(verdicts) - len(judged),
                    wall_s_per_comparison=sum(wall) / len(wall),
                )
            )
    return out
