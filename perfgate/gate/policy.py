"""Gate policy: defaults plus glob overrides per model, variant and metric, from pyproject.toml.

    [tool.perfgate.gate]
    latency_tolerance = 0.05        # relative slowdown of the median that counts
    alpha = 0.01                    # significance level of the one-sided Mann-Whitney U test
    normalise = true                # CPU: judge step time / reference workload time per round

    [[tool.perfgate.override]]
    model = "wan-vae-*"             # globs on model, variant, metric and device; omitted keys match everything
    variant = "compile*"
    metric = "latency"
    latency_tolerance = 0.10

    [[tool.perfgate.budget]]        # absolute real-time targets, whatever the baseline says
    model = "owl-world-model"
    size = "1b"
    variant = "compile"
    gpu = "*H100*"
    min_fps = 30
    max_p90_ms = 33

Later overrides win. Unknown keys are errors that name the key and the file, not silent typos.
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from perfgate.gate.metrics import METRIC_NAMES


class PolicyError(ValueError):
    """A bad policy; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    latency_tolerance: float = 0.05  # relative change of the median that matters
    alpha: float = 0.01  # one-sided Mann-Whitney U significance level
    memory_tolerance: float = 0.05
    memory_slack_mib: float = 16.0  # absolute slack: allocator granularity and RSS noise
    energy_tolerance: float = 0.10  # relative growth of the energy per step (one counter window, no test)
    accuracy_factor: float = 2.0  # rel_l2 may grow by this factor over the baseline's ...
    accuracy_slack: float = 1e-6  # ... plus this absolute slack before it regresses
    speedup_tolerance: float = 0.10  # relative drop of a variant's speedup over the baseline
    remeasure: int = 2  # re-measurements of a suspected latency regression before it fails
    remeasure_pooled: bool = True  # judge the suspect run and its re-measurements once, pooled (else each must regress)
    contention_max: float = 0.25  # other processes' CPU time / wall time that marks a case unreliable
    fail_on_improvement: bool = False  # ratchet: an unexpected improvement fails until re-recorded
    normalise: bool = True  # CPU latency judged on step/reference-workload ratios (cancels machine drift)
    ab_min_effect: float = 0.02  # A/B (`perfgate ab`): the smallest median slowdown a significant change must reach
    instructions_tolerance: float = 0.01  # relative change of callgrind's instructions per step that counts
    instructions_nondeterministic: float = 0.001  # two identical processes further apart: "nondeterministic"


@dataclass(frozen=True, kw_only=True)
class Override:
    model: str = "*"
    variant: str = "*"
    metric: str = "*"
    device: str = "*"  # glob on the case's device: "cpu", "cuda*"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, model: str, variant: str, metric: str, device: str = "") -> bool:
        pairs = ((model, self.model), (variant, self.variant), (metric, self.metric), (device, self.device))
        return all(fnmatch.fnmatchcase(v, p) for v, p in pairs)


@dataclass(frozen=True, kw_only=True)
class Budget:
    model: str = "*"
    size: str = "*"
    variant: str = "*"
    gpu: str = "*"  # glob on the GPU name; "cpu" entries use the CPU model
    min_fps: float | None = None
    max_p90_ms: float | None = None
    max_median_ms: float | None = None
    max_peak_mem_mib: float | None = None

    def matches(self, model: str, size: str, variant: str, hardware: str) -> bool:
        pairs = ((model, self.model), (size, self.size), (variant, self.variant), (hardware, self.gpu))
        return all(fnmatch.fnmatchcase(v, p) for v, p in pairs)


@dataclass(frozen=True, kw_only=True)
class Policy:
    defaults: GateSettings = GateSettings()
    overrides: tuple[Override, ...] = ()
    budgets: tuple[Budget, ...] = ()

    def settings(self, model: str, variant: str, metric: str, device: str = "") -> GateSettings:
        s = self.defaults
        for o in self.overrides:
            if o.matches(model, variant, metric, device):
                s = replace(s, **o.settings)
        return s

    def budgets_for(self, model: str, size: str, variant: str, hardware: str) -> list[Budget]:
        return [b for b in self.budgets if b.matches(model, size, variant, hardware)]


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    rel_l2: float
    cosine: float  # minimum
    psnr_db: float | None = None  # minimum, for images and audio


