"""perfgate: a pytest-benchmark regression suite for real-time generative video and world models.

Importable without pytest: the measurement core, registries, baselines, the gate and reports, one
package per stage (docs/architecture.md).
Names are imported lazily so that `perfgate history` and `perfgate report` start without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
# `measure` (the timed-rounds loop) is perfgate.measure.core.measure: `perfgate.measure` is its package.
_LAZY = {"ModelSpec": "perfgate.cases.workload", "register_model": "perfgate.cases.workload"}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")
