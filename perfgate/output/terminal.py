"""What perfgate prints to a terminal: the end of a pytest run (per model the optimisation table,
then the gate's verdicts), `perfgate compare`'s verdict table and `perfgate history`'s view."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.gate.metrics import METRIC_UNITS
from perfgate.gate.verdict_file import VerdictSet
from perfgate.history.runs import unit_of
from perfgate.measure.stats import TAIL_MIN_SAMPLES
from perfgate.output.report_data import group_title
from perfgate.output.text import fmt, fmt_num, sparkline, text_table, value_format
from perfgate.record import HISTORY_FIELDS, CaseRecord

# The gated figure first (the median), the spread after; mean, min and max are in the JSON and the report.
OPT_HEADERS = (
    "variant",
    "median ms",
    "p90 ms",
    "std ms",
    "peak MiB",
    "throughput",
    "TFLOP/s (of peak)",
    "speedup",
    "accuracy",
    "energy",
)
TAIL_NOTE = (
    f"too few timed rounds for a p90 (MLPerf LoadGen's floor: {TAIL_MIN_SAMPLES['p90_ms']} samples, "
    f"p99 {TAIL_MIN_SAMPLES['p99_ms']}); --perfgate-min-rounds {TAIL_MIN_SAMPLES['p90_ms']} measures one"
)
VERDICT_HEADERS = ("verdict", "case", "metric", "baseline", "current", "change", "change of")
# Verdicts that need no action: counted per metric, listed only on request. "no baseline" is a
# state of the baseline file, said once by the session's notice and listed by name when few.
QUIET = (gate.UNCHANGED, gate.NO_BASELINE)
NAMED_MAX = 8  # cases without a baseline named in the summary line, at most
SHOW_UNCHANGED_HINT = "--perfgate-show-unchanged (or -vv)"  # the pytest run's way to list them


def accuracy_parts(rec: CaseRecord, psnr_unit: str = "dB") -> list[str]:
    """['relL2 1.2e-03', 'cos 0.99990', 'PSNR 41.2dB'] from the measures the case has."""
    acc = rec.accuracy or {}
    parts = []
    if isinstance(acc.get("rel_l2"), (int, float)):
        parts.append(f"relL2 {acc['rel_l2']:.1e}")
    if isinstance(acc.get("cosine"), (int, float)):
        parts.append(f"cos {acc['cosine']:.5f}")
    if isinstance(acc.get("psnr_db"), (int, float)):
        parts.append("PSNR inf" if acc["psnr_db"] == float("inf") else f"PSNR {acc['psnr_db']:.1f}{psnr_unit}")
    return parts


def _tflops(rec: CaseRecord) -> str:
    if rec.achieved_tflops is None:
        return "-"
    return f"{rec.achieved_tflops:.3g}" + (f" ({rec.peak_share:.0%})" if rec.peak_share is not None else "")


def optimisation_rows(records: Sequence[CaseRecord]) -> list[list[str]]:
    """One row per variant in the style of the seeds' optimisation history."""
    rows = []
    for r in records:
        thr = r.throughput_primary
        rows.append(
            [
                r.variant,
                fmt(r.median_ms),
                fmt(r.p90_ms) if r.p90_ms is not None or not r.tail_note else f"n<{TAIL_MIN_SAMPLES['p90_ms']}",
                fmt(r.std_ms),
                fmt(r.peak_mem_mib, ".1f"),
                f"{thr:.1f} {r.unit}/s" if thr else "-",
                _tflops(r),
                f"{r.speedup:.2f}x" if r.speedup else "-",
                " ".join(accuracy_parts(r)),
                energy_cell(r),
            ]
        )
    return rows


def energy_cell(rec: CaseRecord) -> str:
    """Frames per joule where the model counts frames, else joules per step; '-' when skipped
    (the reason is in extra_info's energy_skipped)."""
    if rec.frames_per_j is not None:
        return f"{rec.frames_per_j:.3g} frames/J"
    return f"{rec.energy_j_per_step:.3g} J/step" if rec.energy_j_per_step is not None else "-"


