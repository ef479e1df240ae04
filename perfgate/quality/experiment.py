"""Measured quality of the gate: how often unchanged code alarms, how often a real slowdown is caught.

The workload is a chain of `depth` Linear(width, width) + GELU layers on a [batch, width] input (an
MLP trunk, the shape of most blocks in the registered models); a slowdown of s% is the same chain
with depth * (1 + s/100) layers, i.e. proportionally more real work, not a sleep. One comparison is
what a developer gets from the gate: an independent baseline measurement and an independent current
measurement with the real `perfgate.measure.core.measure` (default StopRule and WarmupRule), judged by
the gate's own `gate.decide` as the session calls it: a contended measurement unreliable, a
suspected regression re-measured with fresh current measurements before it stands. By default
every measurement runs in a fresh process, as a recorded baseline and today's run do, so whatever
differs between runs is part of the noise the gate meets.

Slowdowns are measured round-robin and the order inside a comparison alternates (baseline first,
then current first), so a slow drift of the machine lands on every slowdown alike and does not
masquerade as a change. Alternatives to the session's rules (`GateRule`: other settings, a baseline
pooled from several runs, pooled confirmation) are judged on the same runs, live or from a stored
report (`rejudge`). Every run also times the reference workload as the suite does on a CPU, so
the same runs are judged normalised (the default) and raw (`normalise=false`) side by side.

Pure logic here (the measure function is a parameter); `perfgate gate-quality` wires it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from perfgate import gate
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.record import CaseRecord

if TYPE_CHECKING:  # torch and scipy load only when something is measured: `perfgate --help` stays fast
    from perfgate.measure.stats import StopRule

DEFAULT_SLOWDOWNS_PCT = (0, 2, 3, 5, 10, 20)
DETECTION_TARGET = 0.95  # "detected at least 95% of the time"
FALSE_ALARM_MAX = 1 / 50  # "unchanged code alarms at most once in 50"


# --- the workload ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ChainWorkload:
    """`depth` Linear(width, width) + GELU layers on a [batch, width] input, fp32, inference mode."""

    depth: int = 100
    width: int = 128
    batch: int = 32
    threads: int | None = None  # torch intra-op threads; None: torch's default, as the suite runs
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("depth", "width", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")


def layers_for(depth: int, slowdown_pct: float) -> int:
    """Layers of the chain that does `slowdown_pct` % more work than `depth` layers (exactly)."""
    layers = depth * (100 + slowdown_pct) / 100
    if slowdown_pct < 0 or abs(layers - round(layers)) > 1e-9:
        raise ValueError(
            f"slowdown {slowdown_pct:g}% of depth {depth} is {layers:g} layers, not a whole number; "
            f"use a depth that is a multiple of 100 (or of 100/gcd(100, slowdown))"
        )
    return int(round(layers))


def build_chain_step(workload: ChainWorkload, layers: int) -> Callable[[], Any]:
    """A zero-argument step running `layers` layers of the chain."""
    from perfgate.measure.core import linear_gelu_chain

    return linear_gelu_chain(depth=layers, width=workload.width, batch=workload.batch, seed=workload.seed)


# --- one measurement --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ChainRun:
    """One measurement of one chain: raw samples, the reference workload's samples of the same
    rounds, and the neighbours' CPU use while it ran."""

    layers: int
    samples_ms: list[float]
    contention_cores: float = 0.0
    stop: str = ""
    warmup_rounds: int = 0
    reference_ms: list[float] | None = None  # the reference workload, timed before each timed step

    @property
    def reference_median_ms(self) -> float | None:
        return float(statistics.median(self.reference_ms)) if self.reference_ms else None

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.samples_ms))

    def to_json(self, *, samples: bool = True) -> dict[str, Any]:
        """The run as a `--json` report holds it: its figures, and its raw samples unless left out."""
        d: dict[str, Any] = {
            "layers": self.layers,
            "median_ms": self.median_ms,
            "n": len(self.samples_ms),
            "contention_cores": self.contention_cores,
            "stop": self.stop,
            "warmup_rounds": self.warmup_rounds,
            "reference_median_ms": self.reference_median_ms,
        }
        if samples:
            d["samples_ms"] = [round(x, 5) for x in self.samples_ms]
            if self.reference_ms:
                d["reference_ms"] = [round(x, 5) for x in self.reference_ms]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChainRun:
        """A run of a `--json` report, read back field by field (the figures derived from the samples,
        median_ms and n, are not read); ValueError without its raw samples, KeyError without
        `layers` or `contention_cores`."""
        if "samples_ms" not in d:
            raise ValueError("the report has no raw samples (written with --no-samples); re-run without it")
        if missing := [k for k in _WRITTEN_ALWAYS if k not in d]:
            raise KeyError(missing[0])
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


