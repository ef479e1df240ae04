"""Change points in a case's history: where the quantity the gate judges changed level, and which
of those shifts were intended.

The gate compares a run with one recorded baseline; a slow drift of small shifts, or a shift that
landed while nobody looked, shows only across many runs. `perfgate history --change-points` finds
those shifts in the series `perfgate.history.runs` builds (one value per saved run, in commit order).

Detection: PELT (ruptures) with an L2 cost on the logarithm of the values, so a shift is a relative
change and 10 ms -> 11 ms weighs what 100 ms -> 110 ms does. Penalty: 3 sigma^2 log n, a modified
BIC (a shift's location is searched, so it costs more than the one parameter of plain BIC's
2 sigma^2 log n: on 200 simulated 20-run series with 5% lognormal noise, 2 found a false shift in
24 and 3 in 12, and both found an exact 15% shift at its place 148 and 157 times; with 3% noise 2
and 1 false, 185 and 189 found), with sigma the series' own noise estimated robustly from
successive differences (a shift moves only one difference; median absolute difference / sqrt(2),
scaled to a standard deviation), floored at a quarter of the minimum change so that a perfectly
flat series is not cut at every rounding. Then shifts smaller than `min_change` (default 5%)
between the medians of neighbouring segments are merged away, smallest first. A segment has at
least `min_size` (2) runs: one odd run is an outlier, not a level, so a shift is reported once two
runs confirm it.

Why ruptures: of the well-kept implementations, ruptures 1.1.10 installs as a wheel beside
torch 2.13 needing only numpy and scipy. For signal-processing-algorithms 2.1.6 (MongoDB's
e-divisive) pip would replace numpy 2.4.6 with 1.26.4 and add gevent; for apache-otava 0.8.0 it
would downgrade numpy to 2.2.0 and scipy to 1.16.3 and add BigQuery, Postgres and Slack clients
(`pip install --dry-run` into this project's environment, 2026-11-23).
PELT with a BIC penalty is the textbook exact search for mean shifts; e-divisive's permutation
test needs more runs than a benchmark history usually has.

Intended shifts: `[[tool.perfgate.accepted_changes]]` in pyproject.toml, each `case` (a glob on the
test name or the readable label), `commit` (a hash prefix, at least 7 hex digits: the first run of
the new level) and `reason`; optional `metric` (a glob, default every metric). An accepted shift is
a fixed boundary: each side is searched on its own, so the level after it is judged only from the
runs after it, and the shift is listed as accepted with its reason. The gate does not read these
entries: it judges against the newest baseline file, and recording a new baseline
(`--perfgate-record`) is how a gate comparison starts from an intended shift.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfgate.extras import need

MIN_CHANGE = 0.05  # the smallest relative shift reported: the gate's own default latency tolerance
MIN_SIZE = 2  # runs per segment: a level needs two runs to be told from one noisy run
PENALTY = 3.0  # x sigma^2 log n: the modified BIC (module docstring)
_MAD_TO_SD = 1.4826
# PELT's time grows about as n^2 here (4,000 runs: a minute a case): a longer series is searched on
# the medians of BUCKETS stretches, each shift then placed at its exact run (_long_segment_starts).
LONG, BUCKETS = 600, 300  # median absolute deviation to standard deviation, for normal noise


class AcceptedChangeError(ValueError):
    """A bad `accepted_changes` entry; the message names the file, the entry and the fix."""


@dataclass(frozen=True, kw_only=True)
class AcceptedChange:
    case: str  # glob on the test name, the full name or the readable label
    commit: str  # hash prefix of the first run at the new level
    reason: str
    metric: str = "*"

    def matches(self, names: Sequence[str], metric: str) -> bool:
        return fnmatch.fnmatchcase(metric, self.metric) and any(fnmatch.fnmatchcase(n, self.case) for n in names)

    def at(self, commit: str | None) -> bool:
        return bool(commit) and commit.lower().startswith(self.commit.lower())


def parse_accepted(raw: Any, source: str = "[tool.perfgate]") -> tuple[AcceptedChange, ...]:
    """`accepted_changes = [{case = ..., commit = ..., reason = ...}]` (or `[[tool.perfgate.accepted_changes]]`)."""
    if not isinstance(raw, list) or not all(isinstance(r, Mapping) for r in raw):
        raise AcceptedChangeError(
            f"{source} accepted_changes: must be an array of tables such as "
            f'[{{case = "physicsnemo-block*baseline", commit = "1a2b3c4", reason = "..."}}], got {raw!r}'
        )
    out = []
    for i, entry in enumerate(raw):
        where = f"{source} accepted_changes #{i + 1}"
        unknown = set(entry) - {"case", "commit", "reason", "metric"}
        if unknown:
            raise AcceptedChangeError(
                f"{where}: unknown key {sorted(unknown)[0]!r}; known: case, commit, reason, metric"
            )
        for key in ("case", "commit", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise AcceptedChangeError(f"{where}: {key} must be a non-empty string")
        if not re.fullmatch(r"[0-9a-fA-F]{7,40}", entry["commit"]):
            raise AcceptedChangeError(
                f"{where}: commit {entry['commit']!r} is no commit hash; give at least its first 7 hex digits"
            )
        metric = entry.get("metric", "*")
        if not isinstance(metric, str) or not metric:
            raise AcceptedChangeError(f"{where}: metric must be a metric name or glob, got {metric!r}")
        out.append(AcceptedChange(case=entry["case"], commit=entry["commit"], reason=entry["reason"], metric=metric))
    return tuple(out)


def load_accepted(pyproject: str | Path) -> tuple[AcceptedChange, ...]:
    """The accepted changes of a pyproject.toml (none when the file or the key is absent);
    AcceptedChangeError, one line naming the file, for a bad file or entry."""
    from perfgate.gate.policy import PolicyError, load_table

    try:
        table = load_table(pyproject)
    except PolicyError as exc:
        raise AcceptedChangeError(str(exc)) from None
    return parse_accepted(table.get("accepted_changes", []), f"{pyproject} [tool.perfgate]")


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    index: int  # the first point at the new level
    commit: str | None
    run_time: str | None
    source: str
    before: float  # median of the segment before the shift
    after: float  # median of the segment after it
    change_pct: float
    direction: str  # "worse", "better" or "" (a metric without a direction)
    accepted: str | None = None  # the reason, when the shift was annotated as intended

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def noise_sd(log_values: np.ndarray, min_change: float, fixed: Sequence[int] = ()) -> float:
    """Robust noise of a log series from its successive differences (those across a `fixed`
    boundary left out: an accepted shift is no noise), floored at log(1 + min_change) / 4."""
    floor = math.log1p(min_change) / 4
    diffs = np.delete(np.diff(log_values), [i - 1 for i in fixed if 0 < i < log_values.size])
    if diffs.size < 2:
        return floor
    mad = float(np.median(np.abs(diffs)))
    return max(_MAD_TO_SD * mad / math.sqrt(2), floor)


def _pelt(log_values: np.ndarray, sd: float, min_size: int) -> list[int]:
    """Indexes where PELT starts a new segment (ruptures; the last index n left out)."""
    ruptures = need(
        "ruptures", "finding change points"
    )  # here: `perfgate history` without --change-points never needs it

    n = log_values.size
    if n < 2 * min_size:
        return []
    pen = PENALTY * sd**2 * math.log(n)
    algo = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(log_values.reshape(-1, 1))
    return [b for b in algo.predict(pen=pen) if b < n]


def _shift(values: np.ndarray, bounds: Sequence[int], k: int, *, conservative: bool = False) -> float:
    """Relative change between the medians of the segments either side of bounds[k]. Conservative:
    each side's median of an even count taken as the middle value nearer the other side, so that a
    two-run segment of one outlier and one normal run makes no shift (their mean would)."""
    before = values[bounds[k - 1] : bounds[k]]
    after = values[bounds[k] : bounds[k + 1]]
    if not conservative:
        return float(np.median(after) / np.median(before) - 1)
    up = np.median(after) > np.median(before)
    lo, hi = "lower", "higher"
    b = np.percentile(before, 50, method=hi if up else lo)
    a = np.percentile(after, 50, method=lo if up else hi)
    return float(a / b - 1) if (a > b) == up else 0.0


def segment_starts(
    values: Sequence[float],
    *,
    fixed: Sequence[int] = (),
    min_change: float = MIN_CHANGE,
    min_size: int = MIN_SIZE,
) -> list[int]:
    """Indexes where a new level starts: PELT within each stretch between the `fixed` boundaries
    (accepted shifts), then detected shifts below `min_change` merged away, smallest first."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.all(v > 0) or not np.all(np.isfinite(v)):
        raise ValueError("change points need positive finite values")
    if v.size > LONG:
        return _long_segment_starts(v, fixed=fixed, min_change=min_change, min_size=min_size)
    y = np.log(v)
    fixed = sorted({i for i in fixed if 0 < i < v.size})
    edges = [0, *fixed, v.size]
    found = set(fixed)
    sd = noise_sd(y, min_change, fixed)  # one noise level for the whole series: more differences, steadier
    for lo, hi in zip(edges, edges[1:]):
        found |= {lo + b for b in _pelt(y[lo:hi], sd, min_size)}
    bounds = [0, *sorted(found), v.size]
    while True:
        free = [k for k in range(1, len(bounds) - 1) if bounds[k] not in fixed]
        shifts = {k: abs(_shift(v, bounds, k, conservative=True)) for k in free}
        small = [(size, k) for k, size in shifts.items() if size < min_change]
        if not small:
            return bounds[1:-1]
        del bounds[min(small)[1]]


