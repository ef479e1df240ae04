"""A verdict: what the gate says about one metric of one case, as data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no baseline"
UNRELIABLE = "unreliable"
BUDGET = "budget"  # an absolute real-time target missed
ERROR = "error"  # the case could not be measured: it raised, or ran past its time limit
# A failure a [[tool.perfgate.known_defect]] entry explains (perfgate.gate.known_defects): named, never failing;
# and an applying entry whose case passed (the defect looks fixed: the entry can go).
KNOWN_DEFECT = "known defect"
DEFECT_NOT_SEEN = "defect not seen"
VERDICT_ORDER = (
    ERROR,
    REGRESSION,
    BUDGET,
    KNOWN_DEFECT,
    DEFECT_NOT_SEEN,
    UNRELIABLE,
    INCONCLUSIVE,
    IMPROVEMENT,
    NO_BASELINE,
    UNCHANGED,
)
FAILING = (ERROR, REGRESSION, BUDGET)
JUDGED = (REGRESSION, IMPROVEMENT, UNCHANGED, INCONCLUSIVE)  # latency verdicts that compared two reliable runs


@dataclass(frozen=True, kw_only=True)
class Verdict:
    case: str
    metric: str
    verdict: str
    baseline: float | None = None
    current: float | None = None
    change_pct: float | None = None
    p_value: float | None = None
    message: str = ""  # why the verdict is what it is, one line (every verdict the gate judged has one)
    baseline_file: str | None = None  # the recorded baseline this verdict judged against
    # What change_pct is of, where it is not simply current vs baseline: on a CPU latency is judged
    # on step/reference ratios while baseline and current stay milliseconds.
    compared: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sort_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Regressions first, then by case and metric."""
    return sorted(
        verdicts, key=lambda v: (VERDICT_ORDER.index(v.verdict) if v.verdict in VERDICT_ORDER else 99, v.case, v.metric)
    )


def unjudged_latency(verdicts: Sequence[Verdict]) -> dict[str, int] | None:
    """When no case's latency could be judged (every one unreliable, without a baseline or failed),
    how many fell in each kind; None when at least one was judged, or no latency verdict exists."""
    latency = [v for v in verdicts if v.metric == "latency" or v.verdict == ERROR]
    if not latency or any(v.verdict in JUDGED for v in latency if v.metric == "latency"):
        return None
    counts: dict[str, int] = {}
    for v in latency:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return counts


def failing(verdicts: Sequence[Verdict], *, fail_on_improvement: bool = False) -> list[Verdict]:
    bad = set(FAILING) | ({IMPROVEMENT} if fail_on_improvement else set())
    return [v for v in verdicts if v.verdict in bad]
