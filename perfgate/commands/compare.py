"""`perfgate compare BASELINE.json CURRENT.json`: the gate outside pytest."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfgate import files, gate
from perfgate.commands import CommandError, project_file
from perfgate.exitcodes import FAILED as EXIT_REGRESSION
from perfgate.gate import policy as policy_mod
from perfgate.gate import store
from perfgate.measure.fingerprint import differences
from perfgate.output.terminal import verdict_table

HELP = "apply the regression gate to two pytest-benchmark JSON files (baseline first)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", type=Path, help="baseline JSON (a recorded baseline or --benchmark-json output)")
    p.add_argument("current", type=Path, help="current JSON")
    p.add_argument(
        "--pyproject",
        type=Path,
        default=None,
        metavar="FILE",
        help="where [tool.perfgate] is read (a file that must exist; default ./pyproject.toml, the defaults when it "
        "is absent)",
    )
    p.add_argument(
        "--allow-other-fingerprint",
        action="store_true",
        help="compare runs from different machines (speedups stay meaningful, milliseconds do not)",
    )
    p.add_argument("--ratchet", action="store_true", help="fail on an unexpected improvement too")
    p.add_argument(
        "--show-unchanged",
        action="store_true",
        help="list the unchanged verdicts with their reasons too (default: counts)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the verdicts as JSON here")


def compare_files(
    base_path: Path, cur_path: Path, policy: policy_mod.Policy, *, allow_other: bool = False
) -> list[gate.Verdict]:
    try:
        base = store.load(base_path)
        cur = store.load(cur_path, remedy=f"write it again with: pytest benchmarks --benchmark-json {cur_path}")
    except store.BaselineError as exc:
        raise CommandError(str(exc)) from None
    diff = differences(base["perfgate"]["fingerprint"], cur["perfgate"]["fingerprint"])
    if diff and not allow_other:
        what = ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in diff.items())
        raise CommandError(
            f"{cur_path}: other fingerprint than {base_path} ({what}); compare runs of one machine or pass "
            "--allow-other-fingerprint"
        )
    base_by = store.by_name(base)
    fp = cur["perfgate"]["fingerprint"]
    hardware = fp.get("gpu_name") or fp.get("cpu_model") or ""
    verdicts: list[gate.Verdict] = []
    for entry in store.by_name(cur).values():
        name, record = entry.fullname, entry.record
        base = base_by.get(name)
        verdicts += gate.compare(name, record, base.record if base else None, policy)
        verdicts += gate.absolute_checks(name, record, policy, hardware)
    return gate.sort_verdicts(verdicts)


def run(args: argparse.Namespace) -> int:
    try:
        policy = policy_mod.load(project_file(args.pyproject))
    except policy_mod.PolicyError as exc:
        raise CommandError(str(exc)) from None
    verdicts = compare_files(args.baseline, args.current, policy, allow_other=args.allow_other_fingerprint)
    print("\n".join(verdict_table(verdicts, show_unchanged=args.show_unchanged)))
    if args.json:
        files.write_json(args.json, {"verdicts": [v.as_dict() for v in verdicts]})
    bad = gate.failing(verdicts, fail_on_improvement=args.ratchet)
    for v in bad:
        print(f"FAIL {v.case} {v.metric}: {v.message or v.verdict}")
    return EXIT_REGRESSION if bad else 0