def speedup_notes(records: Sequence[CaseRecord]) -> list[str]:
    """Why a table's speedup cells are '-': one line per reason the session recorded, naming the
    variants when not all of the table share it."""
    by_note: dict[str, list[str]] = {}
    for r in records:
        if not r.speedup and r.speedup_note:
            by_note.setdefault(r.speedup_note, []).append(r.variant)
    return [
        f"  speedup -: {note}" + ("" if len(variants) == len(records) else f" ({', '.join(variants)})")
        for note, variants in by_note.items()
    ]


# ----------------------------------------------------------------------------- verdicts


def metric_unit(metric: str) -> str:
    """The unit of a verdict's baseline and current: the gated metric's, or a budget's field's."""
    if metric.startswith("budget:"):
        name = metric.split(":", 1)[1]
        return (HISTORY_FIELDS.get(name, (None, None, None))[2]) or unit_of(name)
    return METRIC_UNITS.get(metric, "")


# Per unit the precision the optimisation tables print (ms to the microsecond, MiB to 0.1).
_UNIT_FORMAT = {"ms": ".3f", "MiB": ".1f", "x": ".2f", "J": ".4g", "": ".2e"}


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    spec = _UNIT_FORMAT.get(unit)
    text = format(v, spec) if spec and abs(v) < 1e5 else fmt_num(v, 4)
    return text + ("x" if unit == "x" else f" {unit}" if unit else "")


def case_names(cases: Sequence[str]) -> dict[str, str]:
    """Each verdict's case as a row names it: the parametrised id ('owl-world-model-tiny-compile')
    where every case is one test function's ('test_step[...]'), else the test's own name."""
    tails = {c: c.split("::")[-1] for c in cases}
    ids = {c: re.fullmatch(r"(\w+)\[(.*)\]", t) for c, t in tails.items()}
    functions = {m.group(1) if m else None for m in ids.values()}
    if len(functions) == 1 and None not in functions:
        return {c: m.group(2) for c, m in ids.items() if m}
    return tails


def verdict_block(verdicts: Sequence[gate.Verdict]) -> list[str]:
    """The verdicts as a table, regressions first, each with the gate's reason on the line below
    (indented to the case column): what was compared, and why the verdict is what it is."""
    ordered = gate.sort_verdicts(verdicts)
    names = case_names([v.case for v in ordered])
    rows = [
        [
            v.verdict,
            names[v.case],
            v.metric,
            _value(v.baseline, metric_unit(v.metric)),
            _value(v.current, metric_unit(v.metric)),
            fmt(v.change_pct, "+.1f") + ("%" if v.change_pct is not None else ""),
            v.compared or ("not compared" if v.baseline is None else "-"),  # unreliable, no baseline, error
        ]
        for v in ordered
    ]
    table = text_table(VERDICT_HEADERS, rows)
    indent = " " * (len(table[1].split("  ")[0]) + 2)
    out = table[:2]
    # Rows that share their reason (one stale baseline, say) are followed by it once.
    i = 0
    while i < len(ordered):
        j = i + 1
        while j < len(ordered) and ordered[j].message == ordered[i].message:
            j += 1
        out += table[2 + i : 2 + j]
        if ordered[i].message:
            out.append(indent + (f"(the {j - i} rows above) " if j - i > 1 else "") + ordered[i].message)
        i = j
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word.endswith("s") else f"{n} {word}s"


def count_phrase(verdicts: Sequence[gate.Verdict]) -> str:
    """'1 regression, 3 unreliable, 2 inconclusive' in the gate's order."""
    c = Counter(v.verdict for v in verdicts)
    order = [k for k in gate.VERDICT_ORDER if k in c] + sorted(k for k in c if k not in gate.VERDICT_ORDER)
    counted = (gate.REGRESSION, gate.IMPROVEMENT, gate.ERROR, gate.KNOWN_DEFECT)  # nouns; the rest are adjectives
    return ", ".join(_plural(c[k], k) if k in counted else f"{c[k]} {k}" for k in order)


