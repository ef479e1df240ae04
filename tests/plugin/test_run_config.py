"""The run's configuration is frozen and built once; the session holds it and the run's state."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfgate.cases.runner import RunOptions
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.measure.core import StopRule
from perfgate.plugin import configure
from perfgate.plugin.session import Session
from perfgate.run.config import RunConfig
from perfgate.run.runner import Host


def _config(tmp_path: Path, **changes) -> RunConfig:
    return RunConfig(device="cpu", baselines_root=tmp_path, **changes)


def test_a_configuration_field_cannot_be_assigned(tmp_path):
    cfg = _config(tmp_path, record_label="main")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.record_label = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run_options.stop = StopRule(min_rounds=3)  # type: ignore[misc]  # frozen all the way to the stop rule
    with pytest.raises(TypeError):
        RunConfig("cpu", tmp_path)  # type: ignore[misc]  # keyword-only: a reordered field cannot shift values
    assert dataclasses.replace(cfg, record_label=None).record_label is None and cfg.record_label == "main"


def test_the_session_refuses_configuration_and_keeps_only_the_adapters_state(tmp_path):
    config = _config(tmp_path, gate_enabled=False)
    s = Session(config=config, host=Host.detect(config))
    for name, value in (("record_label", None), ("verdict_file", None), ("policy", Policy()), ("gate_enabled", True)):
        with pytest.raises(AttributeError, match="pytest_perfgate_run_config"):
            setattr(s, name, value)
    with pytest.raises(AttributeError, match="built once"):
        s.config = _config(tmp_path)
    s.unrunnable["a"] = "why"  # the adapter's state: what collection found, the outcomes
    assert s.skips() == {"a": "why"} and s.fingerprint_id == s.host.fingerprint_id
    state = {f.name for f in dataclasses.fields(Session)} - {"config"}
    assert not state & {f.name for f in dataclasses.fields(RunConfig)}  # no field is in both


def _plugins(*answers):
    """A stand-in pytest config whose plugins answer pytest_perfgate_run_config with `answers`
    (functions of the configuration they are handed)."""
    calls = []

    def hook(config, run_config):
        calls.append(run_config)
        return [r for a in answers if (r := a(run_config)) is not None]  # pluggy leaves out None answers

    return SimpleNamespace(hook=SimpleNamespace(pytest_perfgate_run_config=hook)), calls


def test_plugins_changes_are_combined_into_the_one_configuration(tmp_path):
    built = _config(tmp_path, record_label="main", verdict_file=tmp_path / "v.json")
    lockstep = RunOptions(stop=StopRule(min_rounds=5, max_rounds=5))
    config, calls = _plugins(
        lambda c: dataclasses.replace(c, record_label=None),  # e.g. xdist's controller records the merged run
        lambda c: dataclasses.replace(c, run_options=lockstep, record_label=None),
        lambda c: None,  # a plugin with nothing to change
    )
    final = configure.with_plugins_changes(config, built)
    assert len(calls) == 1 and calls[0] is built  # asked once, every plugin handed the built configuration
    assert (final.record_label, final.run_options, final.verdict_file) == (None, lockstep, tmp_path / "v.json")
    assert built.record_label == "main"  # the built one is not changed in place


def test_two_plugins_setting_one_field_differently_is_a_usage_error(tmp_path):
    config, _ = _plugins(
        lambda c: dataclasses.replace(c, policy=Policy(defaults=GateSettings(alpha=0.02))),
        lambda c: dataclasses.replace(c, policy=Policy(defaults=GateSettings(alpha=0.05))),
    )
    with pytest.raises(pytest.UsageError, match="two plugins set the run's policy differently"):
        configure.with_plugins_changes(config, _config(tmp_path))
