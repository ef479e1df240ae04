"""What perfgate prints to a terminal: the end of a pytest run (per model the optimisation table,
then the gate's verdicts), `perfgate compare`'s verdict table and `perfgate history`'s view."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate import gate
from perfgate.output.report_data import group_title
from perfgate.output.text import fmt, sparkline, text_table, value_format
from perfgate.record import CaseRecord
from perfgate.stats import TAIL_MIN_SAMPLES

OPT_HEADERS = (
    "variant",
    "mean ms",
    "min ms",
    "max ms",
    "std ms",
    "p90 ms",
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
VERDICT_HEADERS = ("case", "metric", "baseline", "current", "change %", "p-value", "verdict")


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
                fmt(r.mean_ms),
                fmt(r.min_ms),
                fmt(r.max_ms),
                fmt(r.std_ms),
                fmt(r.p90_ms) if r.p90_ms is not None or not r.tail_note else f"n<{TAIL_MIN_SAMPLES['p90_ms']}",
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


def verdict_rows(verdicts: Sequence[gate.Verdict]) -> list[list[str]]:
    return [
        [
            v.case.split("::")[-1],
            v.metric,
            fmt(v.baseline),
            fmt(v.current),
            fmt(v.change_pct, "+.1f"),
            fmt(v.p_value, ".2g"),
            v.verdict,
        ]
        for v in gate.sort_verdicts(verdicts)
    ]


def verdict_table(verdicts: Sequence[gate.Verdict]) -> list[str]:
    return text_table(VERDICT_HEADERS, verdict_rows(verdicts))


def skip_summary(skips: dict[str, str]) -> dict[str, int]:
    """Skipped cases per reason, the most common first."""
    return dict(Counter(skips.values()).most_common())


def session_lines(session: Any) -> list[str]:
    """The end of a pytest run: per model group its table, the verdicts, notices, skip reasons."""
    groups: dict[str, list[CaseRecord]] = {}
    for r in session.results.values():
        rec = CaseRecord.from_extra_info(r.extra_info)
        groups.setdefault(group_title(rec), []).append(rec)
    lines = ["", "=" * 30 + " perfgate " + "=" * 30, f"fingerprint: {session.fingerprint_id}"]
    for title, records in groups.items():
        lines += ["", title, *text_table(OPT_HEADERS, optimisation_rows(records))]
    if any(r.p90_ms is None and r.tail_note for recs in groups.values() for r in recs):
        lines += [f"(p90 n<{TAIL_MIN_SAMPLES['p90_ms']}: {TAIL_NOTE})"]
    throttled = [r.throttle["dropped"] for recs in groups.values() for r in recs if (r.throttle or {}).get("dropped")]
    if throttled:
        lines += [f"(GPU: {sum(throttled)} throttled round(s) dropped in {len(throttled)} case(s); see `throttle`)"]
    skipped = {r.energy_skipped for recs in groups.values() for r in recs if r.energy_skipped}
    if skipped:
        lines += [f"(energy '-': {'; '.join(sorted(skipped))})"]
    if session.verdicts:
        lines += ["", "gate verdicts (regressions first):", *verdict_table(session.verdicts)]
    if session.gate_enabled and session.results and session.load_baseline() is None:
        lines += ["", session.no_baseline_notice()]
    if session.skips:
        lines += ["", "skipped variants:"]
        lines += [f"  {n:3d} x {reason}" for reason, n in skip_summary(session.skips).items()]
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
    perfgate.history.History); `brief`: one line per case."""
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
