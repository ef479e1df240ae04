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
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

METRICS = ("latency", "memory", "accuracy", "speedup")


class PolicyError(ValueError):
    """A bad policy; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    latency_tolerance: float = 0.05  # relative change of the median that matters
    alpha: float = 0.01  # one-sided Mann-Whitney U significance level
    memory_tolerance: float = 0.05
    memory_slack_mib: float = 16.0  # absolute slack: allocator granularity and RSS noise
    accuracy_factor: float = 2.0  # rel_l2 may grow by this factor over the baseline's ...
    accuracy_slack: float = 1e-6  # ... plus this absolute slack before it regresses
    speedup_tolerance: float = 0.10  # relative drop of a variant's speedup over the baseline
    remeasure: int = 2  # re-measurements of a suspected latency regression before it fails
    remeasure_pooled: bool = True  # judge the suspect run and its re-measurements once, pooled (else each must regress)
    contention_max: float = 0.25  # other processes' CPU time / wall time that marks a case unreliable
    fail_on_improvement: bool = False  # ratchet: an unexpected improvement fails until re-recorded
    normalise: bool = True  # CPU latency judged on step/reference-workload ratios (cancels machine drift)


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


_SETTING_KEYS = {f.name: f.type for f in fields(GateSettings)}


def _settings(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for k, v in raw.items():
        if k not in _SETTING_KEYS:
            raise PolicyError(f"{where}: unknown key {k!r}; known: {', '.join(_SETTING_KEYS)}")
        default = getattr(GateSettings(), k)
        if isinstance(default, bool) != isinstance(v, bool) or not isinstance(v, (int, float)):
            raise PolicyError(f"{where}: {k} must be a {type(default).__name__}, got {v!r}")
        if not isinstance(default, bool) and v < 0:
            raise PolicyError(f"{where}: {k} must not be negative, got {v!r}")
        out[k] = type(default)(v)
    return out


def parse(table: Mapping[str, Any], source: str = "[tool.perfgate]") -> Policy:
    """Build a Policy from the `[tool.perfgate]` table."""
    defaults = GateSettings(**_settings(table.get("gate", {}), f"{source} gate"))
    overrides = []
    for i, raw in enumerate(table.get("override", [])):
        where = f"{source} override #{i + 1}"
        raw = dict(raw)
        sel = {k: raw.pop(k) for k in ("model", "variant", "metric", "device") if k in raw}
        if sel.get("metric", "*") not in (*METRICS, "*") and not any(c in sel["metric"] for c in "*?["):
            raise PolicyError(f"{where}: metric {sel['metric']!r} is none of {', '.join(METRICS)}")
        overrides.append(Override(**sel, settings=_settings(raw, where)))
    budgets = []
    budget_keys = {f.name for f in fields(Budget)}
    for i, raw in enumerate(table.get("budget", [])):
        unknown = set(raw) - budget_keys
        if unknown:
            raise PolicyError(f"{source} budget #{i + 1}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(budget_keys))}")
        budgets.append(Budget(**raw))
    return Policy(defaults=defaults, overrides=tuple(overrides), budgets=tuple(budgets))


TABLE_KEYS = ("gate", "override", "budget", "tolerance", "variants", "registries", "model_files", "tier", "tiers")


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
    for key, example in (("registries", "models"), ("model_files", "my_model.py")):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PolicyError(f'{path} [tool.perfgate] {key}: must be a list of strings, e.g. {key} = ["{example}"], got {value!r}')
    return table


def load(pyproject: str | Path) -> Policy:
    return parse(load_table(pyproject), f"{pyproject} [tool.perfgate]")
