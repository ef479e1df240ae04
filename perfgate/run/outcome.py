"""What a run produced, frozen: one case's `CaseOutcome` (the runner returns it) and the whole run's
`RunOutcome`, built once at its end by `run_outcome` (from this process's outcomes, or from the
merged files of xdist workers) and read by the outputs, the verdicts file and the merges."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.cases.runner import Case
from perfgate.gate.verdict_file import VerdictSet
from perfgate.record import CaseRecord, Evidence


@dataclass(frozen=True, kw_only=True)
class CaseOutcome:
    """One case, measured and judged, or why it was not."""

    case: Case
    fullname: str  # the pytest node id: the baseline's key
    record: CaseRecord | None = None  # None: not measured (skipped or an error)
    verdicts: tuple[gate.Verdict, ...] = ()
    failing: tuple[gate.Verdict, ...] = ()  # the verdicts that fail the case (gate.failing, ratchet included)
    skipped: str | None = None  # the variant cannot run here (found while building it)
    error: str | None = None  # it could not be measured; its verdict (metric "run") says the same
    traceback: str | None = None  # the error's traceback, for whoever shows it (pytest with -v)


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """The whole run: every measured case's record, the gate's verdicts (`verdicts`: what the verdicts
    file holds) and what became of the run's files."""

    fingerprint: Mapping[str, Any]
    fingerprint_id: str
    records: Mapping[str, CaseRecord]  # pytest node id -> record, in the order measured
    verdicts: VerdictSet
    no_baseline: bool = False  # gated, yet no baseline was recorded for this fingerprint (a notice says so)
    unjudged: str | None = None  # the line when no case's latency could be judged
    unjudged_fails: bool = False  # --perfgate-fail-unjudged: that line fails the run
    recorded: Path | None = None  # the baseline file this run recorded
    record_refused: str | None = None  # why this run was not recorded although asked to
    record_failed: str | None = None  # the line when recording was asked for and writing it failed (fails the run)
    recorded_counts: Path | None = None  # the portable count baseline this run recorded
    not_recorded: tuple[str, ...] = ()  # one line per case left out of the recorded baseline (passes disagree)
    compared_elsewhere: tuple[str, ...] = ()  # how --benchmark-compare files' machines differ from this one
    skipped_files: tuple[Path, ...] = ()  # entries named like baselines that are no regular files

    @property
    def measured(self) -> bool:
        """Whether the run measured a case or gave one a verdict (an error counts): else it wrote nothing."""
        return bool(self.records or self.verdicts.verdicts)

    @property
    def evidence(self) -> dict[str, Evidence]:
        """node id -> the evidence written for the case (a trace, how to reproduce it)."""
        return {name: r.evidence for name, r in self.records.items() if r.evidence}

    def baseline_sources(self) -> dict[str, int]:
        """How many cases were judged against each baseline file, newest file first."""
        cases: dict[str, set[str]] = {}
        for v in self.verdicts.verdicts:
            if v.baseline_file:
                cases.setdefault(v.baseline_file, set()).add(v.case)
        return {f: len(c) for f, c in sorted(cases.items(), reverse=True)}


def run_outcome(
    *,
    fingerprint: Mapping[str, Any],
    fingerprint_id: str,
    records: Mapping[str, CaseRecord],
    verdicts: Iterable[gate.Verdict],
    skips: Mapping[str, str],
    gate_enabled: bool,
    fail_on_improvement: bool = False,
    fail_unjudged: bool = False,
    no_baseline_notice: str | None = None,
    recorded: Path | None = None,
    record_refused: str | None = None,
    record_failed: str | None = None,
    recorded_counts: Path | None = None,
    not_recorded: tuple[str, ...] = (),
    compared_elsewhere: tuple[str, ...] = (),
    skipped_files: tuple[Path, ...] = (),
) -> RunOutcome:
    """The run's outcome, built once: the verdicts sorted, the notices and the unjudged line derived;
    what became of its files as given."""
    verdicts = list(verdicts)
    no_baseline = bool(gate_enabled and records and no_baseline_notice)
    unjudged, fails = None, False
    counted = gate.unjudged_latency(verdicts) if gate_enabled else None
    if counted:
        unjudged = (
            f"perfgate: no case's latency could be judged "
            f"({', '.join(f'{n} {kind}' for kind, n in counted.items())}): this run gated no latency"
        )
        if fail_unjudged:
            unjudged, fails = unjudged + " (failing the run: --perfgate-fail-unjudged)", True
    vs = VerdictSet(
        gate.sort_verdicts(verdicts),
        dict(skips),
        fingerprint_id,
        gate_enabled=gate_enabled,
        fail_on_improvement=fail_on_improvement,
        notices=(no_baseline_notice,) if no_baseline and no_baseline_notice else (),
    )
    return RunOutcome(
        fingerprint=dict(fingerprint),
        fingerprint_id=fingerprint_id,
        records=dict(records),
        verdicts=vs,
        no_baseline=no_baseline,
        unjudged=unjudged,
        unjudged_fails=fails,
        recorded=recorded,
        record_refused=record_refused,
        record_failed=record_failed,
        recorded_counts=recorded_counts,
        not_recorded=not_recorded,
        compared_elsewhere=compared_elsewhere,
        skipped_files=skipped_files,
    )
