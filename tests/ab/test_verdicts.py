"""`perfgate ab`'s device-time verdicts (perfgate.ab.verdicts) on what GPU runs produced: the `pr`
tier's records from three unchanged processes on two H200 leases (docs/data/gpu-2026-11-27-h200-b,
gpu-2026-11-28-h200), and the sixth run's interleaved device-time windows."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

from perfgate.ab import verdicts as ab
from perfgate.ab.job import Measured
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.gate.verdicts import INCONCLUSIVE, REGRESSION, UNCHANGED
from perfgate.measure.device_time import block_means
from tests.helpers import kept_gpu_records

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"


def test_process_pairs_judge_device_time_by_their_mean_log_ratio() -> None:
    """Three pairs of unchanged processes (the fifth run's cold and warm processes and the sixth
    run's, a lease apart) read every case's device time unchanged; the same heads with their GPU
    work 3% longer (each record's figure scaled: a slower GPU side) read a regression."""
    cold5, warm5 = (kept_gpu_records("gpu-2026-11-27-h200-b", f"tier-{phase}") for phase in ("cold", "warm"))
    cold6 = kept_gpu_records("gpu-2026-11-28-h200", "tier-cold")
    s = GateSettings()
    for case in cold6:
        pairs = [ab.Pair(base=cold5[case], head=cold6[case]), ab.Pair(base=warm5[case], head=cold6[case]),
                 ab.Pair(base=cold5[case], head=warm5[case])]  # fmt: skip
        v = ab.device_time_verdict(case, pairs, s)
        assert v is not None and v.metric == "device_time" and v.verdict == UNCHANGED, (case, v)
        assert "over 3 process pairs" in v.message
        slower = [replace(p, head=replace(p.head, device_ms_per_step=p.head.device_ms_per_step * 1.03)) for p in pairs]
        v = ab.device_time_verdict(case, slower, s)
        assert v is not None and v.verdict == REGRESSION, (case, v)
    no_gpu = replace(cold6[case], device_ms_per_step=None)
    assert ab.device_time_verdict(case, [ab.Pair(base=no_gpu, head=no_gpu)], s) is None  # a CPU run: nothing


def _measured(case: str, base: list[float] | None, head: list[float] | None, error: str | None = None) -> Measured:
    return Measured(case=case, ratio=1.0, rounds=50, median_base_ms=1.4, median_head_ms=1.4, contention_cores=0.0,
                    accuracy_base={}, accuracy_head={}, device="cuda:0", model="physicsnemo-block", variant="bf16",
                    device_base_ms=base, device_head_ms=head, device_block_steps=5 if base else None,
                    device_error=error)  # fmt: skip


def test_interleaved_processes_pool_their_device_time_blocks() -> None:
    """Interleaved mode: each worker's window gives blocks of 5 steps per side; the processes' blocks
    pooled are judged by the mean. Here the sixth run's windows of the bf16 block (its GPU-side +2%
    hits one step in five) in blocks of five, one window per worker process: a regression; its
    unchanged windows: unchanged; a window that failed on every worker: said, inconclusive."""
    rows = json.loads(gzip.decompress((DATA / "gpu-2026-11-28-h200" / "quality.json.gz").read_bytes()))["rows"]
    bf16 = [r for r in rows if r["case"].startswith("physicsnemo")]
    for kind, want in (("gpu", REGRESSION), ("unchanged", UNCHANGED)):
        workers = [
            _measured("c", block_means(r["ab_base_device_ms"], 5), block_means(r["device_ms"], 5))
            for r in [r for r in bf16 if r["kind"] == kind][:3]
        ]
        got = {v.metric: v for v in ab.interleaved_verdicts("c", workers, Policy(), final=True) or []}
        assert got["device_time"].verdict == want and "over 6 blocks" in got["device_time"].message
    failed = [_measured("c", None, None, error="RuntimeError: CUPTI_ERROR_NOT_INITIALIZED")] * 3
    got = {v.metric: v for v in ab.interleaved_verdicts("c", failed, Policy(), final=True) or []}
    assert got["device_time"].verdict == INCONCLUSIVE
    assert got["device_time"].message == "not measured: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"


def test_a_case_stays_scheduled_while_its_device_time_is_undecided() -> None:
    """Processes mode: the kept records as six pairs whose wall time agrees to +-0.1% (latency decided:
    unchanged) but whose device time reads +4, -1 and +2.5% (undecided at 1.5%): the case asks for
    another pair instead of leaving with a device-time verdict it could not make; at the end of its
    pairs it gets one, inconclusive."""
    case = "vjepa2-encoder-large-baseline"
    rec = kept_gpu_records("gpu-2026-11-28-h200", "tier-cold")[case]
    dev, ms = rec.device_ms_per_step, rec.median_ms
    pairs = [
        ab.Pair(
            base=replace(rec, median_ms=ms, samples_ms=[ms] * 20),
            head=replace(rec, median_ms=ms * (1 + w), samples_ms=[ms * (1 + w)] * 20, device_ms_per_step=dev * (1 + d)),
        )
        for w, d in zip((0.001, -0.001, 0.0005, 0.0, -0.0005, 0.001), (0.04, -0.01, 0.025, 0.04, -0.01, 0.025))
    ]
    assert ab.latency_verdict(case, pairs, GateSettings(), final=False).verdict == UNCHANGED
    assert ab.verdicts(case, pairs, Policy(), final=False) is None
    final = {v.metric: v.verdict for v in ab.verdicts(case, pairs, Policy(), final=True)}
    assert final["latency"] == UNCHANGED and final["device_time"] == INCONCLUSIVE
