"""The run's configuration, built once in pytest_configure (perfgate.plugin.hooks): from the
options and [tool.perfgate] (`run_config`), with what plugins change (`with_plugins_changes`); then
the calls that prepare the process and the session before collection. pytest glue: every error is a
one-line pytest.UsageError naming the option or table."""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from perfgate import files
from perfgate.cases import tiers
from perfgate.cases.runner import Case, RunOptions
from perfgate.cases.selection import _split, expand_cases
from perfgate.cases.variants import set_inductor_cache
from perfgate.cases.workload import RegistryError, checkpoint_problem, load_registries
from perfgate.counts import suite as counts_suite
from perfgate.gate import policy as policy_mod
from perfgate.gate import store as baseline_store
from perfgate.measure.core import StopRule, WarmupRule
from perfgate.measure.device import default_device, device_error, is_cpu, resolve
from perfgate.run import timeout
from perfgate.run.config import RunConfig
from perfgate.run.runner import Host


def _pyproject(config: pytest.Config) -> str:
    """How errors name the table every setting below comes from."""
    return f"{Path(config.rootpath) / 'pyproject.toml'} [tool.perfgate]"


def _given(config: pytest.Config, name: str, default: Any) -> Any:
    value = config.getoption(name)
    return default if value is None else value


def _registries(config: pytest.Config, table: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The registry modules and model files of [tool.perfgate] and the options, in that order."""
    return (
        (*table.get("registries", []), *config.getoption("perfgate_registry")),
        (*table.get("model_files", []), *config.getoption("perfgate_model_file")),
    )


def project_table(config: pytest.Config) -> dict[str, Any]:
    """[tool.perfgate], read once, with the models its registries (and the options') register."""
    try:
        table = policy_mod.load_table(Path(config.rootpath) / "pyproject.toml")
        load_registries(*_registries(config, table), config.rootpath)
    except (policy_mod.PolicyError, RegistryError, FileNotFoundError, TypeError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    return table


def _run_options(config: pytest.Config, table: dict[str, Any]) -> RunOptions:
    smoke = config.getoption("perfgate_smoke")
    base = StopRule(min_rounds=3, max_rounds=5, budget_s=0.5) if smoke else StopRule()
    try:
        stop = StopRule(
            precision=_given(config, "perfgate_precision", base.precision),
            min_rounds=_given(config, "perfgate_min_rounds", base.min_rounds),
            max_rounds=_given(config, "perfgate_max_rounds", base.max_rounds),
            budget_s=_given(config, "perfgate_budget_s", base.budget_s),
        )
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}; fix the --perfgate-* option") from None
    try:
        tolerances = policy_mod.parse_tolerances(table.get("tolerance", {}), _pyproject(config))
    except policy_mod.PolicyError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    interval_ms = config.getoption("perfgate_telemetry_interval_ms")
    if not (interval_ms >= 0 and math.isfinite(interval_ms)):  # NaN fails both
        raise pytest.UsageError(
            f"perfgate: --perfgate-telemetry-interval-ms must be a number >= 0, got {interval_ms:g}"
        )
    window_s = _given(config, "perfgate_energy_window_s", 0.0 if smoke else 1.0)
    if not (window_s >= 0 and math.isfinite(window_s)):
        raise pytest.UsageError(f"perfgate: --perfgate-energy-window-s must be a number >= 0, got {window_s:g}")
    return RunOptions(
        stop=stop,
        energy_window_s=window_s,
        checkpoint=_checkpoint(config),
        tolerances=tolerances,
        warm_compile=not smoke,
        # A smoke pass judges nothing: it needs the steps to run, not first-call effects gone (the
        # default settles over up to 50 rounds or 10 s per case, most of a tiny case's time).
        warmup=WarmupRule(min_rounds=2, max_rounds=2) if smoke else WarmupRule(),
        telemetry_interval_s=interval_ms / 1e3 or None,
        count_flops=not config.getoption("perfgate_no_flops"),
        reference=not config.getoption("perfgate_no_reference"),
    )


def _checkpoint(config: pytest.Config) -> str | None:
    """--perfgate-checkpoint, checked now: a missing file was an error verdict on every case."""
    path = config.getoption("perfgate_checkpoint")
    if path is not None and (problem := checkpoint_problem(path)) is not None:
        raise pytest.UsageError(
            f"perfgate: --perfgate-checkpoint {path}: {problem}; give the path of a state dict saved with torch.save"
        )
    return path


def _device(config: pytest.Config) -> str:
    """A plugin's device (a torchrun rank's), else --perfgate-device, else CUDA when available; with
    its index ("cuda" -> "cuda:0": every CUDA call downstream gets one)."""
    device = (
        config.hook.pytest_perfgate_device(config=config) or config.getoption("perfgate_device") or default_device()
    )
    if (err := device_error(device)) is not None:
        raise pytest.UsageError(f"perfgate: --perfgate-device {err}")
    return str(resolve(device))


def _tier(config: pytest.Config, table: dict[str, Any], device: str) -> tiers.Tier:
    """The tier the selection starts from; a selection on the command line stands alone unless a
    tier is named with it."""
    try:
        tier_table, tier_defaults = tiers.parse(table, _pyproject(config))
        named = config.getoption("perfgate_tier") or (
            tiers.ALL
            if any(config.getoption(o) for o in ("perfgate_models", "perfgate_sizes", "perfgate_variants"))
            else None
        )
        return tiers.choose(tier_table, tier_defaults, "cpu" if is_cpu(device) else "cuda", named)
    except (tiers.TierError, TypeError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None


def _case_timeout_s(config: pytest.Config, table: dict[str, Any], device: str) -> float:
    given = config.getoption("perfgate_case_timeout_s")
    try:
        return timeout.configured_limit(
            table.get("case_timeout_s") if given is None else given,
            "cpu" if is_cpu(device) else "cuda",
            "--perfgate-case-timeout-s" if given is not None else "[tool.perfgate] case_timeout_s",
        )
    except ValueError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None


def run_config(config: pytest.Config, table: dict[str, Any]) -> RunConfig:
    """The run's configuration from the options and [tool.perfgate], before plugins change it."""
    try:
        policy = policy_mod.parse(table, _pyproject(config))
        counts_config = counts_suite.parse(table, _pyproject(config))
    except (policy_mod.PolicyError, counts_suite.CountsConfigError, TypeError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    device = _device(config)
    tier = _tier(config, table, device)
    variants = table.get("variants")
    o = config.getoption
    fail_unjudged = o("perfgate_fail_unjudged")
    root = Path(config.rootpath)
    return RunConfig(
        device=device,
        baselines_root=Path(o("perfgate_baselines") or root / "baselines"),
        policy=policy,
        run_options=_run_options(config, table),
        gate_enabled=not o("perfgate_no_gate"),
        fail_on_improvement=o("perfgate_ratchet"),
        fail_on_graph_break=o("perfgate_fail_on_graph_break"),
        fail_unjudged=fail_unjudged == "yes" or (fail_unjudged == "auto" and bool(os.environ.get("CI"))),
        case_timeout_s=_case_timeout_s(config, table, device),
        trace=o("perfgate_trace"),
        evidence_dir=Path(o("perfgate_evidence_dir") or root / ".perfgate" / "evidence"),
        tier=tier,
        default_variants=tier.variants or (tuple(variants) if variants is not None else None),
        record_label=o("perfgate_record"),
        verdict_file=Path(o("perfgate_verdicts") or root / ".perfgate" / "verdicts.json"),
        counts_config=counts_config,
        counts_registries=_registries(config, table),
        earlier_passes=tuple(Path(p) for p in (o("perfgate_earlier_passes") or "").split(",") if p),
        gate_metrics=_gate_metrics(o("perfgate_gate_metrics")),
    )


def _gate_metrics(value: str | None) -> tuple[str, ...] | None:
    """--perfgate-gate-metrics: a comma-separated list of gated metrics, each one the gate knows."""
    if not value:
        return None
    from perfgate.gate.metrics import METRIC_NAMES

    chosen = tuple(m.strip() for m in value.split(",") if m.strip())
    unknown = [m for m in chosen if m not in METRIC_NAMES]
    if unknown:
        raise pytest.UsageError(
            f"perfgate: --perfgate-gate-metrics {unknown[0]!r} is no gated metric; known: {', '.join(METRIC_NAMES)}"
        )
    return chosen


def with_plugins_changes(config: pytest.Config, built: RunConfig) -> RunConfig:
    """The configuration with what plugins change (pytest_perfgate_run_config): each is handed the
    one built from the options and returns a changed copy; two that set one field differently are a
    usage error, not an order-dependent outcome."""
    changes: dict[str, Any] = {}
    for changed in config.hook.pytest_perfgate_run_config(config=config, run_config=built):
        for f in fields(RunConfig):
            value = getattr(changed, f.name)
            if value == getattr(built, f.name):
                continue
            if f.name in changes and changes[f.name] != value:
                raise pytest.UsageError(
                    f"perfgate: two plugins set the run's {f.name} differently ({changes[f.name]!r}, {value!r}) "
                    "in pytest_perfgate_run_config; leave it to one of them"
                )
            changes[f.name] = value
    return replace(built, **changes)


def prepare_process(config: pytest.Config, run_config: RunConfig) -> None:
    given, from_env = config.getoption("perfgate_inductor_cache"), os.environ.get("PERFGATE_INDUCTOR_CACHE")
    folder = given or from_env or Path(config.rootpath) / ".perfgate" / "inductor-cache"
    why = files.unwritable_folder(Path(folder))
    if why is None:
        try:
            set_inductor_cache(folder)
        except OSError as exc:
            why = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    if why is not None:
        named = (
            "--perfgate-inductor-cache"
            if given
            else "$PERFGATE_INDUCTOR_CACHE"
            if from_env
            else "the default inductor cache"
        )
        raise pytest.UsageError(
            f"perfgate: {named} {folder}: no inductor cache can be written there ({why}); "
            "give a writable folder with --perfgate-inductor-cache DIR"
        )
    if run_config.case_timeout_s:
        # The runner imports torch._dynamo on a case's first build; on a busy VM that took over 10 s,
        # the time limit's alarm cut the import in half, and the half-imported module failed every
        # later case. Imported here, before any limit is armed.
        import torch._dynamo  # noqa: F401


def expand(config: pytest.Config, run_config: RunConfig) -> list[Case]:
    """The selected cases; a bad selection fails here, before collection."""
    o = config.getoption
    tier = run_config.tier or tiers.Tier(name=tiers.ALL)
    defaults = run_config.default_variants
    try:
        return expand_cases(
            run_config.device,
            models=_split(o("perfgate_models")) or list(tier.models),
            sizes_=_split(o("perfgate_sizes")) or list(tier.sizes),
            variants=_split(o("perfgate_variants")) or (list(defaults) if defaults is not None else None),
            case_ids=list(tier.cases),
        )
    except (KeyError, ValueError) as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None


def check_baselines(run_config: RunConfig, host: Host) -> None:
    """The newest baseline file validated now: a broken one is a usage error before any case runs."""
    if run_config.gate_enabled:
        try:
            host.load_baseline()
        except baseline_store.BaselineError as exc:
            raise pytest.UsageError(f"perfgate: {exc}") from None


def check_recording(config: pytest.Config, host: Host) -> None:
    """--perfgate-record: the baselines folder takes files now, not only after the run's hours of
    measurement (the option, not the run's record label: torchrun's rank 0 and xdist's controller record)."""
    if not config.getoption("perfgate_record"):
        return
    folder = host.baseline_dir
    why = files.unwritable_folder(folder)
    if why is not None:
        named = "--perfgate-baselines" if config.getoption("perfgate_baselines") else "the baselines folder"
        raise pytest.UsageError(
            f"perfgate: --perfgate-record: {named} {folder.parent} takes no baseline ({why}); "
            "make it writable or give another with --perfgate-baselines DIR"
        )


def check_earlier_passes(run_config: RunConfig) -> None:
    """--perfgate-earlier-passes: each file read now; one that cannot be used stops the run before
    any case is measured (found by the first case alone, it failed that case and left the others
    recorded without the passes' noise)."""
    from perfgate import results

    for path in run_config.earlier_passes:
        try:
            results.benchmarks(results.read_benchmark_json(path))
        except (results.ResultFileError, TypeError, ValueError) as exc:
            raise pytest.UsageError(
                f"perfgate: --perfgate-earlier-passes {exc}; give the result files (--benchmark-json) of the "
                "earlier recording passes, comma-separated"
            ) from None
