"""End-of-session output as data and text: optimisation tables, verdict table, Markdown, JSON."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from perfgate import gate


def fmt(v: Any, spec: str = ".3f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _numeric(cell: str) -> bool:
    try:
        float(cell.split()[0].rstrip("x%").replace(",", ""))
        return True
    except (ValueError, IndexError):
        return cell == "-"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A plain aligned table: numbers to the right, text to the left."""
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _accuracy(info: dict[str, Any]) -> str:
    acc = info.get("accuracy") or {}
    parts = [f"relL2 {acc['rel_l2']:.1e}" if "rel_l2" in acc else "", f"cos {acc['cosine']:.5f}" if "cosine" in acc else ""]
    if "psnr_db" in acc:
        parts.append(f"PSNR {acc['psnr_db']:.1f}dB" if acc["psnr_db"] != float("inf") else "PSNR inf")
    return " ".join(p for p in parts if p)


OPT_HEADERS = ("variant", "mean ms", "min ms", "max ms", "std ms", "p90 ms", "peak MiB", "throughput", "TFLOP/s (of peak)", "speedup", "accuracy")


def _tflops(info: dict[str, Any]) -> str:
    if info.get("achieved_tflops") is None:
        return "-"
    share = info.get("peak_share")
    return f"{info['achieved_tflops']:.3g}" + (f" ({share:.0%})" if share is not None else "")


def optimisation_rows(infos: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per variant in the style of the seeds' optimisation history."""
    rows = []
    for i in infos:
        unit = i.get("unit", "")
        thr = i.get("throughput", {}).get(unit)
        rows.append([
            i["variant"], fmt(i["mean_ms"]), fmt(i["min_ms"]), fmt(i["max_ms"]), fmt(i["std_ms"]), fmt(i["p90_ms"]),
            fmt(i.get("peak_mem_mib"), ".1f"), f"{thr:.1f} {unit}/s" if thr else "-", _tflops(i),
            f"{i['speedup']:.2f}x" if i.get("speedup") else "-", _accuracy(i),
        ])
    return rows


def group_by_model(results: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results.values():
        i = r.extra_info
        opts = "".join(f" {k}={v}" for k, v in sorted((i.get("options") or {}).items()))
        groups[f"{i['model']} [{i['size']}{opts}] on {i['device']}"].append(i)
    return groups


VERDICT_HEADERS = ("case", "metric", "baseline", "current", "change %", "p-value", "verdict")


def verdict_rows(verdicts: Sequence[gate.Verdict]) -> list[list[str]]:
    return [
        [v.case.split("::")[-1], v.metric, fmt(v.baseline), fmt(v.current), fmt(v.change_pct, "+.1f"), fmt(v.p_value, ".2g"), v.verdict]
        for v in gate.sort_verdicts(verdicts)
    ]


def skip_summary(skips: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for reason in skips.values():
        counts[reason] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def terminal_lines(session: Any) -> list[str]:
    lines = ["", "=" * 30 + " perfgate " + "=" * 30, f"fingerprint: {session.fingerprint_id}"]
    for title, infos in group_by_model(session.results).items():
        lines += ["", title, *text_table(OPT_HEADERS, optimisation_rows(infos))]
    if session.verdicts:
        lines += ["", "gate verdicts (regressions first):", *text_table(VERDICT_HEADERS, verdict_rows(session.verdicts))]
    if session.gate_enabled and session.results and session.load_baseline() is None:
        lines += ["", session.no_baseline_notice()]
    if session.skips:
        lines += ["", "skipped variants:"]
        lines += [f"  {n:3d} x {reason}" for reason, n in skip_summary(session.skips).items()]
    return lines


def markdown(session: Any) -> str:
    """Short job-summary / PR-comment Markdown: regressions first."""
    verdicts = gate.sort_verdicts(session.verdicts)
    bad = gate.failing(verdicts, fail_on_improvement=session.fail_on_improvement)
    if not session.gate_enabled:
        head = "### perfgate: measured only (gate off)"
    else:
        head = f"### perfgate: {len(bad)} regression(s)" if bad else "### perfgate: no regression"
    out = [head, "", f"fingerprint `{session.fingerprint_id}`", ""]
    if verdicts:
        out += ["| " + " | ".join(VERDICT_HEADERS) + " |", "|" + "---|" * len(VERDICT_HEADERS)]
        out += ["| " + " | ".join(r) + " |" for r in verdict_rows(verdicts)]
    if session.gate_enabled and session.results and session.load_baseline() is None:
        out += ["", session.no_baseline_notice()]
    return "\n".join(out)


def verdict_json(session: Any) -> dict[str, Any]:
    verdicts = gate.sort_verdicts(session.verdicts)
    return {
        "fingerprint_id": session.fingerprint_id,
        "fingerprint": session.fingerprint,
        "failed": bool(gate.failing(verdicts, fail_on_improvement=session.fail_on_improvement)),
        "verdicts": [v.as_dict() for v in verdicts],
        "skipped": session.skips,
    }
