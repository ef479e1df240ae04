"""Optional dependencies: which extra of perfgate installs a module, and the one-line error when
it is missing.

perfgate's core is the gate and the pytest plugin; reports, charts, change points and histograms
(`report`), NVML telemetry (`gpu`), torchao (`quant`) and torch-tensorrt (`tensorrt`) are extras
(pyproject.toml [project.optional-dependencies]; tests/test_extras.py checks this table against it).
Every lazy import of such a module goes through `need`, so a missing one says which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Top-level module -> (the distribution that installs it, the extra that names that distribution).
MODULES: dict[str, tuple[str, str]] = {
    "jinja2": ("jinja2", "report"),
    "matplotlib": ("matplotlib", "report"),
    "ruptures": ("ruptures", "report"),
    "pygal": ("pygal", "report"),
    "pynvml": ("nvidia-ml-py", "gpu"),
    "torchao": ("torchao", "quant"),
    "torch_tensorrt": ("torch-tensorrt", "tensorrt"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line naming the extra.
    An ImportError, so callers that already fall back on ImportError keep doing so."""


def message(module: str, purpose: str) -> str:
    dist, extra = MODULES[module.split(".")[0]]
    return f"{purpose} needs {dist}, in perfgate's `{extra}` extra: pip install 'perfgate[{extra}]'"


def need(module: str, purpose: str) -> ModuleType:
    """`module` imported, or MissingExtra saying which extra installs it. An ImportError raised
    from inside an installed package (a broken install, a missing native library) is re-raised
    as it is: installing the extra would not fix it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] == top and not isinstance(exc, MissingExtra):
            raise MissingExtra(message(module, purpose), name=module) from None
        raise


def check(modules: tuple[str, ...], purpose: str) -> None:
    """MissingExtra for the first of `modules` that is not installed, without importing any: for a
    command that would otherwise find out only after minutes of work (perfgate profile)."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            raise MissingExtra(message(module, purpose), name=module)
