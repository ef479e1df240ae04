"""The gate-quality experiment's summaries: false-alarm and detection rates with Wilson intervals,
the smallest slowdown the gate catches reliably, the noise between runs, and the report's data.

Pure functions over `perfgate.quality.experiment` comparisons.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from perfgate import gate
from perfgate.gate.settings import GateSettings
from perfgate.quality.experiment import (
    DETECTION_TARGET,
    FALSE_ALARM_MAX,
    NOT_JUDGED,
    Comparison,
    GateRule,
    as_record,
)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy); (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    from scipy import stats as sps

    ci = sps.binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True, kw_only=True)
class Rate:
    """Alarm rate of one rule at one slowdown (false alarms at 0%, detections above)."""

    slowdown_pct: float
    n: int  # judged comparisons (reliable)
    alarms: int  # regression verdicts
    rate: float
    ci_lo: float
    ci_hi: float
    unreliable: int
    inconclusive: int
    improvements: int
    median_change_pct: float | None  # median over judged comparisons of the first current's median change
    current_runs: int  # measurements of the current code, re-measurements included
    not_judged: int = 0  # re-judged stored runs: comparisons this rule would have needed more runs for


def rates(comparisons: Sequence[Comparison], rule: str, settings: GateSettings = GateSettings()) -> list[Rate]:
    """Per slowdown, how often rule `rule` (judging with `settings`) alarmed."""
    out = []
    for s in sorted({c.slowdown_pct for c in comparisons}):
        cs = [c for c in comparisons if c.slowdown_pct == s]
        judged = [c for c in cs if c.verdicts[rule] not in (gate.UNRELIABLE, NOT_JUDGED)]
        alarms = sum(c.verdicts[rule] == gate.REGRESSION for c in judged)
        lo, hi = wilson_interval(alarms, len(judged))
        out.append(
            Rate(
                slowdown_pct=s,
                n=len(judged),
                alarms=alarms,
                rate=alarms / len(judged) if judged else math.nan,
                ci_lo=lo,
                ci_hi=hi,
                unreliable=sum(c.verdicts[rule] == gate.UNRELIABLE for c in cs),
                not_judged=sum(c.verdicts[rule] == NOT_JUDGED for c in cs),
                inconclusive=sum(c.verdicts[rule] == gate.INCONCLUSIVE for c in judged),
                improvements=sum(c.verdicts[rule] == gate.IMPROVEMENT for c in judged),
                median_change_pct=float(statistics.median(c.change_pct_as(settings) for c in judged))
                if judged
                else None,
                current_runs=sum(len(c.currents) for c in cs),
            )
        )
    return out


def smallest_detected(
    rs: Sequence[Rate], *, detection: float = DETECTION_TARGET, false_alarm_max: float = FALSE_ALARM_MAX
) -> float | None:
    """The smallest injected slowdown caught at least `detection` of the time (it and every larger
    one measured), provided unchanged code (0%) alarmed at most `false_alarm_max` of the time.
    None when unchanged code was not measured, alarmed too often, or no slowdown qualifies."""
    by = {r.slowdown_pct: r for r in rs if r.n > 0}
    if 0 not in by or by[0].rate > false_alarm_max + 1e-12:
        return None
    positive = sorted(s for s in by if s > 0)
    best = None
    for s in reversed(positive):
        if by[s].rate < detection:
            break
        best = s
    return best


def run_noise(comparisons: Sequence[Comparison], s: GateSettings = GateSettings()) -> dict[str, Any]:
    """Spread of the unchanged chain's median between runs (processes), raw and normalised by the
    reference workload, and the typical within-run confidence-interval half-width: the between-run
    spread bounds what any gate on one baseline run can see."""
    from perfgate.measure.stats import ratios, relative_ci_halfwidth

    depth_layers = {r.layers for c in comparisons for r in c.baselines}
    runs = [r for c in comparisons for r in c.runs if r.layers in depth_layers and not as_record(r, s).unreliable]
    if len(runs) < 2:
        return {"runs": len(runs)}

    def spread(medians: list[float]) -> dict[str, Any]:
        mid = statistics.median(medians)
        q = statistics.quantiles(medians, n=20)  # 5% steps
        return {
            "median": mid,
            "between_run_cv": statistics.stdev(medians) / statistics.mean(medians),
            "between_run_p5_p95_rel": [q[0] / mid - 1, q[-1] / mid - 1],
        }

    out: dict[str, Any] = {
        "runs": len(runs),
        "raw_ms": spread([r.median_ms for r in runs]),
        "within_run_ci_halfwidth_rel": statistics.median(relative_ci_halfwidth(r.samples_ms) for r in runs),
        "samples_per_run": statistics.median(len(r.samples_ms) for r in runs),
    }
    if all(r.reference_ms for r in runs):
        out["normalised"] = spread([statistics.median(ratios(r.samples_ms, r.reference_ms or [])) for r in runs])
        out["reference_ms"] = spread([r.reference_median_ms or 0.0 for r in runs])
    return out


def report(
    comparisons: Sequence[Comparison],
    rules: Sequence[GateRule],
    *,
    depth: int,
    config: dict[str, Any],
    samples: bool = True,
) -> dict[str, Any]:
    """The experiment as JSON-ready data: per rule the rate table and the smallest slowdown detected."""
    per_rule = {}
    for r in rules:
        rs = rates(comparisons, r.name, r.settings)
        per_rule[r.name] = {
            "rule": r.describe(),
            "rates": [asdict(x) for x in rs],
            "smallest_detected_pct": smallest_detected(rs),
        }
    return {
        "config": config,
        "criterion": {"detection_min": DETECTION_TARGET, "false_alarm_max": FALSE_ALARM_MAX},
        "noise": run_noise(comparisons, rules[0].settings),
        "rules": per_rule,
        "comparisons": [c.as_dict(samples=samples) for c in comparisons],
    }


def machine_load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": one, "loadavg_5m": five, "loadavg_15m": fifteen, "cpu_count": os.cpu_count()}