def quiet_lines(verdicts: Sequence[gate.Verdict], hint: str) -> list[str]:
    """The verdicts that need no action, as counts: unchanged per metric, the cases without a baseline."""
    out = []
    unchanged = Counter(v.metric for v in verdicts if v.verdict == gate.UNCHANGED)
    if unchanged:
        per = ", ".join(f"{n} {metric}" for metric, n in unchanged.items())
        out.append(f"unchanged: {per} (each within its tolerance; {hint} lists them with the reasons)")
    missing = sorted({v.case for v in verdicts if v.verdict == gate.NO_BASELINE})
    if missing:
        names = case_names(missing)
        listed = ": " + ", ".join(names[c] for c in missing) if len(missing) <= NAMED_MAX else ""
        out.append(f"no baseline (not compared): {len(missing)} case(s){listed}")
    return out


def verdict_table(
    verdicts: Sequence[gate.Verdict], *, show_unchanged: bool = False, hint: str = "--show-unchanged"
) -> list[str]:
    """The gate's verdicts for a terminal: a count line, the ones that need attention (regressions,
    budget misses, errors, unreliable, inconclusive, improvements) with their reasons, then the
    unchanged ones as counts per metric (`show_unchanged`: listed as well). `hint` is the option
    that lists them. Shared by the pytest run, `perfgate compare` and `perfgate ab`."""
    attention = [v for v in verdicts if v.verdict not in QUIET]
    quiet = [v for v in verdicts if v.verdict in QUIET]
    head = f"gate verdicts: {len(attention)} need attention" + (f" ({count_phrase(attention)})" if attention else "")
    lines = [head + (f"; {count_phrase(quiet)}" if quiet else "")]
    if attention:
        lines += ["", "needs attention (regressions first):", *verdict_block(attention)]
    if quiet:
        lines += [""]
        lines += ["unchanged and not compared:", *verdict_block(quiet)] if show_unchanged else quiet_lines(quiet, hint)
    return lines


def recap_line(verdicts: Sequence[gate.Verdict]) -> str | None:
    """The run's last perfgate line: what needs attention, counted, so it is seen without scrolling."""
    if not verdicts:
        return None
    attention = [v for v in verdicts if v.verdict not in QUIET]
    quiet = [v for v in verdicts if v.verdict in QUIET]
    if not attention:
        return f"perfgate: nothing needs attention ({count_phrase(quiet)})"
    return f"perfgate: {count_phrase(attention)} need attention (listed under 'needs attention' above)" + (
        f"; {count_phrase(quiet)}" if quiet else ""
    )


def compare_line(paths: Sequence[Any], elsewhere: Sequence[str]) -> str | None:
    """The one line on pytest-benchmark's --benchmark-compare: which file(s) its table compared
    with and, where one came from another machine, how that machine differs (`elsewhere`)."""
    if not paths:
        return None
    line = f"perfgate: pytest-benchmark's table compared with {', '.join(map(str, paths))}"
    if elsewhere:
        line += f", measured on another machine ({'; '.join(dict.fromkeys(elsewhere))})"
    return line


def skip_summary(skips: dict[str, str]) -> dict[str, int]:
    """Skipped cases per reason, the most common first."""
    return dict(Counter(skips.values()).most_common())


