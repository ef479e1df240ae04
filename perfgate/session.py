"""State of one benchmark session, without pytest: selection, baselines, in-run speedups, verdicts.

The pytest plugin creates one `Session` and asks it for cases, results and verdicts; the same
object serves a script that benchmarks without pytest.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from perfgate import baseline as baseline_store
from perfgate import gate, profile_run, telemetry
from perfgate.device import is_cpu
from perfgate.distributed import DATA_PARALLEL_STEPS
from perfgate.fingerprint import fingerprint, fingerprint_id
from perfgate.policy import Policy
from perfgate.runner import Case, CaseResult, RunOptions, run_case
from perfgate.tiers import Tier
from perfgate.variants import VARIANTS, Env
from perfgate.workload import MODELS, NO_MODELS, default_size, sizes


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def select(names: Iterable[str], patterns: list[str], what: str) -> list[str]:
    """Names matching any glob, in registry order; a pattern that matches nothing is an error."""
    names = list(names)
    if not patterns:
        return names
    for p in patterns:
        if not fnmatch.filter(names, p):
            raise ValueError(f"--perfgate-{what} {p!r} matches no {what[:-1]}; known: {', '.join(names)}")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def expand_cases(
    device: str,
    *,
    models: list[str] | None = None,
    sizes_: list[str] | None = None,
    variants: list[str] | None = None,
    case_ids: list[str] | None = None,
) -> list[Case]:
    """Model x size x option sweep x variant, the baseline variant first so speedups are in-run;
    `case_ids` (globs on case ids) narrows the product further."""
    if not MODELS:
        raise ValueError(NO_MODELS)
    device_type = torch.device(device).type
    cases = []
    variant_names = select(VARIANTS, variants or [], "variants")
    if "baseline" in variant_names:
        variant_names.remove("baseline")
        variant_names.insert(0, "baseline")
    single_process = int(os.environ.get("WORLD_SIZE", "1")) == 1
    for name in select(MODELS, models or [], "models"):
        spec = MODELS[name]
        if not models and single_process and spec.step in DATA_PARALLEL_STEPS:
            continue  # data-parallel workloads duplicate their single-process twins outside torchrun
        known = sizes(spec)
        chosen = [s for s in (sizes_ or [default_size(spec, device_type)]) if s in known]
        for s in sizes_ or []:
            if not any(s in sizes(MODELS[m]) for m in select(MODELS, models or [], "models")):
                raise ValueError(f"--perfgate-sizes {s!r} is no size of the selected models")
        sweep = [[(k, v) for v in vals] for k, vals in spec.sweep.items()]
        for size, combo in itertools.product(chosen, itertools.product(*sweep)):
            opts = tuple((k, v) for k, v in combo if v is not None)
            for v in variant_names:
                cases.append(Case(model=name, size=size, variant=v, device=device, options=opts))
    for p in case_ids or []:
        if not any(fnmatch.fnmatchcase(c.id, p) for c in cases):
            raise ValueError(f"the tier's case glob {p!r} matches no case of this selection on {device}")
    if case_ids:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in case_ids)]
    return cases


@dataclass(kw_only=True)
class Session:
    device: str
    baselines_root: Path
    policy: Policy = Policy()
    run_options: RunOptions = field(default_factory=RunOptions)
    gate_enabled: bool = True
    fail_on_improvement: bool = False
    results: dict[str, CaseResult] = field(default_factory=dict)
    verdicts: list[gate.Verdict] = field(default_factory=list)
    skips: dict[str, str] = field(default_factory=dict)
    trace: str = "off"  # evidence on failure: "off", "all" cases or only "regressed" ones
    evidence_dir: Path = Path(".perfgate/evidence")
    # The selection and the outputs, set by the pytest plugin (and its hook implementations).
    tier: Tier | None = None
    default_variants: list[str] | None = None  # the tier's, else [tool.perfgate] variants; None: all
    cases: list[Case] = field(default_factory=list)
    record_label: str | None = None  # record the run as a baseline under this label; None: do not
    verdict_file: Path | None = None  # where the verdicts JSON is written at the end; None: nowhere
    recorded: Path | None = None  # the baseline file this run recorded
    record_refused: str | None = None  # why this run was not recorded although asked to

    def __post_init__(self) -> None:
        self.fingerprint = fingerprint(self.device)
        self.fingerprint_id = fingerprint_id(self.fingerprint)
        self.env = Env.detect(self.device)
        self._baseline: tuple[Path, dict[str, Any]] | None | bool = False  # False: not loaded yet
        self._eager_median: dict[tuple, tuple[str, float]] = {}  # group -> (basis, eager value)

    @property
    def baseline_dir(self) -> Path:
        return baseline_store.baseline_dir(self.baselines_root, self.fingerprint_id)

    def load_baseline(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest baseline for this fingerprint, validated (BaselineError if it is broken)."""
        if self._baseline is False:
            self._baseline = baseline_store.latest(self.baseline_dir, self.fingerprint)
        return self._baseline or None

    def baseline_entry(self, fullname: str) -> dict[str, Any] | None:
        found = self.load_baseline()
        return baseline_store.by_name(found[1]).get(fullname) if found else None

    def no_baseline_notice(self) -> str:
        return (
            f"perfgate: no baseline recorded for this machine's fingerprint {self.fingerprint_id} "
            f"(looked in {self.baseline_dir}); nothing is compared with another machine's numbers. "
            f"Record one with: pytest benchmarks --perfgate-record"
        )

    def _group(self, case: Case) -> tuple:
        return (case.model, case.size, case.options, case.device)

    def run(self, case: Case, progress: Callable[[str], None] | None = None) -> CaseResult:
        """Measure a case, with its speedup over the eager baseline of this run when there is one."""
        result = run_case(case, self.run_options, progress=progress)
        info = result.extra_info
        info["contention_cores"] = result.measurement.contention_cores
        settings = self.policy.settings(case.model, case.variant, "latency", case.device)
        problems = []
        if is_cpu(case.device) and result.measurement.contention_cores > settings.contention_max:
            problems.append(
                f"other processes used {result.measurement.contention_cores:.2f} cores during the measurement "
                f"(> {settings.contention_max:g}): timings are not trustworthy"
            )
        if info.get("telemetry"):
            # Throttled clocks or other processes on the GPU make the sample unreliable too.
            problems.append(telemetry.unreliable_reason(info["telemetry"]))
        if any(problems):
            info["unreliable"] = "; ".join(p for p in problems if p)
        # Eager and variant run minutes apart; on a CPU their reference-normalised medians cancel
        # the machine's drift in between, so the speedup compares code, not moments.
        basis = "normalised_median" if "normalised_median" in info else "median_ms"
        if case.variant == "baseline":
            if info.get("unreliable"):
                self._eager_median.pop(self._group(case), None)  # no speedups from a contended eager run
            else:
                self._eager_median[self._group(case)] = (basis, info[basis])
        eager = self._eager_median.get(self._group(case))
        if eager and eager[0] == basis:
            info["speedup"] = eager[1] / info[basis]
            info["speedup_basis"] = basis
        return result

    def judge(self, fullname: str, entry: dict[str, Any]) -> list[gate.Verdict]:
        """Gate one finished benchmark entry against the baseline and the absolute budgets."""
        hardware = self.fingerprint.get("gpu_name") or self.fingerprint.get("cpu_model") or ""
        base = self.baseline_entry(fullname) if self.gate_enabled else None
        verdicts = gate.compare_case(entry, base, self.policy) if self.gate_enabled else []
        verdicts += gate.judge_budgets(entry, self.policy, hardware)
        return verdicts

    def measure_and_judge(
        self, case: Case, fullname: str, progress: Callable[[str], None] | None = None
    ) -> tuple[CaseResult, list[gate.Verdict]]:
        """Run a case and gate it; a suspected latency regression is re-measured (a bounded number
        of times) before it stands, since one noisy neighbour can fake a slowdown. By default
        (`remeasure_pooled`) the suspect run and its re-measurements are judged once, pooled: on
        the development VM that caught a 10% slowdown 49 and 47 times in 50 (two runs) against 45
        and 43 when every re-measurement had to regress on its own (docs/gate-quality.md)."""
        settings = self.policy.settings(case.model, case.variant, "latency", case.device)
        result = self.run(case, progress)
        verdicts = self.judge(fullname, {"fullname": fullname, "extra_info": result.extra_info})

        def suspected() -> bool:
            return any(v.metric == "latency" and v.verdict == gate.REGRESSION for v in verdicts)

        def remeasure(attempt: int) -> CaseResult:
            if progress:
                progress(f"suspected latency regression; re-measuring ({attempt + 1}/{settings.remeasure})")
            result.step = None  # two copies of a large model need not fit on the device at once
            result.measurement.output = None
            again = self.run(case, progress)
            again.extra_info["remeasured"] = attempt + 1
            return again

        if suspected() and settings.remeasure and settings.remeasure_pooled:
            infos = [result.extra_info]
            for attempt in range(settings.remeasure):
                result = remeasure(attempt)
                infos.append(result.extra_info)
            # Kept in the result, so `perfgate compare` on the JSON judges what the session judged.
            result.extra_info["pooled"] = {"runs": len(infos), **gate.pool_entries(infos)}
            verdicts = [v if v.metric != "latency" else _pooled_note(v, len(infos))
                        for v in self.judge(fullname, {"fullname": fullname, "extra_info": result.extra_info})]
        elif settings.remeasure:
            for attempt in range(settings.remeasure):
                if not suspected():
                    break
                result = remeasure(attempt)
                verdicts = self.judge(fullname, {"fullname": fullname, "extra_info": result.extra_info})
        verdicts += [
            gate.Verdict(case=fullname, metric="accuracy", verdict=gate.REGRESSION,
                         current=result.extra_info["accuracy"].get("rel_l2"), message=msg)
            for msg in result.accuracy_violations
        ]
        if self.trace == "all" or (self.trace == "regressed" and self.failing(verdicts, case)):
            verdicts = self.attach_evidence(case, fullname, result, verdicts, progress)
        result.step = None  # the step holds the model: do not keep it past the case
        result.measurement.output = None  # device tensors would count in later cases' absolute peaks
        self.results[fullname] = result
        self.verdicts.extend(verdicts)
        return result, verdicts

    def attach_evidence(
        self, case: Case, fullname: str, result: CaseResult, verdicts: list[gate.Verdict], progress: Callable[[str], None] | None
    ) -> list[gate.Verdict]:
        """A profiler trace (and on CUDA a memory snapshot) of the case, named by its failing verdicts."""
        if result.step is None:
            return verdicts
        if progress:
            progress("writing a profiler trace as evidence")
        evidence = profile_run.capture_evidence(result.step, case.device, self.evidence_dir / case.id)
        evidence["reproduce"] = profile_run.reproduce_commands(case, nodeid=fullname)
        result.extra_info["evidence"] = evidence
        return [profile_run.with_evidence(v, evidence) if v.verdict in gate.FAILING else v for v in verdicts]

    def failing(self, verdicts: list[gate.Verdict], case: Case) -> list[gate.Verdict]:
        ratchet = self.fail_on_improvement or self.policy.settings(case.model, case.variant, "latency", case.device).fail_on_improvement
        return gate.failing(verdicts, fail_on_improvement=ratchet)


def _pooled_note(v: gate.Verdict, runs: int) -> gate.Verdict:
    from dataclasses import replace

    note = f"{runs} runs pooled after a suspected regression"
    return replace(v, message=f"{v.message}; {note}" if v.message else note)
