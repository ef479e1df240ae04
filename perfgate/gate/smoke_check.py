"""Check a smoke run's JSON: every measured case recorded the fields a baseline needs.

Usage: python -m perfgate.gate.smoke_check RESULTS.json  (exit 1 naming the case and field on failure)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from perfgate.record import REQUIRED_KEYS as REQUIRED  # every measured case records these
from perfgate.results import ResultFileError, benchmarks, read_benchmark_json


def problems(data: dict[str, Any]) -> list[str]:
    out = []
    entries = benchmarks(data)
    if not entries:
        return ["no benchmark was recorded"]
    for b in entries:
        missing = [k for k in REQUIRED if k not in b.written]
        if missing:
            out.append(f"{b.name}: missing {', '.join(missing)}")
        elif not all(math.isfinite(x) and x > 0 for x in b.record.samples_ms):
            out.append(f"{b.name}: non-positive or non-finite samples")
    if "perfgate" not in data:
        out.append("no perfgate block (fingerprint) in the JSON")
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    try:
        data = read_benchmark_json(path)
    except ResultFileError as exc:
        print(f"smoke check: {exc}", file=sys.stderr)
        return 1
    bad = problems(data)
    for p in bad:
        print(f"{path}: {p}", file=sys.stderr)
    print(f"smoke check: {len(benchmarks(data))} cases recorded in {path}, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
