"""How the report.json files beside this script were made: `perfgate profile`'s producer as it stood at
commit deadd7e (nested dicts, before the typed report), run on three tiny CPU configurations; their
report.json files are kept here as written. tests/profile/test_report.py reads them back through the typed
report and writes them again, byte for byte, and holds a fresh run's report to their keys.

Run from the repository root: python tests/profile/data/capture.py OUT [NAME ...]
"""

import io
import shutil
import sys
from pathlib import Path

import torch

from perfgate.commands import load_models
from perfgate.profile import run
from perfgate.profile.config import ProfileConfig

CONFIGS = {
    # the `profiled` fixture's config in tests/profile/test_profile_run.py
    "physicsnemo-block-tiny-baseline": dict(
        model="physicsnemo-block",
        size="tiny",
        device="cpu",
        iterations=5,
        warmup=1,
        layer_rounds=5,
        trace_steps=2,
        precisions=("fp32", "bf16"),
        telemetry_interval_s=0.02,
        command="perfgate profile physicsnemo-block --device cpu",
    ),
    # blocks, a non-baseline variant (accuracy), fps, an fp16 row, a two-point sweep, NVTX (skipped on a CPU)
    "vjepa2-encoder-tiny-autocast-bf16-sweep-batch": dict(
        model="vjepa2-encoder",
        size="tiny",
        variant="autocast-bf16",
        device="cpu",
        iterations=3,
        warmup=1,
        layer_rounds=2,
        trace_steps=1,
        precisions=("fp32", "bf16", "fp16"),
        telemetry_interval_s=0.02,
        sweep=("batch", (1, 2)),
        nvtx=True,
        command="perfgate profile vjepa2-encoder --size tiny --variant autocast-bf16 --device cpu --sweep batch=1,2"
        " --nvtx",
    ),
    # the quick benchmark: benchmark and memory only
    "owl-world-model-tiny-quick": dict(
        model="owl-world-model",
        size="tiny",
        device="cpu",
        iterations=3,
        warmup=1,
        skip_detailed=True,
        telemetry_interval_s=0.02,
        command="perfgate profile owl-world-model --size tiny --skip-detailed",
    ),
}


def main(out: Path, names: list[str]) -> None:
    load_models()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one busy neighbour does not slow a 1-thread run on a 2-core machine
    for name, kw in CONFIGS.items():
        if names and name not in names:
            continue
        run_dir, _ = run.run_profile(ProfileConfig(**kw, out_dir=out / "runs"), stream=io.StringIO())
        shutil.copy(run_dir / "report.json", out / f"{name}.json")
        print(name, run_dir)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
