"""The gate's judges for counts: instructions per step by tolerance (no statistics: unchanged code
counts the same in every pinned process), CUDA kernel launches per step exactly. A regression's
or an improvement's message names the cause (perfgate.measure.attribution)."""

from __future__ import annotations

from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED, Verdict
from perfgate.measure.attribution import cause
from perfgate.record import CaseRecord


def spread(a: float, b: float) -> float:
    """Relative difference of two counts of the same code (0 when equal)."""
    return abs(a - b) / min(a, b) if min(a, b) > 0 else float("inf")


def judge_instructions(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    current, baseline = cur.instructions_per_step, base.instructions_per_step
    if baseline is None:
        return None
    if current is None:
        why = cur.instructions_skipped or "this run counted no instructions"
        return Verdict(
            case=case,
            metric="instructions",
            verdict=INCONCLUSIVE,
            baseline=baseline,
            message=f"the baseline has an instruction count, this run none: {why}",
        )
    key = cur.instructions.key if cur.instructions else None
    base_key = base.instructions.key if base.instructions else None
    kw = dict(
        case=case,
        metric="instructions",
        baseline=baseline,
        current=current,
        change_pct=(current / baseline - 1) * 100,
        compared="instructions per step (callgrind)",
    )
    if key and base_key and key != base_key:
        return Verdict(
            **kw,
            verdict=INCONCLUSIVE,
            message=f"counted under {key}, the baseline under {base_key}: counts are not comparable "
            "across virtual CPUs, torch builds or Pythons; record a baseline under this one",
        )
    repeat = cur.instructions.repeat_per_step if cur.instructions else None
    if repeat is not None and spread(current, repeat) > s.instructions_nondeterministic:
        return Verdict(
            **kw,
            verdict=INCONCLUSIVE,
            message=f"nondeterministic: two identical processes counted {current:,.0f} and {repeat:,.0f} "
            f"instructions per step ({spread(current, repeat):.3%} apart > {s.instructions_nondeterministic:.1%})",
        )
    change = current / baseline - 1
    what = f"{current:,.0f} instructions per step vs {baseline:,.0f} ({change:+.2%})"
    confirmed = "; confirmed by a second process" if repeat is not None else ""
    if change > s.instructions_tolerance:
        why = cause(base, cur)
        return Verdict(
            **kw,
            verdict=REGRESSION,
            message=f"{what} > {s.instructions_tolerance:.1%}{confirmed}" + (f"; {why}" if why else ""),
        )
    if change < -s.instructions_tolerance:
        # Named too: a real saving says where, and so does an unchanged case judged one (an odd baseline count).
        why = cause(base, cur)
        return Verdict(
            **kw,
            verdict=IMPROVEMENT,
            message=f"{what}: fewer by more than {s.instructions_tolerance:.1%}" + (f"; {why}" if why else ""),
        )
    return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: within {s.instructions_tolerance:.1%}")


def judge_kernels(case: str, cur: CaseRecord, base: CaseRecord, s: GateSettings) -> Verdict | None:
    """Any change of the CUDA kernel launches per step: a graph break, a lost fusion or an extra
    copy shows here without timing noise."""
    current, baseline = cur.kernels_per_step, base.kernels_per_step
    if current is None or baseline is None:
        return None
    kw = dict(
        case=case,
        metric="kernels",
        baseline=baseline,
        current=current,
        change_pct=(current / baseline - 1) * 100 if baseline else None,
        compared="CUDA kernel launches per step",
    )
    what = f"{current:g} kernel launches per step vs {baseline:g}"
    if abs(current - baseline) < 1e-9:
        return Verdict(**kw, verdict=UNCHANGED, message=f"{what}: the same")
    names = []
    bk, ck = base.kernel_names_per_step or {}, cur.kernel_names_per_step or {}
    for n in sorted(set(bk) | set(ck), key=lambda n: -abs(ck.get(n, 0) - bk.get(n, 0)))[:3]:
        if ck.get(n, 0) != bk.get(n, 0):
            names.append(f"{n[:80]} {bk.get(n, 0):g} -> {ck.get(n, 0):g}")
    ops = cause(base, cur)
    detail = "; ".join(x for x in ("; ".join(names), ops) if x)
    verdict = REGRESSION if current > baseline else IMPROVEMENT
    return Verdict(**kw, verdict=verdict, message=what + (f"; {detail}" if detail else ""))
