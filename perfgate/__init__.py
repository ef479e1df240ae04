"""perfgate: a pytest-benchmark regression suite for real-time generative video and world models.

Importable without pytest: the measurement core, registries, baselines, the gate and reports.
"""

from perfgate.measure import measure
from perfgate.workload import ModelSpec, register_model

__all__ = ["ModelSpec", "measure", "register_model"]
__version__ = "0.1.0"