_WRITTEN_ALWAYS = ("layers", "contention_cores")  # in every report; stop, warmup_rounds, reference_ms came later


MeasureFn = Callable[[int], ChainRun]  # layers -> ChainRun


def measure_chain(
    workload: ChainWorkload, layers: int, stop: StopRule | None = None, *, reference: bool = True
) -> ChainRun:
    """Measure the chain in this process with the suite's `measure` (warm-up rule, by default its
    stop rule, and the reference workload the suite times on a CPU)."""
    import torch

    from perfgate.measure.core import measure, reference_step
    from perfgate.measure.stats import StopRule

    threads = torch.get_num_threads()
    if workload.threads is not None:
        torch.set_num_threads(workload.threads)
    try:
        m = measure(
            build_chain_step(workload, layers),
            "cpu",
            stop=stop or StopRule(),
            reference=reference_step() if reference else None,
        )
    finally:
        torch.set_num_threads(threads)  # in-process runs must not change the caller's thread count
    return ChainRun(
        layers=layers,
        samples_ms=m.samples_ms,
        contention_cores=m.contention_cores,
        stop=m.stop,
        warmup_rounds=m.warmup_rounds,
        reference_ms=m.reference_ms,
    )


def _measure_chain_dict(workload: ChainWorkload, layers: int, stop: StopRule | None, reference: bool) -> dict[str, Any]:
    return asdict(measure_chain(workload, layers, stop, reference=reference))


class FreshProcessMeasurer:
    """Each measurement in a new process, forked from a server that has imported torch but run
    nothing (so no OpenMP pool crosses a fork, and no import time is paid per measurement)."""

    def __init__(self, workload: ChainWorkload, stop: StopRule | None = None, *, reference: bool = True) -> None:
        import multiprocessing

        self.workload = workload
        self.stop = stop
        self.reference = reference
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["torch", "perfgate.measure.core", "perfgate.quality.experiment"])

    def __call__(self, layers: int) -> ChainRun:
        with ProcessPoolExecutor(max_workers=1, mp_context=self._ctx) as pool:
            return ChainRun(
                **pool.submit(_measure_chain_dict, self.workload, layers, self.stop, self.reference).result()
            )


def make_measurer(
    workload: ChainWorkload, isolation: str = "process", stop: StopRule | None = None, *, reference: bool = True
) -> MeasureFn:
    if isolation == "process":
        return FreshProcessMeasurer(workload, stop, reference=reference)
    if isolation == "inprocess":
        return lambda layers: measure_chain(workload, layers, stop, reference=reference)
    raise ValueError(f"isolation {isolation!r}: use 'process' or 'inprocess'")


def other_cores_busy(probe_s: float = 1.0) -> float:
    """Other processes' CPU use over the next `probe_s` seconds, in cores (as `measure` counts it)."""
    import time

    from perfgate.measure.rounds import busy_cpu_s, contention

    before, t0 = busy_cpu_s(), time.perf_counter()
    time.sleep(probe_s)
    return contention(before, busy_cpu_s(), time.perf_counter() - t0)


def wait_for_quiet(
    max_other_cores: float,
    *,
    timeout_s: float = 600.0,
    probe: Callable[[], float] = other_cores_busy,
    progress: Callable[[str], None] | None = None,
) -> float:
    """Wait (up to `timeout_s`) until neighbours use at most `max_other_cores`; returns the seconds waited."""
    import time

    t0 = time.perf_counter()
    told = False
    while (busy := probe()) > max_other_cores and time.perf_counter() - t0 < timeout_s:
        if progress and not told:
            progress(f"other processes use {busy:.2f} cores; waiting for a quiet machine (up to {timeout_s:g} s)")
            told = True
    return time.perf_counter() - t0


def quiet_measurer(
    measure_fn: MeasureFn,
    max_other_cores: float,
    *,
    timeout_s: float = 600.0,
    probe: Callable[[], float] = other_cores_busy,
    progress: Callable[[str], None] | None = None,
) -> MeasureFn:
    """`measure_fn` that, after a contended run (and before the first), waits for the neighbours to
    quieten instead of spending the retries of the experiment on runs that will be unreliable too."""
    contended = True

    def fn(layers: int) -> ChainRun:
        nonlocal contended
        if contended:
            wait_for_quiet(max_other_cores, timeout_s=timeout_s, probe=probe, progress=progress)
        run = measure_fn(layers)
        contended = run.contention_cores > max_other_cores
        return run

    return fn


