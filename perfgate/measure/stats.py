"""Summary statistics of raw timing samples and the adaptive stopping rule.

Pure functions over lists of floats (milliseconds): no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    Timing samples are skewed with heavy right tails, so a normal-theory interval around the
    mean would be wrong; the binomial order-statistic interval makes no assumption.
    """
    from scipy import stats as sps  # here: the gate's tail floors import this module, scipy is slow to load

    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("median_ci needs at least one sample")
    if n < 3:
        return float(x[0]), float(x[-1])
    alpha = 1.0 - confidence
    # Ranks j <= k such that P(X_(j) <= median <= X_(k)) >= confidence for Binomial(n, 1/2).
    lo = int(sps.binom.ppf(alpha / 2, n, 0.5))
    hi = int(sps.binom.isf(alpha / 2, n, 0.5))
    lo = max(lo - 1, 0)
    hi = min(hi, n - 1)
    return float(x[lo]), float(x[hi])


def median_ci_holds(n: int, confidence: float = 0.95) -> bool:
    """Whether n samples give the median a distribution-free interval of `confidence`: even
    [min, max] covers it with probability 1 - 2 * 0.5 ** n only (93.75% at 5, 98.4% at 6), and
    `median_ci` returns [min, max] where no narrower interval holds."""
    return n > 0 and 1 - 2 * 0.5**n >= confidence


def relative_ci_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's confidence interval, relative to the median."""
    med = float(np.median(samples))
    if med <= 0:
        return math.inf
    lo, hi = median_ci(samples, confidence)
    return (hi - lo) / 2.0 / med


@dataclass(frozen=True, kw_only=True)
class StopRule:
    """When to stop measuring: the median is known to `precision` or a bound is hit."""

    precision: float = 0.02  # relative half-width of the median's CI
    confidence: float = 0.95
    min_rounds: int = 10
    max_rounds: int = 200
    budget_s: float = 5.0  # wall-clock budget for the timed rounds of one case

    def __post_init__(self) -> None:
        # Written so that NaN fails every check (NaN compares false): a NaN budget would never stop.
        if not 0 < self.precision < 1:
            raise ValueError(f"precision must be in (0, 1), got {self.precision}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"need 1 <= min_rounds <= max_rounds, got {self.min_rounds}, {self.max_rounds}")
        if not self.budget_s > 0:  # inf: no budget (fixed round counts)
            raise ValueError(f"budget_s must be a positive number of seconds, got {self.budget_s}")


def stop_reason(samples: Sequence[float], elapsed_s: float, rule: StopRule) -> str | None:
    """Why measurement may stop now (`precise`, `max_rounds`, `budget`), or None to go on.

    The minimum number of rounds always wins over the budget, so a slow case still gets a
    distribution to test, not one sample.
    """
    n = len(samples)
    if n < rule.min_rounds:
        return None
    if n >= rule.max_rounds:
        return "max_rounds"
    if relative_ci_halfwidth(samples, rule.confidence) <= rule.precision:
        return "precise"
    if elapsed_s >= rule.budget_s:
        return "budget"
    return None


def ratios(samples_ms: Sequence[float], reference_ms: Sequence[float]) -> list[float]:
    """Per-round step/reference time ratios: the machine-speed-normalised samples the gate judges."""
    if len(samples_ms) != len(reference_ms):
        raise ValueError(
            f"{len(samples_ms)} samples but {len(reference_ms)} reference samples: they must pair up round by round"
        )
    return [s / r for s, r in zip(samples_ms, reference_ms)]


# The fewest samples a tail percentile is reported from: MLPerf LoadGen's early-stopping floors
# (loadgen/early_stopping.cc, the SingleStream minimum query counts: 64 for p90, 662 for p99). Below
# them the estimate is not bounded at LoadGen's confidence: the "p99" of 20 samples is their maximum.
TAIL_MIN_SAMPLES: dict[str, int] = {"p90_ms": 64, "p99_ms": 662}
_TAIL_Q = {"p90_ms": 90, "p99_ms": 99}


def tail_ms(samples_ms: Sequence[float], key: str) -> float | None:
    """The tail percentile `key` ("p90_ms" or "p99_ms") of the samples, or None when there are fewer
    than TAIL_MIN_SAMPLES[key] of them (insufficient samples)."""
    if len(samples_ms) < TAIL_MIN_SAMPLES[key]:
        return None
    return float(np.percentile(np.asarray(samples_ms, dtype=float), _TAIL_Q[key]))


def tail_note(n: int) -> str | None:
    """Why a tail is missing from n samples (None when both are reported)."""
    missing = [f"{k[:3]} needs >= {m}" for k, m in TAIL_MIN_SAMPLES.items() if n < m]
    if not missing:
        return None
    return f"insufficient samples for tails: {', '.join(missing)} (MLPerf LoadGen), have {n}"


class TimingSummary(TypedDict):
    """`summarize`'s figures, each named as the record's field it fills (perfgate.record.CaseRecord)."""

    n: int
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    median_ms: float
    p90_ms: float | None
    p99_ms: float | None
    iqr_ms: float
    noise_iqr_rel: float
    median_ci_lo_ms: float
    median_ci_hi_ms: float


def summarize(samples_ms: Sequence[float], confidence: float = 0.95) -> TimingSummary:
    """Summary of samples in ms: location, spread and the tail real-time users care about (p90 and
    p99 None where too few samples support them: `tail_note`)."""
    x = np.asarray(samples_ms, dtype=float)
    if x.size == 0:
        raise ValueError("summarize needs at least one sample")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    lo, hi = median_ci(x, confidence)
    return {
        "n": int(x.size),
        "mean_ms": float(x.mean()),
        "std_ms": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min_ms": float(x.min()),
        "max_ms": float(x.max()),
        "median_ms": float(med),
        "p90_ms": tail_ms(x, "p90_ms"),
        "p99_ms": tail_ms(x, "p99_ms"),
        "iqr_ms": float(q3 - q1),
        "noise_iqr_rel": float((q3 - q1) / med) if med > 0 else math.inf,
        "median_ci_lo_ms": lo,
        "median_ci_hi_ms": hi,
    }