def _split_cost(cs: np.ndarray, cs2: np.ndarray, a: int, b: int) -> float:
    """Sum of squared deviations of y[a:b] from its mean, from cumulative sums."""
    return float(cs2[b] - cs2[a] - (cs[b] - cs[a]) ** 2 / (b - a))


def _long_segment_starts(v: np.ndarray, *, fixed: Sequence[int], min_change: float, min_size: int) -> list[int]:
    """segment_starts of a long series: PELT on the medians of BUCKETS consecutive stretches
    (accepted shifts are stretch edges), then each shift placed at the run where splitting the raw
    log values between its neighbouring shifts costs least, searched within a stretch either side."""
    n = v.size
    fixed = sorted({i for i in fixed if 0 < i < n})
    edges = sorted({i * n // BUCKETS for i in range(BUCKETS)} | set(fixed) | {n})
    medians = np.array([np.median(v[a:b]) for a, b in zip(edges, edges[1:])])
    fixed_b = [edges.index(i) for i in fixed]
    coarse = segment_starts(medians, fixed=fixed_b, min_change=min_change, min_size=min_size)
    y = np.log(v)
    cs, cs2 = np.concatenate([[0.0], np.cumsum(y)]), np.concatenate([[0.0], np.cumsum(y * y)])
    bounds = [0, *coarse, len(medians)]
    out = []
    for k, sb in enumerate(coarse, start=1):
        if sb in fixed_b:
            out.append(edges[sb])
            continue
        lo, hi = edges[bounds[k - 1]], edges[bounds[k + 1]]
        window = range(max(edges[sb - 1], lo + min_size), min(edges[min(sb + 1, len(edges) - 1)], hi - min_size) + 1)
        out.append(min(window, key=lambda i: _split_cost(cs, cs2, lo, i) + _split_cost(cs, cs2, i, hi)))
    return out


def change_points(
    series: Any,
    better: str,
    accepted: Sequence[AcceptedChange] = (),
    *,
    metric: str = "",
    min_change: float = MIN_CHANGE,
    min_size: int = MIN_SIZE,
) -> list[ChangePoint]:
    """The change points of one perfgate.history.runs.Series (values in commit order)."""
    points = series.points
    names = (series.name, series.fullname, series.label)
    mine = [a for a in accepted if a.matches(names, metric)]
    fixed = {}
    for a in mine:
        i = next((j for j, p in enumerate(points) if a.at(p.commit)), None)
        if i is not None and i > 0:
            fixed.setdefault(i, a.reason)
    values = np.asarray(series.values(), dtype=float)
    starts = segment_starts(values, fixed=list(fixed), min_change=min_change, min_size=min_size)
    bounds = [0, *starts, len(values)]
    out = []
    for k, i in enumerate(starts, start=1):
        change = _shift(values, bounds, k)
        direction = "" if not better else ("worse" if (change > 0) == (better == "lower") else "better")
        p = points[i]
        out.append(
            ChangePoint(
                index=i,
                commit=p.commit,
                run_time=p.run_time,
                source=p.source,
                before=float(np.median(values[bounds[k - 1] : i])),
                after=float(np.median(values[i : bounds[k + 1]])),
                change_pct=change * 100,
                direction=direction,
                accepted=fixed.get(i),
            )
        )
    return out


def unplaced(accepted: Sequence[AcceptedChange], series: Sequence[Any], metric: str) -> list[AcceptedChange]:
    """Accepted changes whose case matches some series but whose commit is in none of them (a typo,
    or a history that does not reach that commit): said, not silently ignored."""
    out = []
    for a in accepted:
        hits = [s for s in series if a.matches((s.name, s.fullname, s.label), metric)]
        if hits and not any(a.at(p.commit) for s in hits for p in s.points):
            out.append(a)
    return out


def annotate(
    history: Any, accepted: Sequence[AcceptedChange] = (), *, min_change: float = MIN_CHANGE
) -> list[AcceptedChange]:
    """Fill `change_points` of every series of a perfgate.history.runs.History (as dicts, for --json and
    the report); returns the accepted changes that match a case but no commit in its history."""
    m = history.metric
    for s in history.series:
        s.change_points = [
            c.as_dict() for c in change_points(s, m.better, accepted, metric=m.name, min_change=min_change)
        ]
    return unplaced(accepted, history.series, m.name)
