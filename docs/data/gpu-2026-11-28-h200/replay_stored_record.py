"""Replay of the sixth GPU run's stored device-time comparisons (quality.json.gz, beside this file):
what if the record's three passes had seen the comparisons' own noise? Each unchanged comparison's
stored reading is rebuilt from its change against the run's record (record x (1 + change)); 3,000
random triples of those readings stand in for the record's three passes (the last one stored, as
`scripts/record-baselines` stores it; detectable change t(0.98, 2) x their relative standard
deviation x sqrt(2), perfgate.gate.detectable's rule since 2026-11-29; tolerance 1.5%), and the other
97 unchanged readings and the 20 GPU-side +2% readings are judged against each. Python's standard
library only:

    python3 docs/data/gpu-2026-11-28-h200/replay_stored_record.py
"""

import gzip
import json
import random
import statistics
from pathlib import Path

TOLERANCE, TRIPLES = 0.015, 3000
T_98_2DF = 4.848732  # scipy.stats.t.ppf(0.98, 2): the one-sided 2% bound of Student's t with 2 degrees of freedom
run = json.loads(gzip.open(Path(__file__).with_name("quality.json.gz")).read())
rng = random.Random(0)
print("| case | false alarms (of 97), mean | p95 | +2% caught (of 20), mean | detects, median (p5..p95) |")
print("|---|---|---|---|---|")
for setup in run["setups"]:
    rows = [r for r in run["rows"] if r["case"] == setup["case"]]
    read = {kind: [setup["device_ms"] * (1 + r["device_change_pct"] / 100) for r in rows if r["kind"] == kind]
            for kind in ("unchanged", "gpu")}  # fmt: skip
    alarms, caught, detects = [], [], []
    for _ in range(TRIPLES):
        order = rng.sample(range(len(read["unchanged"])), 3)
        passes = [read["unchanged"][i] for i in order]
        stored, median = passes[-1], statistics.median(passes)
        detects.append(T_98_2DF * statistics.stdev(passes) / median * 2**0.5)
        bound = max(TOLERANCE, detects[-1])
        rest = [x for i, x in enumerate(read["unchanged"]) if i not in set(order)]
        alarms.append(sum(x / stored - 1 > bound for x in rest) / len(rest))
        caught.append(sum(x / stored - 1 > bound for x in read["gpu"]) / len(read["gpu"]))
    q = statistics.quantiles(detects, n=20)
    print(
        f"| {setup['case']} | {statistics.mean(alarms):.1%} | {statistics.quantiles(alarms, n=20)[18]:.1%}"
        f" | {statistics.mean(caught):.1%} | {statistics.median(detects):.1%} ({q[0]:.1%}..{q[18]:.1%}) |"
    )