# --- judging: the session's rules for one case ---------------------------------------------------------


def as_record(run: ChainRun, s: GateSettings) -> CaseRecord:
    """A chain run as the case record the gate decides on, its reliability judged by the gate."""
    rec = CaseRecord(
        model="chain",
        variant="chain",
        device="cpu",
        samples_ms=run.samples_ms,
        reference_ms=run.reference_ms,
        median_ms=run.median_ms,
        contention_cores=run.contention_cores,
    )
    return replace(rec, unreliable=gate.unreliable_reason(rec, s))


@dataclass(frozen=True, kw_only=True)
class GateRule:
    """A policy under test: the gate's rules (`gate.decide`) with these settings.

    The session's rule is `baseline_runs=1` with its settings' re-measure rule. Alternatives, to
    measure what they would buy: a baseline pooled from several recorded runs (`baseline_runs`);
    `remeasure_pooled` in the settings says whether a suspected regression's re-measurements are
    judged once, pooled with it, or each must regress on its own.
    """

    name: str
    settings: GateSettings = GateSettings()
    baseline_runs: int = 1

    def __post_init__(self) -> None:
        if self.baseline_runs < 1:
            raise ValueError(f"baseline_runs must be at least 1, got {self.baseline_runs}")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "settings": asdict(self.settings), "baseline_runs": self.baseline_runs}


def sequential_verdict(
    baselines: Sequence[ChainRun], currents: Sequence[ChainRun], rule: GateRule
) -> tuple[str | None, int]:
    """What `Runner.run` (perfgate.run.runner) would say under `rule` with these runs: `gate.decide` on the
    current runs one by one, as the session re-measures. Returns (latency verdict, current runs
    used), or (None, n) when another current run (or baseline run) is needed to decide. A contended
    baseline is unreliable too: nobody should gate against it, and it says nothing about the gate."""
    base = list(baselines[: rule.baseline_runs])
    if len(base) < rule.baseline_runs or not currents:
        return None, len(currents)
    baseline = gate.pool([as_record(b, rule.settings) for b in base])
    if baseline.unreliable:
        return gate.UNRELIABLE, 1
    policy = Policy(defaults=rule.settings)
    runs: list[CaseRecord] = []
    for run in currents:
        runs.append(as_record(run, rule.settings))
        decision = gate.decide("gate-quality", runs, baseline, policy)
        if not decision.remeasure:
            return next(v.verdict for v in decision.verdicts if v.metric == "latency"), len(runs)
    return None, len(runs)


@dataclass(kw_only=True)
class Comparison:
    """One gate decision per rule on the baseline run(s) and current run(s) of one comparison."""

    slowdown_pct: float
    baselines: list[ChainRun]
    currents: list[ChainRun]
    verdicts: dict[str, str]
    current_first: bool = False

    @property
    def change_pct(self) -> float:
        """Median change of the first current run against the first baseline run (the session's pair)."""
        return (self.currents[0].median_ms / self.baselines[0].median_ms - 1) * 100

    def change_pct_as(self, s: GateSettings) -> float:
        """`change_pct` as a rule with settings `s` sees it: of the step/reference ratios when it normalises."""
        cur, base = self.currents[0], self.baselines[0]
        if not (s.normalise and cur.reference_ms and base.reference_ms):
            return self.change_pct
        from perfgate.measure.stats import ratios

        return (
            statistics.median(ratios(cur.samples_ms, cur.reference_ms))
            / statistics.median(ratios(base.samples_ms, base.reference_ms))
            - 1
        ) * 100

    @property
    def runs(self) -> list[ChainRun]:
        return [*self.baselines, *self.currents]

    def as_dict(self, *, samples: bool = True) -> dict[str, Any]:
        return {
            "slowdown_pct": self.slowdown_pct,
            "verdicts": self.verdicts,
            "current_first": self.current_first,
            "change_pct": self.change_pct,
            "baselines": [r.to_json(samples=samples) for r in self.baselines],
            "currents": [r.to_json(samples=samples) for r in self.currents],
        }


NOT_JUDGED = "not judged"  # re-judging stored runs: the rule needs runs the experiment did not take


