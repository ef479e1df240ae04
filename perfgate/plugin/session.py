"""A pytest run's perfgate state: what the adapter (perfgate.plugin.hooks) keeps between pytest's hooks.

The run's configuration is the frozen `perfgate.run.RunConfig` (re-exported here for plugins); the
machine is a `perfgate.run.runner.Host`; the cases are measured by a pytest-free
`perfgate.run.runner.Runner`, built once the count pass has run; each case's frozen `CaseOutcome`
is kept in order, and at the end one frozen `RunOutcome` is built from them (perfgate.plugin.hooks).
Only perfgate.plugin.hooks writes this state, and the plugins' `pytest_perfgate_configure_session`
may narrow `cases` before collection.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from perfgate.cases.conversions import Env
from perfgate.cases.runner import Case
from perfgate.gate import store as baseline_store
from perfgate.run.config import RunConfig
from perfgate.run.outcome import CaseOutcome
from perfgate.run.runner import Host, Runner

__all__ = ["RunConfig", "Session"]

_CONFIG_FIELDS = frozenset(f.name for f in fields(RunConfig))


@dataclass(kw_only=True)
class Session:
    """A pytest run's frozen configuration and machine, its selection, and the cases' outcomes."""

    config: RunConfig
    host: Host
    cases: list[Case] = field(default_factory=list)  # the selection (a shard narrows it before collection)
    unrunnable: dict[str, str] = field(default_factory=dict)  # case id -> why this machine cannot run it (collection)
    runner: Runner | None = None  # built at the end of collection, once the count pass has run
    outcomes: list[CaseOutcome] = field(default_factory=list)  # each case run, in order
    compared_elsewhere: list[str] = field(default_factory=list)  # how --benchmark-compare files' machines differ

    def __setattr__(self, name: str, value: Any) -> None:
        # Plugins used to assign configuration here; now that would set an attribute nobody reads,
        # so it is refused with the way to do it.
        if name in _CONFIG_FIELDS or (name == "config" and "config" in self.__dict__):
            raise AttributeError(
                f"Session.{name}: the run's configuration (session.config, a frozen RunConfig) is built once; "
                "change it in a pytest_perfgate_run_config hook (perfgate.plugin.hookspecs), or, in a script, "
                "build the RunConfig with it (dataclasses.replace) before the run"
            )
        object.__setattr__(self, name, value)

    # What plugins read of the machine (pytest_perfgate_configure_session).
    @property
    def fingerprint(self) -> dict[str, Any]:
        return self.host.fingerprint

    @property
    def fingerprint_id(self) -> str:
        return self.host.fingerprint_id

    @property
    def env(self) -> Env:
        return self.host.env

    @property
    def baseline_dir(self) -> Path:
        return self.host.baseline_dir

    @property
    def baselines(self) -> baseline_store.Baselines:
        return self.host.baselines

    def skips(self) -> dict[str, str]:
        """case id -> why it was skipped: the variants this machine cannot run (found at collection),
        then those found unable while building."""
        return {**self.unrunnable, **{o.case.id: o.skipped for o in self.outcomes if o.skipped}}
