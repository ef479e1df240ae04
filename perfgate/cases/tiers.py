"""Tiers: named selections of cases, so a pull request runs what fits its budget and a nightly
run everything, from `[tool.perfgate]`:

    [tool.perfgate]
    tier = { cuda = "pr" }          # the tier a run on that device type uses when none is named

    [tool.perfgate.tiers.pr]
    description = "stable compute-bound eager cases, CUDA graphs, the compiled world model"
    budget_min = 10                 # the wall time it is sized for on the runner (stated, not enforced)
    models = ["*"]                  # globs; each list narrows the matrix (omitted: everything)
    variants = ["baseline", "bf16", "cudagraphs"]
    cases = ["self-forcing-dit-*", "*-cudagraphs"]   # globs on case ids, after the lists above

`--perfgate-tier NAME` names one (`all`: the whole matrix). A selection on the command line
(`--perfgate-models`, `--perfgate-sizes`, `--perfgate-variants`) runs on its own, unless a tier is
named too: then each option replaces the tier's list of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

ALL = "all"  # the built-in tier: no narrowing


class TierError(ValueError):
    """A bad tier table; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class Tier:
    name: str
    description: str = ""
    budget_min: float | None = None
    models: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()


_LISTS = ("models", "sizes", "variants", "cases")


def _tier(name: str, raw: Mapping[str, Any], where: str) -> Tier:
    known = {f.name for f in fields(Tier)} - {"name"}
    unknown = set(raw) - known
    if unknown:
        raise TierError(f"{where}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    for key in _LISTS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise TierError(f"{where}: {key} must be a list of names or globs, got {value!r}")
        out[key] = tuple(value)
    budget = raw.get("budget_min")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
        raise TierError(f"{where}: budget_min must be a positive number of minutes, got {budget!r}")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise TierError(f"{where}: description must be a string, got {description!r}")
    return Tier(name=name, description=description, budget_min=budget, **out)


def parse(table: Mapping[str, Any], source: str = "[tool.perfgate]") -> tuple[dict[str, Tier], dict[str, str]]:
    """(tiers by name, default tier by device type) from the `[tool.perfgate]` table."""
    raw_tiers = table.get("tiers", {})
    if not isinstance(raw_tiers, Mapping):
        raise TierError(f"{source} tiers: must be a table of tables ([tool.perfgate.tiers.NAME])")
    tiers = {ALL: Tier(name=ALL, description="the whole matrix")}
    for name, raw in raw_tiers.items():
        if name == ALL:
            raise TierError(f"{source} tiers.{name}: '{ALL}' is the built-in whole matrix; choose another name")
        if not isinstance(raw, Mapping):
            raise TierError(f"{source} tiers.{name}: must be a table")
        tiers[name] = _tier(name, raw, f"{source} tiers.{name}")
    defaults = table.get("tier", {})
    if not isinstance(defaults, Mapping) or not all(isinstance(v, str) for v in defaults.values()):
        raise TierError(f'{source} tier: must map device types to tier names, e.g. tier = {{ cuda = "pr" }}')
    for device_type, name in defaults.items():
        if device_type not in ("cpu", "cuda"):
            raise TierError(f"{source} tier: device type {device_type!r} is neither cpu nor cuda")
        if name not in tiers:
            raise TierError(f"{source} tier.{device_type} = {name!r}: no such tier; known: {', '.join(tiers)}")
    return tiers, dict(defaults)


def choose(tiers: Mapping[str, Tier], defaults: Mapping[str, str], device_type: str, name: str | None) -> Tier:
    """The tier a run uses: the one named, else the device type's default, else the whole matrix."""
    chosen = name or defaults.get(device_type, ALL)
    if chosen not in tiers:
        raise TierError(f"--perfgate-tier {chosen!r}: no such tier; known: {', '.join(tiers)}")
    return tiers[chosen]
