"""The perfgate pytest plugin's command-line options: declarations only (perfgate.plugin.hooks registers them)."""

from __future__ import annotations

import pytest


def add_options(parser: pytest.Parser) -> None:
    """Every --perfgate-* option (the plugin's pytest_addoption)."""
    g = parser.getgroup("perfgate", "perfgate: model benchmarks and the regression gate")
    g.addoption("--perfgate-device", default=None, help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    g.addoption("--perfgate-models", default=None, help="comma-separated model names or globs (default: all)")
    g.addoption(
        "--perfgate-sizes", default=None, help="comma-separated size presets (default: the device's default size)"
    )
    g.addoption(
        "--perfgate-variants",
        default=None,
        help="comma-separated variant names or globs (default: the tier's, else [tool.perfgate] variants, else all)",
    )
    g.addoption(
        "--perfgate-tier",
        default=None,
        help="a tier of [tool.perfgate.tiers] (default: [tool.perfgate] tier for this device type, else 'all')",
    )
    g.addoption(
        "--perfgate-record",
        nargs="?",
        const="baseline",
        default=None,
        metavar="LABEL",
        help="record this run as the newest baseline for this machine's fingerprint",
    )
    g.addoption("--perfgate-baselines", default=None, help="baseline folder (default: <rootdir>/baselines)")
    g.addoption("--perfgate-no-gate", action="store_true", help="measure only; do not compare with the baseline")
    g.addoption(
        "--perfgate-gate-metrics",
        default=None,
        help="comma-separated gated metrics to judge (default: all), e.g. kernels,device_time,memory,accuracy",
    )
    g.addoption(
        "--perfgate-earlier-passes",
        default=None,
        help="comma-separated result files of earlier recording passes: each record keeps the noise between "
        "them and this pass (scripts/record-baselines --passes)",
    )
    g.addoption(
        "--perfgate-ratchet",
        action="store_true",
        help="fail on an unexpected improvement, so the baseline is re-recorded",
    )
    g.addoption(
        "--perfgate-precision",
        type=float,
        default=None,
        help="target relative half-width of the median's 95%% CI (default 0.02)",
    )
    g.addoption("--perfgate-min-rounds", type=int, default=None, help="minimum timed rounds per case (default 10)")
    g.addoption("--perfgate-max-rounds", type=int, default=None, help="maximum timed rounds per case (default 200)")
    g.addoption(
        "--perfgate-budget-s", type=float, default=None, help="time budget of the timed rounds per case, s (default 5)"
    )
    g.addoption(
        "--perfgate-smoke", action="store_true", help="quick pass: every case builds, runs and records with few rounds"
    )
    g.addoption(
        "--perfgate-fail-on-graph-break", action="store_true", help="fail compiled cases that have graph breaks"
    )
    g.addoption(
        "--perfgate-registry",
        action="append",
        default=[],
        metavar="MODULE",
        help="importable module that registers models, after [tool.perfgate] registries (repeatable)",
    )
    g.addoption(
        "--perfgate-model-file", action="append", default=[], help="python file registering extra models (repeatable)"
    )
    g.addoption("--perfgate-checkpoint", default=None, help="checkpoint to load strictly into the selected model")
    g.addoption(
        "--perfgate-verdicts", default=None, help="write the verdicts as JSON here (default .perfgate/verdicts.json)"
    )
    g.addoption(
        "--perfgate-inductor-cache",
        default=None,
        help="persistent inductor cache folder (default $PERFGATE_INDUCTOR_CACHE, else .perfgate/inductor-cache)",
    )
    g.addoption(
        "--perfgate-telemetry-interval-ms",
        type=float,
        default=100.0,
        help="GPU (NVML) and CPU telemetry sampling interval while measuring; 0 turns it off (default 100)",
    )
    g.addoption("--perfgate-no-flops", action="store_true", help="do not count FLOPs or time the matmul peak")
    g.addoption(
        "--perfgate-no-counts",
        action="store_true",
        help="count no instructions (callgrind), aten ops or kernels although [tool.perfgate.counts] asks for them",
    )
    g.addoption(
        "--perfgate-energy-window-s",
        type=float,
        default=None,
        help="seconds of repeated steps over which the energy counter (NVML on a GPU, RAPL on a CPU) is read after "
        "the timed rounds; 0 turns it off (default 1, 0 with --perfgate-smoke)",
    )
    g.addoption(
        "--perfgate-no-reference",
        action="store_true",
        help="CPU: do not time the reference workload in each round (the gate then judges raw ms)",
    )
    g.addoption(
        "--perfgate-trace",
        choices=("off", "all", "regressed"),
        default="off",
        help="write a profiler trace (and on CUDA a memory snapshot) for every case or only regressed ones",
    )
    g.addoption(
        "--perfgate-case-timeout-s",
        type=float,
        default=None,
        help="fail a case that runs longer than this, and go on (default [tool.perfgate] case_timeout_s, else 300 "
        "on CPU, 900 on CUDA; 0: off)",
    )
    g.addoption(
        "--perfgate-fail-unjudged",
        choices=("auto", "yes", "no"),
        default="auto",
        help="fail the run when no case's latency could be judged (all unreliable or without a baseline); auto: yes "
        "when $CI is set",
    )
    g.addoption(
        "--perfgate-evidence-dir", default=None, help="where --perfgate-trace writes (default .perfgate/evidence)"
    )
    g.addoption(
        "--perfgate-show-unchanged",
        action="store_true",
        help="list the unchanged verdicts with their reasons at the end (default: counted per metric; -vv lists too)",
    )
