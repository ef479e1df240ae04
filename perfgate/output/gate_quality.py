"""`perfgate gate-quality`'s rate table: each injected slowdown, how often the gate raised an alarm,
with its Wilson interval (perfgate.quality.rates computes the rates; this draws them)."""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.output.text import text_table
from perfgate.quality.experiment import layers_for
from perfgate.quality.rates import Rate


def rate_rows(rs: Sequence[Rate], depth: int) -> list[list[str]]:
    rows = []
    for r in rs:
        rows.append(
            [
                f"+{r.slowdown_pct:g}%" if r.slowdown_pct else "0% (unchanged)",
                str(layers_for(depth, r.slowdown_pct)),
                str(r.n),
                str(r.alarms),
                f"{r.rate:.0%}" if r.n else "-",
                f"{r.ci_lo:.0%}-{r.ci_hi:.0%}" if r.n else "-",
                str(r.unreliable),
                str(r.inconclusive),
                str(r.improvements),
                f"{r.median_change_pct:+.1f}%" if r.median_change_pct is not None else "-",
                str(r.current_runs),
            ]
        )
    return rows


RATE_HEADERS = (
    "slowdown",
    "layers",
    "n",
    "alarms",
    "rate",
    "95% CI (Wilson)",
    "unreliable",
    "inconclusive",
    "improvement",
    "median change",
    "current runs",
)


def rate_table(rs: Sequence[Rate], depth: int) -> list[str]:
    return text_table(RATE_HEADERS, rate_rows(rs, depth))
