"""The gate's settings: tolerances and test levels, one frozen record (perfgate.gate.policy fills it
from pyproject.toml per model, variant and metric; perfgate.gate.metrics' judges read it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    latency_tolerance: float = 0.05  # relative change of the median that matters
    alpha: float = 0.01  # one-sided Mann-Whitney U significance level
    memory_tolerance: float = 0.05
    memory_slack_mib: float = 16.0  # absolute slack: allocator granularity and RSS noise
    energy_tolerance: float = 0.10  # relative growth of the energy per step (one counter window, no test)
    accuracy_factor: float = 2.0  # rel_l2 may grow by this factor over the baseline's ...
    accuracy_slack: float = 1e-6  # ... plus this absolute slack before it regresses
    speedup_tolerance: float = 0.10  # relative drop of a variant's speedup over the baseline
    remeasure: int = 2  # re-measurements of a suspected latency regression before it fails
    remeasure_pooled: bool = True  # judge the suspect run and its re-measurements once, pooled (else each must regress)
    contention_max: float = 0.25  # other processes' CPU time / wall time that marks a case unreliable
    fail_on_improvement: bool = False  # ratchet: an unexpected improvement fails until re-recorded
    normalise: bool = True  # CPU latency judged on step/reference-workload ratios (cancels machine drift)
    ab_min_effect: float = 0.02  # A/B (`perfgate ab`): the smallest median slowdown a significant change must reach
    # GPU busy time per step (kernels + copies + memsets): not moved by host phases. On an H200
    # (docs/gpu-runs.md, the fourth run) it raised no false alarm in 22 unchanged comparisons and
    # caught GPU work +2% 20 of 22; a baseline's recorded pass noise raises it per case (the 1.4 ms
    # bf16 block's to 3.6%). Also the smallest effect of the device-time A/B (perfgate.gate.paired).
    device_time_tolerance: float = 0.015
    instructions_tolerance: float = 0.01  # relative change of callgrind's instructions per step that counts
    instructions_nondeterministic: float = 0.001  # two identical processes further apart: "nondeterministic"
