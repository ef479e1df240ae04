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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from perfgate.cases.accuracy import Tolerance
from perfgate.cases.project import PolicyError, load_table  # noqa: F401  (read here as policy.load_table)
from perfgate.gate import known_defects
from perfgate.gate.known_defects import KnownDefect
from perfgate.gate.metrics import METRIC_NAMES
from perfgate.gate.settings import GateSettings


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
    known_defects: tuple[KnownDefect, ...] = ()  # perfgate.gate.known_defects

    def settings(self, model: str, variant: str, metric: str, device: str = "") -> GateSettings:
        s = self.defaults
        for o in self.overrides:
            if o.matches(model, variant, metric, device):
                s = replace(s, **o.settings)
        return s

    def budgets_for(self, model: str, size: str, variant: str, hardware: str) -> list[Budget]:
        return [b for b in self.budgets if b.matches(model, size, variant, hardware)]


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
    "device_time_tolerance": (0.0, 10.0, True, "a relative growth, e.g. 0.015 for 1.5%"),
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
    defects = known_defects.parse(table.get("known_defect", []), source)
    return Policy(defaults=defaults, overrides=tuple(overrides), budgets=tuple(budgets), known_defects=defects)


def load(pyproject: str | Path) -> Policy:
    return parse(load_table(pyproject), f"{pyproject} [tool.perfgate]")
