"""One benchmark session without pytest: its configuration, fixed before the first case, and its state.

`RunConfig` is what the run was asked to do (device, baselines, policy, run options, outputs,
selection rules); it is frozen and built once: by `perfgate.plugin.hooks` in pytest_configure from
the options and [tool.perfgate] (plugins change it through `pytest_perfgate_run_config` before it is
built), or by a script. `Session` holds that configuration and what the run finds out as it goes:
the cases, results, verdicts, skips and what was recorded. A script benchmarks without pytest with

    session = Session(config=RunConfig(device="cpu", baselines_root=Path("baselines")))
    result, verdicts = session.measure_and_judge(case, case.id)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.cases.conversions import Env
from perfgate.cases.runner import Case, CaseResult, RunOptions, run_case
from perfgate.cases.tiers import Tier
from perfgate.counts import suite as counts_suite
from perfgate.gate import store as baseline_store
from perfgate.gate.known_defects import this_host
from perfgate.gate.policy import Policy
from perfgate.measure.fingerprint import fingerprint, fingerprint_id
from perfgate.profile.evidence import capture_evidence, reproduce_commands, with_evidence
from perfgate.record import CaseRecord, speedup, speedup_basis


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What a run was asked to do, fixed before the first case is collected (assigning a field
    raises FrozenInstanceError; `dataclasses.replace` makes a changed copy before the session is built)."""

    device: str  # resolved: "cuda:0", not "cuda"
    baselines_root: Path
    policy: Policy = Policy()
    run_options: RunOptions = field(default_factory=RunOptions)
    gate_enabled: bool = True
    fail_on_improvement: bool = False  # --perfgate-ratchet: an improvement fails until recorded
    fail_on_graph_break: bool = False
    fail_unjudged: bool = False  # fail the run when no case's latency could be judged
    case_timeout_s: float = 0.0  # 0: no limit
    trace: str = "off"  # evidence on failure: "off", "all" cases or only "regressed" ones
    evidence_dir: Path = Path(".perfgate/evidence")
    tier: Tier | None = None  # the tier the selection came from
    default_variants: tuple[str, ...] | None = None  # the tier's, else [tool.perfgate] variants; None: all
    record_label: str | None = None  # record the run as a baseline under this label; None: do not
    verdict_file: Path | None = None  # where the verdicts JSON is written at the end; None: nowhere
    # Counts (perfgate.counts.suite): the [tool.perfgate.counts] table (None: nothing is counted) and
    # the registries and model files the valgrind worker loads.
    counts_config: counts_suite.CountsConfig | None = None
    counts_registries: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    # Recording in passes (scripts/record-baselines --passes N): the earlier passes' result files;
    # each case's record carries the noise between them and this pass (perfgate.gate.detectable).
    earlier_passes: tuple[Path, ...] = ()
    # The gated metrics judged (--perfgate-gate-metrics); None: all. The GPU pull-request gate judges
    # kernel counts, device time, memory and accuracy here and leaves wall time to same-job A/B.
    gate_metrics: tuple[str, ...] | None = None


_CONFIG_FIELDS = frozenset(f.name for f in fields(RunConfig))


