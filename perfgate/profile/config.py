"""What a profile run measures: its configuration, the sweep's points and the checks on both.

Every check runs before the run folder is made, so bad input costs a line, not minutes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfgate.cases.variants import VARIANTS
from perfgate.cases.workload import ModelSpec, default_size, get_model, sizes
from perfgate.measure.core import StopRule, WarmupRule
from perfgate.measure.device import bind

PRECISIONS = {"fp32": "baseline", "bf16": "autocast-bf16", "fp16": "autocast-fp16"}


class ProfileError(ValueError):
    """Bad input for a profile (unknown model, size or option); the message says how to fix it."""


class ProfileUnavailable(RuntimeError):
    """The profile cannot run on this machine (no CUDA, a variant that needs what is missing)."""


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    model: str
    size: str | None = None  # None: the device's default size
    variant: str = "baseline"
    device: str = "cpu"
    iterations: int = 50
    warmup: int = 5
    batch: int = 1
    options: dict[str, Any] = field(default_factory=dict)
    sweep: tuple[str, tuple[Any, ...]] | None = None  # (option, values); also "size", "batch", "variant"
    skip_detailed: bool = False
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    precision_budget_s: float = 20.0  # per precision; fp16 is emulated slowly on many CPUs
    layer_rounds: int = 10
    trace_steps: int = 3
    top_ops: int = 15
    telemetry_interval_s: float = 0.1
    nvtx: bool = False
    seed: int = 0
    checkpoint: str | None = None
    out_dir: Path = Path(".perfgate/profiles")
    command: str = ""  # the command line that reproduces this profile


@dataclass(frozen=True, kw_only=True)
class ProfilePoint:
    """One sweep point: what build_workload and the variant get."""

    size: str
    batch: int
    variant: str
    options: dict[str, Any]
    label: str  # "" without a sweep, else e.g. "img_size=256"

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in self.label) or "run"


def spec_of(model: str) -> ModelSpec:
    try:
        return get_model(model)
    except KeyError as exc:
        raise ProfileError(str(exc.args[0])) from None


def points(cfg: ProfileConfig) -> list[ProfilePoint]:
    """The sweep's points in order (a single point without a sweep)."""
    spec = spec_of(cfg.model)
    size = cfg.size or default_size(spec, torch.device(cfg.device).type)
    base = ProfilePoint(size=size, batch=cfg.batch, variant=cfg.variant, options=dict(cfg.options), label="")
    if cfg.sweep is None:
        return [base]
    key, values = cfg.sweep
    if not values:
        raise ProfileError(f"--sweep {key}= names no values; give them as {key}=A,B,C")
    out = []
    for v in values:
        label = f"{key}={v}"
        if key == "size":
            out.append(dataclasses.replace(base, size=str(v), label=label))
        elif key == "batch":
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProfileError(
                    f"--sweep batch: {v!r} is not a whole number; give batch multipliers, e.g. batch=1,2,4"
                )
            out.append(dataclasses.replace(base, batch=v, label=label))
        elif key == "variant":
            out.append(dataclasses.replace(base, variant=str(v), label=label))
        else:
            out.append(dataclasses.replace(base, options={**base.options, key: v}, label=label))
    return out


def check_config(cfg: ProfileConfig) -> torch.device:
    """The device to profile on, bound; ProfileError / ProfileUnavailable naming the option."""
    try:
        device = torch.device(cfg.device)
    except RuntimeError as exc:
        raise ProfileError(f"--device {cfg.device!r}: {exc}") from None
    if device.type not in ("cpu", "cuda"):
        raise ProfileError(f"--device {cfg.device!r}: perfgate profiles 'cpu' and 'cuda'")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ProfileUnavailable(
            f"--device {cfg.device}: this machine has no CUDA device (torch.cuda.is_available() is False); use "
            "--device cpu"
        )
    if cfg.iterations < 1:
        raise ProfileError(f"--iterations must be at least 1, got {cfg.iterations}")
    unknown = [p for p in cfg.precisions if p not in PRECISIONS]
    if unknown:
        raise ProfileError(f"--precisions {','.join(unknown)}: known precisions are {', '.join(PRECISIONS)}")
    if cfg.telemetry_interval_s <= 0:
        raise ProfileError(f"--telemetry-interval-ms must be positive, got {cfg.telemetry_interval_s * 1e3:g}")
    return bind(device)


def check_point(cfg: ProfileConfig, pt: ProfilePoint) -> None:
    """A size and variant the model has (options are checked when the workload is built)."""
    spec = spec_of(cfg.model)
    if pt.size not in sizes(spec):
        raise ProfileError(f"model {cfg.model!r} has no size {pt.size!r}; sizes: {', '.join(sizes(spec))}")
    if pt.variant not in VARIANTS:
        raise ProfileError(f"unknown variant {pt.variant!r}; known: {', '.join(VARIANTS)}")


def fixed_rounds(iterations: int) -> StopRule:
    """Exactly `iterations` timed rounds, as the guide's benchmark does."""
    return StopRule(min_rounds=iterations, max_rounds=iterations, budget_s=math.inf)


def warmup_rounds(n: int) -> WarmupRule:
    return WarmupRule(min_rounds=n, max_rounds=n, window=max(1, min(3, n // 2 or 1)), budget_s=math.inf)
