"""`perfgate doctor`: which variants can run on this machine, and for each that cannot, why."""

from __future__ import annotations

import argparse
import json

from perfgate.cases.conversions import Env
from perfgate.cases.variants import VARIANTS
from perfgate.commands import CommandError, project_file
from perfgate.gate import policy as policy_mod
from perfgate.gate.policy import Policy
from perfgate.measure.device import default_device, device_error, resolve
from perfgate.measure.fingerprint import fingerprint, fingerprint_id
from perfgate.output.text import text_table

HELP = "show which optimisation variants run here and what is missing for the others"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--pyproject",
        default=None,
        metavar="FILE",
        help="where [tool.perfgate] is read for each case's tolerance (a file that must exist; default "
        "./pyproject.toml, the defaults when it is absent)",
    )
    p.add_argument(
        "--baselines",
        default="baselines",
        help="baseline folder: each recorded case's detectable change is listed (default baselines)",
    )


def detectable_rows(baselines_root: str, fp_id: str, policy: Policy | None = None) -> list:
    """Each case of this fingerprint's newest baselines with the smallest change the gate reports for
    it under `policy` (the project's; perfgate.gate.detectable.smallest_change); a broken baseline
    file is a CommandError."""
    from perfgate.gate import detectable
    from perfgate.gate import store as baseline_store

    policy = policy or Policy()
    folder = baseline_store.baseline_dir(baselines_root, fp_id)
    records = {}
    try:
        for path in reversed(baseline_store.numbered_files(folder)):
            for name, b in baseline_store.by_name(baseline_store.load(path)).items():
                records.setdefault(name.split("::")[-1], b.record)
    except baseline_store.BaselineError as exc:
        raise CommandError(str(exc)) from None
    return detectable.case_table(records, lambda r, m: policy.settings(r.model, r.variant, m, r.device))


def report(device: str) -> dict:
    env = Env.detect(device)
    fp = fingerprint(device)
    return {
        "device": device,
        "fingerprint_id": fingerprint_id(fp),
        "fingerprint": fp,
        "variants": {
            name: {"available": (r := v.unavailable(env)) is None, "reason": r, "description": v.description}
            for name, v in VARIANTS.items()
        },
    }


def run(args: argparse.Namespace) -> int:
    device = args.device or default_device()
    if (err := device_error(device)) is not None:
        raise CommandError(f"--device {err}")
    data = report(str(resolve(device)))
    try:
        policy = policy_mod.load(project_file(args.pyproject))
    except policy_mod.PolicyError as exc:
        raise CommandError(str(exc)) from None
    rows = detectable_rows(args.baselines, data["fingerprint_id"], policy)
    data["detectable"] = {r.case: {"detects": r.detects, "misses_5pct": r.misses_target} for r in rows}
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    fp = data["fingerprint"]
    print(f"device {data['device']}  fingerprint {data['fingerprint_id']}")
    print(
        f"torch {fp['torch']}  torchao {fp['torchao']}  torch-tensorrt {fp['torch_tensorrt']}  cuda {fp['cuda']}  "
        f"gpu {fp['gpu_name']} (cc {fp['compute_capability']})  cpu {fp['cpu_model']} {' '.join(fp['cpu_flags'])}  "
        f"threads {fp['threads']}"
    )
    variant_rows = [
        [n, "yes" if v["available"] else "no", v["reason"] or v["description"]] for n, v in data["variants"].items()
    ]
    print("\n".join(text_table(("variant", "runs here", "why not / what it is"), variant_rows)))
    if rows:
        missing = [r for r in rows if r.misses_target]
        print(
            f"\ndetectable change per recorded case ({args.baselines}, this fingerprint): {len(missing)} of "
            f"{len(rows)} cannot detect 5% on this runner (latency: its noise, its tolerance or a flag), or "
            "recorded no noise (record with --passes 3)"
        )
        if missing:
            print("\n".join(text_table(("case", "detects"), [[r.case, r.line] for r in missing])))
    return 0
