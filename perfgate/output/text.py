"""Numbers as text and the one aligned text table every command prints."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def fmt(v: Any, spec: str = ".3f") -> str:
    """A table cell: '-' for None, floats with `spec`, anything else as str()."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def fmt_num(v: float | None, digits: int = 4) -> str:
    """About `digits` significant digits, no exponent in the usual range: 6.500, 153.8, 12,345."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 10**digits:
        return f"{v:,.0f}"
    if a < 1e-3:
        return f"{v:.2e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    return f"{v:.{decimals}f}"


def fmt_g(v: Any, digits: int = 4) -> str:
    """`digits` significant digits ('%g'), '-' for anything that is not a number."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    return f"{v:.{digits}g}"


def value_format(values: Sequence[float]) -> str:
    """One format spec for a column: about four significant digits of its largest value."""
    big = max((abs(v) for v in values), default=0.0)
    if big == 0 or big >= 1000:
        return ".0f" if big else ".3g"
    if big < 0.01:
        return ".2e"
    return f".{max(0, 3 - math.floor(math.log10(big)))}f"


def _numeric(cell: str) -> bool:
    try:
        float(cell.split()[0].rstrip("x%").replace(",", ""))
        return True
    except (ValueError, IndexError):
        return cell == "-"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A plain aligned table: numbers to the right, text to the left; a dashed rule under the header."""
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def sparkline(values: Sequence[float | None]) -> str:
    """Unicode block sparkline scaled to the values' own range; a gap for a missing value."""
    nums = [v for v in values if v is not None and math.isfinite(v)]
    if not nums:
        return ""
    lo, hi = min(nums), max(nums)
    top = len(SPARK_BLOCKS) - 1
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        elif hi == lo:
            out.append(SPARK_BLOCKS[top // 2])
        else:
            out.append(SPARK_BLOCKS[round((v - lo) / (hi - lo) * top)])
    return "".join(out)
