"""The stored gate on two unchanged GPU processes: the H200's `pr` tier run with a cold inductor
cache, then again minutes later on the same machine with a warm one (docs/data/gpu-2026-11-27-h200-b,
the records pytest wrote there), the warm run judged against the cold one as its record. The data
behind the pull request's default on a GPU runner: wall time by A/B, device time and kernels stored."""

from __future__ import annotations

from perfgate import gate
from perfgate.gate.policy import Policy
from perfgate.gate.verdicts import REGRESSION, UNCHANGED
from tests.helpers import kept_gpu_records

RUN = "gpu-2026-11-27-h200-b"


def test_two_unchanged_gpu_processes_move_wall_time_but_not_device_time_or_kernel_counts() -> None:
    records = {phase: kept_gpu_records(RUN, f"tier-{phase}") for phase in ("cold", "warm")}
    both = [c for c in records["cold"] if c in records["warm"]]
    assert len(both) == 12  # each run was cut by the lease's time limit: 13 and 12 cases
    verdicts = {}
    for c in both:
        judged = gate.compare(c, records["warm"][c], records["cold"][c], Policy())
        verdicts[c.split("[")[-1].rstrip("]")] = {v.metric: v.verdict for v in judged}
    assert {v["device_time"] for v in verdicts.values()} == {UNCHANGED}  # moved -0.33..+0.19% (tolerance 1.5%)
    assert {v["kernels"] for v in verdicts.values()} == {UNCHANGED}  # identical counts
    # the launch-bound compiled world model's wall time moved +17.5%, +20.2% and +62.7%
    assert sorted(c for c, v in verdicts.items() if v["latency"] == REGRESSION) == [
        "owl-world-model-1b-cacheframes0-compile",
        "owl-world-model-1b-cacheframes0-compile-reduce-overhead",
        "owl-world-model-1b-compile",
    ]


def test_unchanged_gpu_processes_on_two_leases_keep_device_time_and_kernel_counts() -> None:
    """The `pr` tier cold on the sixth run's H200 lease (2026-11-28) judged against the fifth run's
    cold and warm records (2026-11-27, another lease, the same kind of machine): every case's device
    time and kernel count unchanged; wall time not (the compiled world model +74.7% against the cold
    record)."""
    new = kept_gpu_records("gpu-2026-11-28-h200", "tier-cold")
    judged: dict[str, dict[str, set[str]]] = {}
    for phase in ("cold", "warm"):
        old = kept_gpu_records(RUN, f"tier-{phase}")
        assert len(new) == 12 and set(new) <= set(old)  # cut after 12 cases; the fifth run's cold got 13
        for c in new:
            for v in gate.compare(c, new[c], old[c], Policy()):
                judged.setdefault(v.metric, {}).setdefault(v.verdict, set()).add(
                    f"{phase}:{c.split('[')[-1].rstrip(']')}"
                )
    assert set(judged["device_time"]) == set(judged["kernels"]) == {UNCHANGED}
    assert len(judged["kernels"][UNCHANGED]) == 24
    assert judged["latency"][REGRESSION] == {"cold:owl-world-model-1b-compile", "warm:owl-world-model-1b-compile"}


def test_a_baseline_measured_beside_another_gpu_process_judges_no_device_time() -> None:
    """A kept record whose telemetry saw another process computing on its GPU (the sampler's
    summary, so changed): its kernels shared the SMs, so a run judged against it gets no device-time
    verdict but an inconclusive one saying why, where the healthy record gives an improvement (the
    shared baseline read 15% more busy time). Kernel counts and memory, which a neighbour does not
    move, are judged as before."""
    from dataclasses import replace

    from perfgate.gate.verdicts import IMPROVEMENT, INCONCLUSIVE

    cold = kept_gpu_records(RUN, "tier-cold")
    case = "vjepa2-encoder-large-baseline"  # compute-bound: 46 ms of GPU work a step
    rec = cold[case]
    assert rec.telemetry is not None and rec.telemetry.gpu_other_processes_max == 0 and rec.unreliable is None
    slower = replace(rec, device_ms_per_step=rec.device_ms_per_step * 1.15)
    healthy = {v.metric: v for v in gate.compare(case, rec, slower, Policy())}
    assert healthy["device_time"].verdict == IMPROVEMENT
    shared = replace(slower, telemetry=replace(rec.telemetry, gpu_other_processes_max=1))
    judged = {v.metric: v for v in gate.compare(case, rec, shared, Policy())}
    assert judged["device_time"].verdict == INCONCLUSIVE
    assert "baseline was measured unreliably (1 other process(es) computed" in judged["device_time"].message
    assert judged["kernels"].verdict == UNCHANGED and judged["memory"].verdict == UNCHANGED