def run_lines(
    records: Mapping[str, CaseRecord], verdicts: VerdictSet, *, no_baseline: bool = False, show_unchanged: bool = False
) -> list[str]:
    """The end of a pytest run (its records by node id, its verdicts): the verdicts (what needs
    attention first, the unchanged counted), the no-baseline notice, per model group its table,
    then the skip reasons."""
    groups: dict[str, list[CaseRecord]] = {}
    for rec in records.values():
        groups.setdefault(group_title(rec), []).append(rec)
    lines = ["", "=" * 30 + " perfgate " + "=" * 30, f"fingerprint: {verdicts.fingerprint_id}"]
    # Without any baseline the notice below says it once for all cases, not per case as well.
    shown = [v for v in verdicts.verdicts if not (no_baseline and v.verdict == gate.NO_BASELINE)]
    if shown:
        lines += ["", *verdict_table(shown, show_unchanged=show_unchanged, hint=SHOW_UNCHANGED_HINT)]
    for notice in verdicts.notices:
        lines += ["", notice]
    for title, recs in groups.items():
        lines += ["", title, *text_table(OPT_HEADERS, optimisation_rows(recs)), *speedup_notes(recs)]
    if any(r.p90_ms is None and r.tail_note for recs in groups.values() for r in recs):
        lines += [f"(p90 n<{TAIL_MIN_SAMPLES['p90_ms']}: {TAIL_NOTE})"]
    throttled = [r.throttle.dropped for recs in groups.values() for r in recs if r.throttle and r.throttle.dropped]
    if throttled:
        lines += [f"(GPU: {sum(throttled)} throttled round(s) dropped in {len(throttled)} case(s); see `throttle`)"]
    skipped = {r.energy_skipped for recs in groups.values() for r in recs if r.energy_skipped}
    if skipped:
        lines += [f"(energy '-': {'; '.join(sorted(skipped))})"]
    if verdicts.skipped:
        lines += ["", "skipped variants:"]
        lines += [f"  {n:3d} x {reason}" for reason, n in skip_summary(verdicts.skipped).items()]
    return lines


# ----------------------------------------------------------------------------- perfgate history


def change_word(change_pct: float | None, better: str, noise_pct: float = 0.0) -> str:
    """'+3.2% worse' style tag for a change, by the metric's direction ('lower', 'higher' or '')."""
    if change_pct is None:
        return "-"
    tag = ""
    if better and abs(change_pct) > noise_pct:
        worse = change_pct > 0 if better == "lower" else change_pct < 0
        tag = " worse" if worse else " better"
    return f"{change_pct:+.1f}%{tag}"


def _when(p: Any) -> str:
    t = p.run_time or p.commit_time
    return t[:16].replace("T", " ") if t else "-"


def history_lines(history: Any, *, last: int = 20, brief: bool = False) -> list[str]:
    """`perfgate history`: per case a sparkline and the entries with their change (a
    perfgate.history.runs.History); `brief`: one line per case."""
    m = history.metric
    unit = f" {m.unit}" if m.unit else ""
    direction = f", {m.better} is better" if m.better else ""
    lines = [
        f"{m.name} ({m.label}{', ' + m.unit if m.unit else ''}{direction}); "
        f"{history.files} file(s), {len(history.series)} case(s)" + (f", last {last} entries" if last > 0 else "")
    ]
    by_fp: dict[str, list[Any]] = {}
    for s in history.series:
        by_fp.setdefault(s.fingerprint_id, []).append(s)
    for fp, series in by_fp.items():
        lines += ["", f"fingerprint {fp}"]
        if brief:
            rows = []
            for s in series:
                pts = s.points[-last:] if last > 0 else s.points
                rows.append(
                    [
                        s.label,
                        sparkline([p.value for p in pts]),
                        str(len(s.points)),
                        format(pts[-1].value, value_format([pts[-1].value])) + unit,
                        change_word(pts[-1].change_pct, m.better),
                    ]
                )
            lines += ["  " + r for r in text_table(("case", "trend", "entries", "last", "change"), rows)]
            continue
        for s in series:
            pts = s.points[-last:] if last > 0 else s.points
            spec = value_format([p.value for p in pts])
            n = len(s.points)
            lines += ["", f"{s.label}  {sparkline([p.value for p in pts])}  ({n} {'entry' if n == 1 else 'entries'})"]
            rows = [
                [
                    _when(p),
                    (p.commit or "-")[:8] + ("*" if p.dirty else ""),
                    format(p.value, spec),
                    change_word(p.change_pct, m.better),
                    Path(p.source).name,
                    "unreliable" if p.unreliable else "",
                ]
                for p in pts
            ]
            lines += [
                "  " + r.rstrip()
                for r in text_table(("run time (UTC)", "commit", f"{m.name}", "change", "file", "note"), rows)
            ]
    if any(p.dirty for s in history.series for p in s.points) and not brief:
        lines += ["", "* run from a working tree with uncommitted changes"]
    return lines
