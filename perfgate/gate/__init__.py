"""The regression gate: every rule about whether a case passes lives in this package.

- `metrics`: the gated metrics, one row each, and their judges (latency, memory, accuracy, speedup);
- `decide`: reliability, the comparison with a baseline, re-measurement, the absolute checks;
- `policy`: the settings (`[tool.perfgate.gate]`, overrides, budgets, known defects) the rules read;
- `known_defects`: failures an upstream defect explains, named with their workaround instead of failing;
- `store`: baseline files; `quality`: the measured false-alarm and detection rates of these rules;
- `verdicts`: the verdict record.

Everything else (the session, the profiler, the reports) asks these functions; none decides itself.
"""

from perfgate.gate.decide import (
    Decision,
    absolute_checks,
    budget_min_rounds,
    compare,
    decide,
    pool,
    unreliable_reason,
)
from perfgate.gate.known_defects import explain as explain_known_defects
from perfgate.gate.verdicts import (
    BUDGET,
    DEFECT_NOT_SEEN,
    ERROR,
    FAILING,
    IMPROVEMENT,
    INCONCLUSIVE,
    JUDGED,
    KNOWN_DEFECT,
    NO_BASELINE,
    REGRESSION,
    UNCHANGED,
    UNRELIABLE,
    VERDICT_ORDER,
    Verdict,
    failing,
    sort_verdicts,
    unjudged_latency,
)

__all__ = [
    "BUDGET",
    "DEFECT_NOT_SEEN",
    "ERROR",
    "FAILING",
    "JUDGED",
    "KNOWN_DEFECT",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "NO_BASELINE",
    "REGRESSION",
    "UNCHANGED",
    "UNRELIABLE",
    "VERDICT_ORDER",
    "Decision",
    "Verdict",
    "absolute_checks",
    "budget_min_rounds",
    "compare",
    "decide",
    "explain_known_defects",
    "failing",
    "pool",
    "sort_verdicts",
    "unjudged_latency",
    "unreliable_reason",
]
