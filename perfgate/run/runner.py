"""The case runner: `Runner.run(case, fullname)` measures one case, judges it against its baseline
and returns a frozen `CaseOutcome`; no pytest. `Host` is what this machine is for the run."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.cases.conversions import Env, VariantError
from perfgate.cases.runner import Case, CaseResult, RunOptions, run_case
from perfgate.cases.workload import CheckpointError
from perfgate.counts import suite as counts_suite
from perfgate.gate import store as baseline_store
from perfgate.gate.known_defects import this_host
from perfgate.measure.fingerprint import fingerprint, fingerprint_id
from perfgate.profile.evidence import capture_evidence, reproduce_commands, with_evidence
from perfgate.record import CaseRecord, speedup, speedup_basis
from perfgate.run import timeout
from perfgate.run.config import RunConfig
from perfgate.run.outcome import CaseOutcome

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Host:
    """What this machine is for a run, derived once from its configuration: the fingerprint that
    keys its baselines, the variants it can run (`env`) and those baselines (read on first use)."""

    device: str
    fingerprint: dict[str, Any]
    fingerprint_id: str
    env: Env
    baseline_dir: Path
    baselines: baseline_store.Baselines

    @classmethod
    def detect(cls, config: RunConfig) -> Host:
        fp = fingerprint(config.device)
        fid = fingerprint_id(fp)
        folder = baseline_store.baseline_dir(config.baselines_root, fid)
        return cls(
            device=config.device,
            fingerprint=fp,
            fingerprint_id=fid,
            env=Env.detect(config.device),
            baseline_dir=folder,
            baselines=baseline_store.Baselines(folder, fp),
        )

    @property
    def hardware(self) -> str:
        """What budgets match on: the GPU name, or the CPU model."""
        return self.fingerprint.get("gpu_name") or self.fingerprint.get("cpu_model") or ""

    def load_baseline(self) -> baseline_store.Baselines | None:
        """This fingerprint's baselines, the newest file validated now (BaselineError if it is
        broken); None when none was recorded."""
        self.baselines.check_newest()
        return self.baselines if self.baselines.files else None

    def baseline_record(self, fullname: str) -> tuple[CaseRecord, Path] | None:
        """The case's record in the newest baseline that holds it, and that file."""
        found = self.baselines.entry(fullname)
        return (found[1].record, found[0]) if found else None

    def missing_baseline_notice(self) -> str | None:
        """The notice when no baseline was recorded for this fingerprint; None when one was."""
        if self.load_baseline() is not None:
            return None
        return (
            f"perfgate: no baseline recorded for this machine's fingerprint {self.fingerprint_id} "
            f"(looked in {self.baseline_dir}); nothing is compared with another machine's numbers. "
            f"Record one with: pytest benchmarks --perfgate-record"
        )


def _group(case: Case) -> tuple:
    return (case.model, case.size, case.options, case.device)


