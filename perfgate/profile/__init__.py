"""Profiling: the `perfgate profile` run split by job, the suite's evidence, the leave-in API.

Data flows one way: `config` (what to profile) -> `run` (the runner's pipeline per point, then
`memory`, `layers`, `precision`, `trace`) -> `suggest` (rules on the numbers). Each fills its part of
the typed report (`report`: a `ProfileReport` of `PointReport`s, read by attribute); report.json is its
JSON form, and the page is rendered from that by `perfgate.output.html`.
`evidence` is what the benchmark session takes on a failed case (a trace through `trace`).
`api` (annotate, profile) and `profiler` (Profiler and its tools) are the leave-in API, re-exported
here: `from perfgate.profile import annotate, profile, Profiler`.
"""

from perfgate.profile.api import annotate, profile
from perfgate.profile.profiler import Profiler

__all__ = ["Profiler", "annotate", "profile"]
