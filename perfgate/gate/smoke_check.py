"""Check a smoke run's JSON: every measured case recorded the fields a baseline needs.

Usage: python -m perfgate.gate.smoke_check RESULTS.json  (exit 1 naming the case and field on failure)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from perfgate.record import REQUIRED_KEYS as REQUIRED  # every measured case records these


def problems(data: dict) -> list[str]:
    out = []
    if not data.get("benchmarks"):
        return ["no benchmark was recorded"]
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        missing = [k for k in REQUIRED if k not in info]
        if missing:
            out.append(f"{b['name']}: missing {', '.join(missing)}")
        elif not all(math.isfinite(x) and x > 0 for x in info["samples_ms"]):
            out.append(f"{b['name']}: non-positive or non-finite samples")
    if "perfgate" not in data:
        out.append("no perfgate block (fingerprint) in the JSON")
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    data = json.loads(path.read_text())
    bad = problems(data)
    for p in bad:
        print(f"{path}: {p}", file=sys.stderr)
    print(f"smoke check: {len(data.get('benchmarks', []))} cases recorded in {path}, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
