"""The project's `[tool.perfgate]` table, read and checked in one place, and the models it registers.

Every stage reads its part of this one table (the gate its policy, the cases their registries and
tiers, the history its accepted changes); an unknown key or a bad value is one line naming the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.cases.workload import load_registries


class PolicyError(ValueError):
    """A bad policy; the message names the file and the key."""


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
    "known_defect",  # upstream defects named with their workaround: perfgate.gate.known_defects
    "accepted_changes",  # intended level shifts in the history: perfgate.history.changepoints (not read by the gate)
    "history_store",  # the kept main runs' folder: perfgate.history.store
)


def load_table(pyproject: str | Path) -> dict[str, Any]:
    """The `[tool.perfgate]` table of a pyproject.toml ({} when the file or the table is absent;
    a command whose --pyproject names a missing file says so itself: perfgate.commands.project_file)."""
    path = Path(pyproject)
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf8"))  # TOML is UTF-8, whatever the locale
    except UnicodeDecodeError as exc:
        raise PolicyError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save the file as "
            "UTF-8, as TOML requires"
        ) from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read it ({exc.strerror}); make it readable") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: invalid TOML ({exc}); fix the file") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise PolicyError(f"{path}: tool must be a table (write [tool.perfgate] and its keys), got {tool!r}")
    table = tool.get("perfgate", {})
    if not isinstance(table, dict):
        raise PolicyError(f"{path}: tool.perfgate must be a table (write [tool.perfgate] and its keys), got {table!r}")
    unknown = set(table) - set(TABLE_KEYS)
    if unknown:
        raise PolicyError(f"{path} [tool.perfgate]: unknown key {sorted(unknown)[0]!r}; known: {', '.join(TABLE_KEYS)}")
    for key, example in (("registries", "models"), ("model_files", "my_model.py"), ("variants", "baseline")):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PolicyError(
                f'{path} [tool.perfgate] {key}: must be a list of strings, e.g. {key} = ["{example}"], got {value!r}'
            )
    return table


def load_models(root: str | Path | None = None, model_files: Sequence[str] = ()) -> None:
    """Register the models the project at `root` (default: the current directory) names: its
    pyproject.toml [tool.perfgate] registries and model_files, then `model_files`. Errors are one
    line: PolicyError (the table), RegistryError (a module or file), FileNotFoundError."""
    root = Path.cwd() if root is None else Path(root)
    table = load_table(root / "pyproject.toml")
    load_registries(table.get("registries", []), [*table.get("model_files", []), *model_files], root)
