"""What a run was asked to do: `RunConfig`, frozen and built once before the first case is collected
(by perfgate.plugin.configure from the options and [tool.perfgate], or by a script)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfgate.cases.runner import RunOptions
from perfgate.cases.tiers import Tier
from perfgate.counts import suite as counts_suite
from perfgate.gate.policy import Policy


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What a run was asked to do, fixed before the first case is collected (assigning a field
    raises FrozenInstanceError; `dataclasses.replace` makes a changed copy before the run starts)."""

    device: str  # resolved: "cuda:0", not "cuda"
    baselines_root: Path
    policy: Policy = Policy()
    run_options: RunOptions = field(default_factory=RunOptions)
    gate_enabled: bool = True
    fail_on_improvement: bool = False  # --perfgate-ratchet: an improvement fails until recorded
    fail_on_graph_break: bool = False
    fail_unjudged: bool = False  # fail the run when no case's latency could be judged
    case_timeout_s: float = 0.0  # 0: no limit
    trace: str = "off"  # evidence on failure: "off", "all" cases or only "regressed" ones
    evidence_dir: Path = Path(".perfgate/evidence")
    tier: Tier | None = None  # the tier the selection came from
    default_variants: tuple[str, ...] | None = None  # the tier's, else [tool.perfgate] variants; None: all
    record_label: str | None = None  # record the run as a baseline under this label; None: do not
    verdict_file: Path | None = None  # where the verdicts JSON is written at the end; None: nowhere
    # Counts (perfgate.counts.suite): the [tool.perfgate.counts] table (None: nothing is counted) and
    # the registries and model files the valgrind worker loads.
    counts_config: counts_suite.CountsConfig | None = None
    counts_registries: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    # Recording in passes (scripts/record-baselines --passes N): the earlier passes' result files;
    # each case's record carries the noise between them and this pass (perfgate.gate.detectable).
    earlier_passes: tuple[Path, ...] = ()
    # The gated metrics judged (--perfgate-gate-metrics); None: all. The GPU pull-request gate judges
    # kernel counts, device time, memory and accuracy here and leaves wall time to same-job A/B.
    gate_metrics: tuple[str, ...] | None = None

    def judges(self, metric: str) -> bool:
        """Whether this run judges `metric` (--perfgate-gate-metrics). A time budget (fps, p90, median)
        goes with latency, the memory budget with memory; graph breaks are no timing: always judged."""
        chosen = self.gate_metrics
        if chosen is None or metric == "graph_breaks":
            return True
        if metric.startswith("budget:"):
            return ("memory" if metric == "budget:peak_mem_mib" else "latency") in chosen
        return metric in chosen