class Runner:
    """Runs cases one after another under one configuration. What it keeps between cases is the
    speedups' basis only: each model group's eager record of this run (later variants divide by it)."""

    def __init__(self, *, config: RunConfig, host: Host, counts: counts_suite.SessionCounts | None = None) -> None:
        self.config, self.host, self.counts = config, host, counts
        self._eager: dict[tuple, CaseRecord] = {}  # group -> this run's reliable eager record
        self._eager_unreliable: set[tuple] = set()  # groups whose eager run was unreliable: no speedups
        self._earlier: dict[str, list[CaseRecord]] | None = None  # the earlier passes' records, read once

    def run(self, case: Case, fullname: str, progress: Progress | None = None) -> CaseOutcome:
        """Measure and judge the case within its time limit. A variant this machine cannot run is
        skipped; a case that fails to build or run (a timeout, out of memory, any error) gets an
        error verdict saying why. A broken baseline file (BaselineError) is the run's, not the case's:
        it is raised."""
        try:
            with timeout.limit(self.config.case_timeout_s):
                return self._measure_and_judge(case, fullname, progress)
        except VariantError as exc:
            return CaseOutcome(case=case, fullname=fullname, skipped=str(exc))
        except baseline_store.BaselineError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model that fails to build or run is this case's failure, not the run's
            message, trace = _error_message(exc, case), traceback.format_exc()
        verdict = gate.Verdict(case=fullname, metric="run", verdict=gate.ERROR, message=message)
        return CaseOutcome(
            case=case,
            fullname=fullname,
            verdicts=(verdict,),
            failing=(verdict,),
            error=message,
            traceback=trace,
        )

    def measure(self, case: Case, progress: Progress | None = None) -> CaseResult:
        """Measure a case: its reliability as the gate sees it, and its speedup over the eager
        baseline of this run when there is one."""
        result = run_case(case, self.case_options(case), progress=progress)
        rec = counts_suite.annotate(self.counts, case, result.record, result.step)
        settings = self.config.policy.settings(case.model, case.variant, "latency", case.device)
        rec = replace(rec, unreliable=gate.unreliable_reason(rec, settings))
        group = _group(case)
        eager_now = case.variant == "baseline" and not rec.unreliable
        if case.variant == "baseline":
            if rec.unreliable:
                self._eager.pop(group, None)  # no speedups from a contended eager run
                self._eager_unreliable.add(group)
            else:
                self._eager_unreliable.discard(group)
        rec = replace(rec, **self._speedup_fields(group, rec if eager_now else self._eager.get(group), rec))
        if eager_now:
            self._eager[group] = rec  # the finished record: later cases of the group divide by it
        result.record = rec
        return result

    def _speedup_fields(self, group: tuple, eager: CaseRecord | None, rec: CaseRecord) -> dict[str, Any]:
        """The case's speedup over this run's eager record of its group, or the note saying why none."""
        basis = speedup_basis(rec)  # the one rule (perfgate.record.speedup)
        if eager and speedup_basis(eager) == basis:
            return {"speedup": speedup(eager, rec, basis), "speedup_basis": basis}
        if group in self._eager_unreliable:
            return {"speedup_note": "the eager baseline of this run was unreliable (its verdict says why)"}
        if eager:
            return {
                "speedup_note": (
                    f"the eager baseline was timed as {speedup_basis(eager)}, this case as {basis}: not comparable"
                )
            }
        return {"speedup_note": "no eager baseline of this model ran before it in this run"}

    def case_options(self, case: Case) -> RunOptions:
        """The run options for one case: at least as many rounds as its real-time budgets need to be
        judged (a p90 budget: MLPerf LoadGen's 64 samples), whatever the stop rule would stop at."""
        need = gate.budget_min_rounds(self.config.policy, case.model, case.size, case.variant, self.host.hardware)
        stop = self.config.run_options.stop
        if need <= stop.min_rounds:
            return self.config.run_options
        return replace(
            self.config.run_options, stop=replace(stop, min_rounds=need, max_rounds=max(stop.max_rounds, need))
        )

    def _measure_and_judge(self, case: Case, fullname: str, progress: Progress | None) -> CaseOutcome:
        """Run a case and gate it, re-measuring while the gate asks to (`gate.decide`)."""
        config, judges = self.config, self.config.judges
        t0 = time.perf_counter()
        found = self.host.baseline_record(fullname) if config.gate_enabled else None
        baseline = counts_suite.with_portable(self.counts, case.id, found[0] if found else None)
        result = self.measure(case, progress)
        runs: list[CaseRecord] = [result.record]
        verdicts: list[gate.Verdict] = []
        while config.gate_enabled:
            decision = gate.decide(fullname, runs, baseline, config.policy)
            if not decision.remeasure or not judges("latency"):
                result.record = decision.record
                # Why a case was not judged (no baseline, unreliable) stays visible whatever is judged.
                kept = [
                    v for v in decision.verdicts if judges(v.metric) or v.verdict in (gate.NO_BASELINE, gate.UNRELIABLE)
                ]
                verdicts = [replace(v, baseline_file=str(found[1])) for v in kept] if found else kept
                break
            if progress:
                progress(f"suspected latency regression; re-measuring ({len(runs)} run(s) so far)")
            _release(result)  # two copies of a large model need not fit on the device at once
            result = self.measure(case, progress)
            result.record = replace(result.record, remeasured=len(runs))
            runs.append(result.record)
        if config.earlier_passes:
            result = self.with_pass_noise(case, fullname, result, progress)
        if config.gate_enabled and found is None:  # no host baseline: the counts may still have a portable one
            s = config.policy.settings(case.model, case.variant, "instructions", case.device)
            verdicts += counts_suite.portable_verdicts(self.counts, case.id, fullname, result.record, s)
        verdicts += [
            v
            for v in gate.absolute_checks(
                fullname,
                result.record,
                config.policy,
                self.host.hardware,
                fail_on_graph_break=config.fail_on_graph_break,
            )
            if judges(v.metric)
        ]
        if config.policy.known_defects:  # an upstream defect's failure is named, not failed on
            verdicts = gate.explain_known_defects(
                case.id, result.record, verdicts, config.policy.known_defects, this_host(), judged=judges
            )
        if config.trace == "all" or (config.trace == "regressed" and self._failing(verdicts, case)):
            verdicts = self._attach_evidence(case, fullname, result, verdicts, progress)
        record = replace(result.record, case_wall_s=time.perf_counter() - t0)
        _release(result)  # the step holds the model, the output device tensors: not kept past the case
        return CaseOutcome(
            case=case,
            fullname=fullname,
            record=record,
            verdicts=tuple(verdicts),
            failing=tuple(self._failing(verdicts, case)),
        )

    def _failing(self, verdicts: list[gate.Verdict], case: Case) -> list[gate.Verdict]:
        ratchet = (
            self.config.fail_on_improvement
            or self.config.policy.settings(case.model, case.variant, "latency", case.device).fail_on_improvement
        )
        return gate.failing(verdicts, fail_on_improvement=ratchet)

    def _earlier_records(self) -> dict[str, list[CaseRecord]]:
        """fullname -> the records of the earlier recording passes (their result files, read once)."""
        if self._earlier is None:
            from perfgate.results import benchmarks, read_benchmark_json

            earlier: dict[str, list[CaseRecord]] = {}
            for path in self.config.earlier_passes:  # a file that cannot be read fails every case, not the first only
                for b in benchmarks(read_benchmark_json(path)):
                    earlier.setdefault(b.fullname, []).append(b.record)
            self._earlier = earlier
        return self._earlier

    def with_pass_noise(self, case: Case, fullname: str, result: CaseResult, progress: Progress | None) -> CaseResult:
        """The record with the noise between the earlier passes and this one (perfgate.gate.detectable).
        Passes further apart than the case's latency tolerance (a slow phase) re-measure the case
        once; still disagreeing, it is recorded flagged unreliable, so no later run judges latency
        against it."""
        from perfgate.gate import detectable

        earlier = self._earlier_records().get(fullname, [])
        if not earlier:
            return result
        limit = self.config.policy.settings(case.model, case.variant, "latency", case.device).latency_tolerance
        again: list[CaseResult] = []

        def remeasure() -> CaseRecord:
            if progress:
                progress("the recording passes disagree (a slow phase?); re-measuring")
            _release(result)
            again.append(self.measure(case, progress))
            return again[-1].record

        record = detectable.with_pass_noise(earlier, result.record, limit, remeasure)
        result = again[-1] if again else result
        result.record = record
        return result

    def _attach_evidence(
        self, case: Case, fullname: str, result: CaseResult, verdicts: list[gate.Verdict], progress: Progress | None
    ) -> list[gate.Verdict]:
        """A profiler trace (and on CUDA a memory snapshot) of the case, named by its failing verdicts."""
        if result.step is None:
            return verdicts
        if progress:
            progress("writing a profiler trace as evidence")
        evidence = capture_evidence(result.step, case.device, self.config.evidence_dir / case.id)
        evidence = replace(evidence, reproduce=reproduce_commands(case, nodeid=fullname))
        result.record = replace(result.record, evidence=evidence)
        return [with_evidence(v, evidence) if v.verdict in gate.FAILING else v for v in verdicts]


def _release(result: CaseResult) -> None:
    """Drop what holds device memory: the step (the model) and its last output."""
    result.step = None
    result.measurement.output = None


def _error_message(exc: BaseException, case: Case) -> str:
    import torch

    if isinstance(exc, timeout.CaseTimeout):
        return f"{exc} (--perfgate-case-timeout-s / [tool.perfgate] case_timeout_s)"
    if isinstance(exc, CheckpointError):  # one line already naming the file, the option and the fix
        return str(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        return f"out of memory on {case.device}: {str(exc).splitlines()[0]}"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first} (the traceback with -v)"
