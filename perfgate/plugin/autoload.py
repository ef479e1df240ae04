"""pytest11 entry point: registers perfgate's pytest plugins in projects that configure perfgate.

pytest imports every installed entry point in every run. perfgate.plugin.hooks imports torch (3 s) and
needs registered models, so registering it everywhere would slow and break unrelated test suites
that share the environment. It is registered here only when the run's rootdir has a
`[tool.perfgate]` table in pyproject.toml or a `--perfgate-*` option is given; this module
imports nothing heavy.

The plugins are registered under their module names, as `-p perfgate.plugin.hooks` and a conftest's
`pytest_plugins = ("perfgate.plugin.hooks", ...)` register them, so any of those together is one
registration (pytest refuses the same module under two names). `-p no:perfgate` turns this off.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

PLUGINS = ("perfgate.plugin.hooks", "perfgate.plugin.torchrun", "perfgate.plugin.xdist")


def configured(rootpath: Path, args: Sequence[str]) -> bool:
    """Whether this run is a perfgate run: a `--perfgate-*` option, or `[tool.perfgate]` in the
    rootdir's pyproject.toml (a file that cannot be read counts as not configured: pytest reports
    a broken pyproject.toml itself)."""
    if any(str(a).startswith("--perfgate") for a in args):
        return True
    try:
        with open(rootpath / "pyproject.toml", "rb") as fh:
            return "perfgate" in tomllib.load(fh).get("tool", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False


@pytest.hookimpl(tryfirst=True)  # before the conftests load: their pytest_plugins then find these registered
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    if configured(early_config.rootpath, args):
        for name in PLUGINS:
            early_config.pluginmanager.import_plugin(name)
