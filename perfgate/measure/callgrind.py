"""Read a callgrind dump: the total instructions of the window and each function's self and
inclusive count.

Hand-written rather than driving `callgrind_annotate` (what torch.utils.benchmark does): that perl
script prints a text table whose layout changed between valgrind releases and needs one run per
(dump, inclusive) pair, while the format itself is specified (valgrind's "Callgrind Format
Specification") and one pass over it yields the totals and both tables. The dump's `summary:` line
is not trusted: valgrind 3.19 writes it wrapped below zero for the second and later dumps of a
process (seen: 18446744073709510994); `totals:` is right in every dump.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Code without a symbol (MKL's and oneDNN's JIT kernels) is named by its address, which moves with
# what ran before in the process: counted as one entry so two runs' tables line up.
_ADDRESS = re.compile(r"^0x[0-9a-f]+(?:'\d+)?$")
JIT = "(code without a symbol: JIT kernels)"
_LEVEL = re.compile(r"'\d+$")
_COMPRESSED = re.compile(r"\((\d+)\)(?:\s(.*))?$")
# Name kinds share one compression table each: fn/cfn (functions), fl/fi/fe/cfi/cfl (files), ob/cob.
_KIND = {"fn": "fn", "cfn": "fn", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "ob": "ob", "cob": "ob"}


class DumpError(ValueError):
    """A file that is no callgrind dump (or a truncated one); the message names it."""


@dataclass(frozen=True, kw_only=True)
class Dump:
    path: str
    total: int  # instructions (Ir) collected in the dump's window
    self_ir: dict[str, int] = field(default_factory=dict)  # function -> instructions executed in it
    inclusive_ir: dict[str, int] = field(default_factory=dict)  # function -> in it and in what it called
    trigger: str = ""  # the dump's reason ("Client Request", "Program termination")


def _name(value: str, table: dict[str, str]) -> str:
    m = _COMPRESSED.match(value)
    if not m:
        return value
    ident, name = m.groups()
    if name is not None:
        table[ident] = name
        return name
    return table.get(ident, f"({ident})")


def parse(path: str | os.PathLike[str]) -> Dump:
    """One dump file: totals and the per-function tables of its first event (Ir)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf8", errors="replace").splitlines()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read the callgrind dump ({exc.strerror})") from None
    if (
        not lines
        or not lines[0].startswith("# callgrind format")
        and not any(ln.startswith("events:") for ln in lines[:40])
    ):
        raise DumpError(f"{path}: not a callgrind dump (no '# callgrind format' header)")
    tables: dict[str, dict[str, str]] = {"fn": {}, "fl": {}, "ob": {}}
    events: list[str] = []
    ir = 0
    npos = 1
    total: int | None = None
    trigger = ""
    fn = ""
    callee = ""
    after_calls = False
    self_ir: dict[str, int] = {}
    incl: dict[str, int] = {}
    for line in lines:
        if not line or line[0] == "#":
            continue
        c = line[0]
        if c.isdigit() or c in "+-*":
            values = line.split()[npos:]  # position columns (`positions:`), then the events
            cost = int(values[ir]) if ir < len(values) else 0
            if cost >= 1 << 63:  # written unsigned: a call in progress when collection was toggled goes below 0
                cost -= 1 << 64
            if after_calls:
                if callee != fn:  # a recursive call's cost is already this function's own
                    incl[fn] = incl.get(fn, 0) + cost
                after_calls = False
            else:
                self_ir[fn] = self_ir.get(fn, 0) + cost
                incl[fn] = incl.get(fn, 0) + cost
            continue
        key, sep, value = line.partition("=")
        if sep and key in _KIND:
            name = _name(value.strip(), tables[_KIND[key]])
            if key in ("fn", "cfn") and _ADDRESS.match(name):
                name = JIT
            if key == "fn":
                fn = name
            elif key == "cfn":
                callee = name
            continue
        if key == "calls":
            after_calls = True
            continue
        if line.startswith("positions:"):
            npos = len(line.split(":", 1)[1].split())
        elif line.startswith("events:"):
            events = line.split(":", 1)[1].split()
            ir = events.index("Ir") if "Ir" in events else 0
        elif line.startswith("totals:"):
            total = int(line.split()[1 + ir])
        elif line.startswith("desc: Trigger:"):
            trigger = line.split(":", 2)[2].strip()
    if total is None:
        if not events:
            raise DumpError(f"{path}: no 'events:' line: not a callgrind dump")
        total = sum(self_ir.values())  # totals: is optional in the format; the costs sum to it
    return Dump(path=str(path), total=total, self_ir=self_ir, inclusive_ir=incl, trigger=trigger)


def merged_levels(dump: Dump) -> dict[str, list[int]]:
    """{function: [self, inclusive]} with callgrind's recursion levels (`f'2`, `f'3`) folded into
    `f`: which level a call lands on moves with the call depth the case ran at, not with its work.
    Self counts add up; the inclusive count is the largest level's (the outer call holds the inner)."""
    out: dict[str, list[int]] = {}
    for name, incl in dump.inclusive_ir.items():
        base = _LEVEL.sub("", name)
        row = out.setdefault(base, [0, 0])
        row[0] += dump.self_ir.get(name, 0)
        row[1] = max(row[1], incl)
    return out


def top_functions(dump: Dump, *, share: float = 0.002, limit: int = 120, width: int = 200) -> dict[str, list[int]]:
    """{function: [self, inclusive]} (levels merged) for the functions whose count is at least `share` of
    the window (at most `limit`, largest first, names cut to `width`): what a record keeps for
    attribution later."""
    floor = dump.total * share
    rows = merged_levels(dump)
    ranked = sorted((n for n, (s, i) in rows.items() if i >= floor or s >= floor), key=lambda n: -rows[n][1])
    return {n[:width]: rows[n] for n in ranked[:limit]}
