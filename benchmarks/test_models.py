"""The benchmark suite: every registered model x size x option sweep x optimisation variant.

The parametrisation comes from perfgate's plugin (`--perfgate-models`, `--perfgate-sizes`,
`--perfgate-variants`, `--perfgate-device`); each id, e.g. `physicsnemo-block-tiny-baseline`,
is the name the baseline stores. Run: `pytest benchmarks --benchmark-compare`.
"""

from perfgate.plugin.hooks import run_benchmark


def test_step(case, benchmark, request):
    """Latency, peak memory and accuracy of one step, gated against this machine's baseline."""
    run_benchmark(case, benchmark, request)