def load_comparisons(data: dict[str, Any]) -> list[Comparison]:
    """The comparisons of a `--json` report, with their raw samples (ValueError when they were left out)."""
    try:
        return [
            Comparison(
                slowdown_pct=c["slowdown_pct"],
                baselines=[ChainRun.from_json(r) for r in c["baselines"]],
                currents=[ChainRun.from_json(r) for r in c["currents"]],
                verdicts=dict(c["verdicts"]),
                current_first=c.get("current_first", False),
            )
            for c in data["comparisons"]
        ]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a gate-quality report (missing {exc})") from None


def rejudge(comparisons: Sequence[Comparison], rules: Sequence[GateRule]) -> list[Comparison]:
    """The stored runs judged again under `rules`; a rule needing a run that was not taken (more
    baseline runs, or a re-measurement the recorded rules did not ask for) gets NOT_JUDGED."""
    out = []
    for c in comparisons:
        verdicts = {}
        for r in rules:
            v, _ = sequential_verdict(c.baselines, c.currents, r)
            verdicts[r.name] = v if v is not None else NOT_JUDGED
        out.append(
            Comparison(
                slowdown_pct=c.slowdown_pct,
                baselines=c.baselines,
                currents=c.currents,
                verdicts=verdicts,
                current_first=c.current_first,
            )
        )
    return out


def compare(
    measure_fn: MeasureFn,
    base_layers: int,
    cur_layers: int,
    rules: Sequence[GateRule],
    *,
    slowdown_pct: float,
    current_first: bool = False,
) -> Comparison:
    """Measure a baseline run and a current run (in the given order), the further baseline runs
    some rule pools, then more current runs while any rule still has a regression to confirm.
    Every rule judges the same runs."""
    if current_first:
        currents = [measure_fn(cur_layers)]
        baselines = [measure_fn(base_layers)]
    else:
        baselines = [measure_fn(base_layers)]
        currents = [measure_fn(cur_layers)]
    baselines += [measure_fn(base_layers) for _ in range(max(r.baseline_runs for r in rules) - 1)]
    while any(sequential_verdict(baselines, currents, r)[0] is None for r in rules):
        currents.append(measure_fn(cur_layers))
    verdicts = {r.name: sequential_verdict(baselines, currents, r)[0] for r in rules}
    return Comparison(
        slowdown_pct=slowdown_pct,
        baselines=baselines,
        currents=currents,
        verdicts=verdicts,
        current_first=current_first,
    )


def run_experiment(
    measure_fn: MeasureFn,
    *,
    depth: int,
    slowdowns_pct: Sequence[float] = DEFAULT_SLOWDOWNS_PCT,
    comparisons: int = 50,
    rules: Sequence[GateRule] = (GateRule(name="default"),),
    max_attempts_factor: float = 2.0,
    progress: Callable[[str], None] | None = None,
    checkpoint: Callable[[list[Comparison]], None] | None = None,
) -> list[Comparison]:
    """`comparisons` judged (reliable under the first rule) comparisons per slowdown, round-robin over
    the slowdowns; unreliable ones are kept and retried, up to `max_attempts_factor` x as many.
    `checkpoint` gets the comparisons so far after every round, so a long run interrupted keeps its data."""
    if comparisons < 1:
        raise ValueError(f"comparisons must be at least 1, got {comparisons}")
    if not rules:
        raise ValueError("need at least one rule")
    layers = {s: layers_for(depth, s) for s in slowdowns_pct}
    max_attempts = max(comparisons, math.ceil(comparisons * max_attempts_factor))
    done: list[Comparison] = []
    judged = {s: 0 for s in slowdowns_pct}
    attempts = {s: 0 for s in slowdowns_pct}
    total = comparisons * len(slowdowns_pct)
    while todo := [s for s in slowdowns_pct if judged[s] < comparisons and attempts[s] < max_attempts]:
        for s in todo:
            c = compare(measure_fn, depth, layers[s], rules, slowdown_pct=s, current_first=attempts[s] % 2 == 1)
            attempts[s] += 1
            judged[s] += c.verdicts[rules[0].name] != gate.UNRELIABLE
            done.append(c)
            if progress:
                extra = "".join(f" {r.name}={c.verdicts[r.name]}" for r in rules[1:])
                progress(
                    f"[{sum(judged.values())}/{total}] +{s:g}%: {c.verdicts[rules[0].name]} "
                    f"(median {c.change_pct_as(rules[0].settings):+.1f}%, {len(c.currents)} current run(s), "
                    f"contention {max(r.contention_cores for r in c.runs):.2f}){extra}"
                )
        if checkpoint:
            checkpoint(done)
    return done