# Why these numbers: fp32 variants (compile, TensorRT fp32) only reorder float sums, ~1e-6 relative
# per op growing with depth; bf16 keeps 8 bits of mantissa (~0.4% per rounding), int8/fp8 ~1% per
# layer. Deep decoders compound it, so the bounds are loose enough for the full models yet far
# below what a broken kernel gives (rel_l2 ~1, cosine ~0).
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "baseline": Tolerance(rel_l2=1e-5, cosine=0.999999),
    "compile*": Tolerance(rel_l2=1e-3, cosine=0.9999, psnr_db=60),
    "cudagraphs": Tolerance(rel_l2=1e-5, cosine=0.999999),
    "tensorrt": Tolerance(rel_l2=1e-2, cosine=0.999, psnr_db=40),
    "*int8*": Tolerance(rel_l2=0.2, cosine=0.98, psnr_db=20),  # before *bf16*: bf16+fp8-* is judged as FP8
    "*fp8*": Tolerance(rel_l2=0.2, cosine=0.98, psnr_db=20),
    "*fp16*": Tolerance(rel_l2=0.05, cosine=0.998, psnr_db=30),
    "*bf16*": Tolerance(rel_l2=0.1, cosine=0.99, psnr_db=25),
    "*": Tolerance(rel_l2=0.1, cosine=0.99, psnr_db=25),
}


def tolerance_for(variant: str, overrides: Mapping[str, Tolerance] | None = None) -> Tolerance:
    """First matching glob, overrides before defaults, in their written order."""
    for table in (overrides or {}, DEFAULT_TOLERANCES):
        for pattern, tol in table.items():
            if fnmatch.fnmatchcase(variant, pattern):
                return tol
    raise KeyError(variant)  # unreachable: "*" matches


_SETTING_KEYS = {f.name: f.type for f in fields(GateSettings)}

# The values each setting may take, with what it means: a value outside them switches a check off
# or makes it fail always (alpha = 0 is never significant; a NaN tolerance compares false).
_RANGES: dict[str, tuple[float, float, bool, str]] = {  # (low, high, low inclusive, meaning)
    "latency_tolerance": (0.0, 10.0, True, "a relative slowdown, e.g. 0.05 for 5%"),
    "alpha": (0.0, 0.2, False, "a significance level above 0, e.g. 0.01"),
    "memory_tolerance": (0.0, 10.0, True, "a relative growth, e.g. 0.05 for 5%"),
    "memory_slack_mib": (0.0, 1e6, True, "MiB"),
    "energy_tolerance": (0.0, 10.0, True, "a relative growth, e.g. 0.10 for 10%"),
    "accuracy_factor": (1.0, 1e6, True, "a factor of at least 1 on the baseline's error"),
    "accuracy_slack": (0.0, 1.0, True, "an absolute relative-L2 slack"),
    "speedup_tolerance": (0.0, 1.0, True, "a relative drop below 1, e.g. 0.10 for 10%"),
    "remeasure": (0, 10, True, "a whole number of re-measurements, 0 to 10"),
    "contention_max": (0.0, 1024.0, True, "cores"),
    "ab_min_effect": (0.0, 1.0, True, "a relative change, e.g. 0.02 for 2%"),
    "instructions_tolerance": (0.0, 1.0, True, "a relative change, e.g. 0.01 for 1%"),
    "instructions_nondeterministic": (0.0, 1.0, True, "a relative difference, e.g. 0.001 for 0.1%"),
}


