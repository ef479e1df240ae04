"""What changed between two counts, named: the functions whose instructions moved most (self and
inclusive, from two callgrind windows) and the aten op calls per step that changed. Pure: tables in,
lines of text out; the gate puts them in a regression's verdict.

Reading one: `at::native::addmm self +3.9M (+8.1%), inclusive +4.2M (+8.0%)` says the window
executed 3.9 million more instructions in addmm's own code (its callees excluded) and 4.2 million
more in it and what it called. Self names where the work is; inclusive which caller asked for it.
Python's interpreter functions recurse, so their inclusive figures count nested frames more than
once (callgrind's `'2` suffix marks a recursion level): read their self counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfgate.record import InstructionCount


def _m(n: float) -> str:
    """A count of instructions in short: 3.9M, 120k, 512."""
    a = abs(n)
    if a >= 1e9:
        return f"{n / 1e9:+.2f}G"
    if a >= 1e6:
        return f"{n / 1e6:+.2f}M"
    if a >= 1e3:
        return f"{n / 1e3:+.1f}k"
    return f"{n:+.0f}"


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%" if old else "new"


def short_name(name: str, width: int = 90) -> str:
    """C++ signatures run to hundreds of characters: keep the head and say it was cut."""
    return name if len(name) <= width else name[: width - 3] + "..."


def function_changes(
    base: Mapping[str, list[int]],
    cur: Mapping[str, list[int]],
    *,
    base_steps: int = 1,
    cur_steps: int = 1,
    top: int = 5,
) -> list[str]:
    """The `top` functions whose self count per step changed most (either way), largest first, each
    with its inclusive change. Counts are scaled to per-window of the current run's steps."""
    scale = cur_steps / base_steps if base_steps else 1.0
    rows = []
    for name in set(base) | set(cur):
        b_self, b_incl = (v * scale for v in base.get(name, [0, 0]))
        c_self, c_incl = cur.get(name, [0, 0])
        rows.append((c_self - b_self, name, b_self, c_self, b_incl, c_incl))
    rows.sort(key=lambda r: (-abs(r[0]), r[1]))
    out = []
    for delta, name, b_self, c_self, b_incl, c_incl in rows[:top]:
        if not delta and b_incl == c_incl:
            break
        out.append(
            f"{short_name(name)} self {_m(delta)} ({_pct(c_self, b_self)}), "
            f"inclusive {_m(c_incl - b_incl)} ({_pct(c_incl, b_incl)})"
        )
    return out


def op_changes(base: Mapping[str, float], cur: Mapping[str, float], *, top: int = 8) -> list[str]:
    """aten ops whose calls per step changed: `aten::linear 8 -> 8.4` (most changed first)."""
    rows = [
        (cur.get(n, 0.0) - base.get(n, 0.0), n)
        for n in set(base) | set(cur)
        if abs(cur.get(n, 0.0) - base.get(n, 0.0)) > 1e-9
    ]
    rows.sort(key=lambda r: (-abs(r[0]), r[1]))
    return [f"{n} {base.get(n, 0.0):g} -> {cur.get(n, 0.0):g}" for _, n in rows[:top]]


def _steps(block: InstructionCount | None) -> int:
    """The steps in a record's counted window (1 where it does not say)."""
    return (block.steps if block else None) or 1


def cause(base_record: object, cur_record: object, *, top: int = 5) -> str:
    """One line naming what changed between two records' counts (functions, then ops), or ''."""
    parts = []
    bf, cf = getattr(base_record, "instructions_functions", None), getattr(cur_record, "instructions_functions", None)
    if bf and cf:
        steps = [_steps(getattr(r, "instructions", None)) for r in (base_record, cur_record)]
        fns = function_changes(bf, cf, base_steps=steps[0], cur_steps=steps[1], top=top)
        if fns:
            parts.append(f"functions per {steps[1]} steps: " + "; ".join(fns))
    bo, co = getattr(base_record, "aten_ops_per_step", None), getattr(cur_record, "aten_ops_per_step", None)
    if bo is not None and co is not None:
        ops = op_changes(bo, co)
        parts.append("aten op calls per step: " + ("; ".join(ops) if ops else "unchanged"))
    return " | ".join(parts)
