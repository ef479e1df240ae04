"""Profiling: the `perfgate profile` run split by job, the suite's evidence, the leave-in API.

Data flows one way: `config` (what to profile) -> `run` (the runner's pipeline per point, then
`memory`, `layers`, `precision`, `trace`) -> `suggest` (rules on the numbers); the page is
rendered by `perfgate.output.html`.
`evidence` is what the benchmark session takes on a failed case (a trace through `trace`).
`api` (annotate, profile) and `profiler` (Profiler and its tools) are the leave-in API, re-exported
here: `from perfgate.profile import annotate, profile, Profiler`.
"""

from perfgate.profile.api import annotate, profile
from perfgate.profile.profiler import Profiler

__all__ = ["Profiler", "annotate", "profile"]