def _settings(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a table of settings, got {raw!r}")
    out = {}
    for k, v in raw.items():
        if k not in _SETTING_KEYS:
            raise PolicyError(f"{where}: unknown key {k!r}; known: {', '.join(_SETTING_KEYS)}")
        default = getattr(GateSettings(), k)
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise PolicyError(f"{where}: {k} must be true or false, got {v!r}")
            out[k] = v
            continue
        wants_int = isinstance(default, int)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (wants_int and not float(v).is_integer()):
            raise PolicyError(f"{where}: {k} must be {'a whole number' if wants_int else 'a number'}, got {v!r}")
        low, high, low_inclusive, meaning = _RANGES[k]
        if not math.isfinite(v) or not (low <= v if low_inclusive else low < v) or v > high:
            bounds = f"{'[' if low_inclusive else '('}{low:g}, {high:g}]"
            raise PolicyError(f"{where}: {k} = {v!r} is outside {bounds} ({meaning}); fix the value")
        out[k] = type(default)(v)
    return out


def _tables(raw: Any, key: str, source: str) -> list[Mapping[str, Any]]:
    """A `[[tool.perfgate.KEY]]` array of tables, or a one-line error."""
    if not isinstance(raw, list) or not all(isinstance(r, Mapping) for r in raw):
        raise PolicyError(f"{source} {key}: must be an array of tables ([[tool.perfgate.{key}]]), got {raw!r}")
    return raw


def _budget(raw: Mapping[str, Any], where: str) -> Budget:
    budget_keys = {f.name for f in fields(Budget)}
    unknown = set(raw) - budget_keys
    if unknown:
        raise PolicyError(f"{where}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(budget_keys))}")
    for k, v in raw.items():
        if k in ("model", "size", "variant", "gpu"):
            if not isinstance(v, str):
                raise PolicyError(f"{where}: {k} must be a name or glob, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise PolicyError(f"{where}: {k} must be a positive number, got {v!r}")
    return Budget(**raw)


def parse_tolerances(raw: Any, source: str = "[tool.perfgate]") -> dict[str, Tolerance]:
    """`[tool.perfgate.tolerance."GLOB"]` tables: rel_l2 at most (>= 0), cosine at least (in [-1, 1]),
    psnr_db at least (optional)."""
    if not isinstance(raw, Mapping):
        raise PolicyError(f'{source} tolerance: must be a table of tables ([tool.perfgate.tolerance."GLOB"])')
    out = {}
    for pattern, values in raw.items():
        where = f"{source} tolerance.{pattern!r}"
        if (
            not isinstance(values, Mapping)
            or set(values) - {"rel_l2", "cosine", "psnr_db"}
            or not {"rel_l2", "cosine"} <= set(values)
        ):
            raise PolicyError(f"{where}: keys are rel_l2 and cosine (and psnr_db), got {values!r}")
        for k, v in values.items():
            bounds = {"rel_l2": (0.0, math.inf), "cosine": (-1.0, 1.0), "psnr_db": (-math.inf, math.inf)}[k]
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or not bounds[0] <= v <= bounds[1]
            ):
                raise PolicyError(f"{where}: {k} must be a finite number in [{bounds[0]:g}, {bounds[1]:g}], got {v!r}")
        out[pattern] = Tolerance(
            rel_l2=float(values["rel_l2"]),
            cosine=float(values["cosine"]),
            psnr_db=None if values.get("psnr_db") is None else float(values["psnr_db"]),
        )
    return out


def parse(table: Mapping[str, Any], source: str = "[tool.perfgate]") -> Policy:
    """Build a Policy from the `[tool.perfgate]` table; every value is checked (PolicyError, one line)."""
    defaults = GateSettings(**_settings(table.get("gate", {}), f"{source} gate"))
    overrides = []
    for i, raw in enumerate(_tables(table.get("override", []), "override", source)):
        where = f"{source} override #{i + 1}"
        raw = dict(raw)
        sel = {k: raw.pop(k) for k in ("model", "variant", "metric", "device") if k in raw}
        for k, v in sel.items():
            if not isinstance(v, str):
                raise PolicyError(f"{where}: {k} must be a name or glob, got {v!r}")
        if sel.get("metric", "*") not in (*METRIC_NAMES, "*") and not any(c in sel["metric"] for c in "*?["):
            raise PolicyError(f"{where}: metric {sel['metric']!r} is none of {', '.join(METRIC_NAMES)}")
        overrides.append(Override(**sel, settings=_settings(raw, where)))
    budgets = [
        _budget(raw, f"{source} budget #{i + 1}")
        for i, raw in enumerate(_tables(table.get("budget", []), "budget", source))
    ]
    return Policy(defaults=defaults, overrides=tuple(overrides), budgets=tuple(budgets))


TABLE_KEYS = (
    "gate",
    "override",
    "budget",
    "tolerance",
    "variants",
    "registries",
    "model_files",
    "tier",
    "tiers",
    "case_timeout_s",
    "counts",  # instructions under callgrind, op and kernel counts: perfgate.counts.suite
    "accepted_changes",  # intended steps in the history: perfgate.changepoints (not read by the gate)
)


def load_table(pyproject: str | Path) -> dict[str, Any]:
    """The `[tool.perfgate]` table of a pyproject.toml ({} when the file or the table is absent)."""
    path = Path(pyproject)
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: invalid TOML ({exc}); fix the file") from None
    table = data.get("tool", {}).get("perfgate", {})
    unknown = set(table) - set(TABLE_KEYS)
    if unknown:
        raise PolicyError(f"{path} [tool.perfgate]: unknown key {sorted(unknown)[0]!r}; known: {', '.join(TABLE_KEYS)}")
    for key, example in (("registries", "perfgate.models"), ("model_files", "my_model.py")):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PolicyError(
                f'{path} [tool.perfgate] {key}: must be a list of strings, e.g. {key} = ["{example}"], got {value!r}'
            )
    return table


def load(pyproject: str | Path) -> Policy:
    return parse(load_table(pyproject), f"{pyproject} [tool.perfgate]")
