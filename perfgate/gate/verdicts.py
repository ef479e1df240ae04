"""A verdict: what the gate says about one metric of one case, as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no baseline"
UNRELIABLE = "unreliable"
BUDGET = "budget"  # an absolute real-time target missed
VERDICT_ORDER = (REGRESSION, BUDGET, UNRELIABLE, INCONCLUSIVE, IMPROVEMENT, NO_BASELINE, UNCHANGED)
FAILING = (REGRESSION, BUDGET)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    case: str
    metric: str
    verdict: str
    baseline: float | None = None
    current: float | None = None
    change_pct: float | None = None
    p_value: float | None = None
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sort_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Regressions first, then by case and metric."""
    return sorted(verdicts, key=lambda v: (VERDICT_ORDER.index(v.verdict) if v.verdict in VERDICT_ORDER else 99, v.case, v.metric))


def failing(verdicts: Sequence[Verdict], *, fail_on_improvement: bool = False) -> list[Verdict]:
    bad = set(FAILING) | ({IMPROVEMENT} if fail_on_improvement else set())
    return [v for v in verdicts if v.verdict in bad]