@dataclass(kw_only=True)
class Session:
    """A run's frozen configuration and its mutable state."""

    config: RunConfig
    cases: list[Case] = field(default_factory=list)  # the selection (a shard narrows it before collection)
    results: dict[str, CaseResult] = field(default_factory=dict)  # by pytest node id
    verdicts: list[gate.Verdict] = field(default_factory=list)
    skips: dict[str, str] = field(default_factory=dict)  # case id -> why it was skipped
    counts: counts_suite.SessionCounts | None = None  # the instruction pass's results (before any case)
    unjudged: str = ""  # the end-of-run line when no latency could be judged
    recorded: Path | None = None  # the baseline file this run recorded
    record_refused: str | None = None  # why this run was not recorded although asked to
    recorded_counts: Path | None = None  # the portable count baseline this run recorded
    compared_elsewhere: list[str] = field(default_factory=list)  # how --benchmark-compare files' machines differ
    eager: dict[tuple, CaseRecord] = field(default_factory=dict)  # group -> this run's reliable eager record
    eager_unreliable: set[tuple] = field(default_factory=set)  # groups whose eager run was unreliable: no speedups

    def __setattr__(self, name: str, value: Any) -> None:
        # Plugins used to assign configuration here; now that would set an attribute nobody reads,
        # so it is refused with the way to do it.
        if name in _CONFIG_FIELDS or (name == "config" and "config" in self.__dict__):
            raise AttributeError(
                f"Session.{name}: the run's configuration (session.config, a frozen RunConfig) is built once; "
                "change it in a pytest_perfgate_run_config hook (perfgate.plugin.hookspecs), or, in a script, "
                "build the RunConfig with it (dataclasses.replace) before the Session"
            )
        object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        # Derived from the configuration, once: what this machine is and which variants it can run.
        self.fingerprint = fingerprint(self.config.device)
        self.fingerprint_id = fingerprint_id(self.fingerprint)
        self.env = Env.detect(self.config.device)
        self._baselines: baseline_store.Baselines | None = None  # read on first use
        self._earlier: dict[str, list[CaseRecord]] | None = None  # the earlier passes' records, read on first use

    # The outputs (perfgate.output) read these two of the configuration from the session.
    @property
    def gate_enabled(self) -> bool:
        return self.config.gate_enabled

    @property
    def fail_on_improvement(self) -> bool:
        return self.config.fail_on_improvement

    @property
    def baseline_dir(self) -> Path:
        return baseline_store.baseline_dir(self.config.baselines_root, self.fingerprint_id)

    @property
    def baselines(self) -> baseline_store.Baselines:
        if self._baselines is None:
            self._baselines = baseline_store.Baselines(self.baseline_dir, self.fingerprint)
        return self._baselines

    def load_baseline(self) -> baseline_store.Baselines | None:
        """This fingerprint's baselines, the newest file validated now (BaselineError if it is
        broken); None when none was recorded."""
        self.baselines.check_newest()
        return self.baselines if self.baselines.files else None

    def baseline_record(self, fullname: str) -> tuple[CaseRecord, Path] | None:
        """The case's record in the newest baseline that holds it, and that file."""
        found = self.baselines.entry(fullname)
        return (found[1].record, found[0]) if found else None

    def no_baseline_notice(self) -> str:
        return (
            f"perfgate: no baseline recorded for this machine's fingerprint {self.fingerprint_id} "
            f"(looked in {self.baseline_dir}); nothing is compared with another machine's numbers. "
            f"Record one with: pytest benchmarks --perfgate-record"
        )

    def _group(self, case: Case) -> tuple:
        return (case.model, case.size, case.options, case.device)

    def run(self, case: Case, progress: Callable[[str], None] | None = None) -> CaseResult:
        """Measure a case: its reliability as the gate sees it, and its speedup over the eager
        baseline of this run when there is one."""
        result = run_case(case, self.case_options(case), progress=progress)
        rec = counts_suite.annotate(self.counts, case, result.record, result.step)
        settings = self.config.policy.settings(case.model, case.variant, "latency", case.device)
        rec = replace(rec, unreliable=gate.unreliable_reason(rec, settings))
        group = self._group(case)
        eager_now = case.variant == "baseline" and not rec.unreliable
        if case.variant == "baseline":
            if rec.unreliable:
                self.eager.pop(group, None)  # no speedups from a contended eager run
                self.eager_unreliable.add(group)
            else:
                self.eager_unreliable.discard(group)
        rec = replace(rec, **self._speedup_fields(group, rec if eager_now else self.eager.get(group), rec))
        if eager_now:
            self.eager[group] = rec  # the finished record: later cases of the group divide by it
        result.record = rec
        return result

    def _speedup_fields(self, group: tuple, eager: CaseRecord | None, rec: CaseRecord) -> dict[str, Any]:
        """The case's speedup over this run's eager record of its group, or the note saying why none."""
        basis = speedup_basis(rec)  # the one rule (perfgate.record.speedup)
        if eager and speedup_basis(eager) == basis:
            return {"speedup": speedup(eager, rec, basis), "speedup_basis": basis}
        if group in self.eager_unreliable:
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
        need = gate.budget_min_rounds(self.config.policy, case.model, case.size, case.variant, self.hardware)
        stop = self.config.run_options.stop
        if need <= stop.min_rounds:
            return self.config.run_options
        return replace(
            self.config.run_options, stop=replace(stop, min_rounds=need, max_rounds=max(stop.max_rounds, need))
        )

    @property
    def hardware(self) -> str:
        """What budgets match on: the GPU name, or the CPU model."""
        return self.fingerprint.get("gpu_name") or self.fingerprint.get("cpu_model") or ""

    def measure_and_judge(
        self, case: Case, fullname: str, progress: Callable[[str], None] | None = None
    ) -> tuple[CaseResult, list[gate.Verdict]]:
        """Run a case and gate it, re-measuring while the gate asks to (`gate.decide`)."""
        t0 = time.perf_counter()
        found = self.baseline_record(fullname) if self.config.gate_enabled else None
        baseline = counts_suite.with_portable(self.counts, case.id, found[0] if found else None)
        result = self.run(case, progress)
        runs, verdicts = [result.record], []
        while self.config.gate_enabled:
            decision = gate.decide(fullname, runs, baseline, self.config.policy)
            if not decision.remeasure or not self.judges("latency"):
                result.record = decision.record
                # Why a case was not judged (no baseline, unreliable) stays visible whatever is judged.
                kept = [
                    v
                    for v in decision.verdicts
                    if self.judges(v.metric) or v.verdict in (gate.NO_BASELINE, gate.UNRELIABLE)
                ]
                verdicts = [replace(v, baseline_file=str(found[1])) for v in kept] if found else kept
                break
            if progress:
                progress(f"suspected latency regression; re-measuring ({len(runs)} run(s) so far)")
            result.step = None  # two copies of a large model need not fit on the device at once
            result.measurement.output = None
            result = self.run(case, progress)
            result.record = replace(result.record, remeasured=len(runs))
            runs.append(result.record)
        if self.config.earlier_passes:
            result = self.with_pass_noise(case, fullname, result, progress)
        if self.config.gate_enabled and found is None:  # no host baseline: the counts may still have a portable one
            s = self.config.policy.settings(case.model, case.variant, "instructions", case.device)
            verdicts += counts_suite.portable_verdicts(self.counts, case.id, fullname, result.record, s)
        verdicts += [
            v
            for v in gate.absolute_checks(
                fullname,
                result.record,
                self.config.policy,
                self.hardware,
                fail_on_graph_break=self.config.fail_on_graph_break,
            )
            if self.judges(v.metric)
        ]
        if self.config.policy.known_defects:  # an upstream defect's failure is named, not failed on
            defects = self.config.policy.known_defects
            verdicts = gate.explain_known_defects(
                case.id, result.record, verdicts, defects, this_host(), judged=self.judges
            )
        if self.config.trace == "all" or (self.config.trace == "regressed" and self.failing(verdicts, case)):
            verdicts = self.attach_evidence(case, fullname, result, verdicts, progress)
        result.record = replace(result.record, case_wall_s=time.perf_counter() - t0)
        result.step = None  # the step holds the model: do not keep it past the case
        result.measurement.output = None  # device tensors would count in later cases' absolute peaks
        self.results[fullname] = result
        self.verdicts.extend(verdicts)
        return result, verdicts

    def judges(self, metric: str) -> bool:
        """Whether this run judges `metric` (--perfgate-gate-metrics). A time budget (fps, p90, median)
        goes with latency, the memory budget with memory; graph breaks are no timing: always judged."""
        chosen = self.config.gate_metrics
        if chosen is None or metric == "graph_breaks":
            return True
        if metric.startswith("budget:"):
            return ("memory" if metric == "budget:peak_mem_mib" else "latency") in chosen
        return metric in chosen

    def earlier_records(self) -> dict[str, list[CaseRecord]]:
        """fullname -> the records of the earlier recording passes (their result files, read once)."""
        if self._earlier is None:
            from perfgate.results import benchmarks, read_benchmark_json

            self._earlier = {}
            for path in self.config.earlier_passes:
                for b in benchmarks(read_benchmark_json(path)):
                    self._earlier.setdefault(b.fullname, []).append(b.record)
        return self._earlier

    def with_pass_noise(
        self, case: Case, fullname: str, result: CaseResult, progress: Callable[[str], None] | None
    ) -> CaseResult:
        """The record with the noise between the earlier passes and this one (perfgate.gate.detectable).
        Passes further apart than the case's latency tolerance (a slow phase) re-measure the case
        once; still disagreeing, it is recorded flagged unreliable, so no later run judges latency
        against it."""
        from perfgate.gate import detectable

        earlier = self.earlier_records().get(fullname, [])
        if not earlier:
            return result
        limit = self.config.policy.settings(case.model, case.variant, "latency", case.device).latency_tolerance
        noise, dropped = detectable.noise_of([*earlier, result.record]), None
        if detectable.disagreement(noise, limit) is not None:
            if progress:
                progress("the recording passes disagree (a slow phase?); re-measuring")
            result.step = None
            result.measurement.output = None
            again = self.run(case, progress)
            again.record = replace(again.record, remeasured=1)
            # A slow phase caught by an earlier pass is left out when the others then agree.
            kept, dropped = detectable.without_slow_pass([*earlier, again.record], limit)
            result, noise = again, detectable.noise_of(kept)
            why = detectable.disagreement(noise, limit)
            if why is not None:
                result.record = replace(result.record, unreliable=why)
        block = detectable.noise_block(noise)
        if dropped is not None and "latency" in block:
            block["latency"]["dropped_pass"] = dropped + 1  # 1-based, in recording order
        result.record = replace(result.record, pass_noise=block)
        return result

    def attach_evidence(
        self,
        case: Case,
        fullname: str,
        result: CaseResult,
        verdicts: list[gate.Verdict],
        progress: Callable[[str], None] | None,
    ) -> list[gate.Verdict]:
        """A profiler trace (and on CUDA a memory snapshot) of the case, named by its failing verdicts."""
        if result.step is None:
            return verdicts
        if progress:
            progress("writing a profiler trace as evidence")
        evidence = capture_evidence(result.step, case.device, self.config.evidence_dir / case.id)
        evidence["reproduce"] = reproduce_commands(case, nodeid=fullname)
        result.record = replace(result.record, evidence=evidence)
        return [with_evidence(v, evidence) if v.verdict in gate.FAILING else v for v in verdicts]

    def baseline_sources(self) -> dict[str, int]:
        """How many cases were judged against each baseline file, newest file first."""
        cases: dict[str, set[str]] = {}
        for v in self.verdicts:
            if v.baseline_file:
                cases.setdefault(v.baseline_file, set()).add(v.case)
        return {f: len(c) for f, c in sorted(cases.items(), reverse=True)}

    def failing(self, verdicts: list[gate.Verdict], case: Case) -> list[gate.Verdict]:
        ratchet = (
            self.config.fail_on_improvement
            or self.config.policy.settings(case.model, case.variant, "latency", case.device).fail_on_improvement
        )
        return gate.failing(verdicts, fail_on_improvement=ratchet)
