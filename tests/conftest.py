"""Fixtures shared by the harness's tests (no test logic here)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfgate.counts.suite import NO_COUNTS_ENV
from tests.helpers import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


# Sub-runs the tests start are neither xdist workers nor CI jobs: pytest-benchmark disables
# benchmarking in any process that sees PYTEST_XDIST_WORKER, which they inherit under `pytest -n N`
# (on the first GPU run, 4 tests failed for that alone: nothing was recorded), and $CI makes
# perfgate fail a run that judged no latency (tests that want it set it themselves).
_NOT_FOR_SUB_RUNS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "CI")


# One torch thread in every test process and sub-run: the tests check what the harness decides, not
# how torch splits work, and under `-n 2` on the 2-core VM two threads per process are more threads
# than cores. An OpenMP barrier then waits for a descheduled thread at every parallel op: the
# interleaved A/B worker test took 699 s beside one CPU-burning process with torch's default of two
# threads and 83 s with one (it takes 86 s alone). A thread count given in the environment is kept.
TEST_THREADS_ENV = "OMP_NUM_THREADS"


def pytest_configure(config: pytest.Config) -> None:
    import torch

    os.environ.setdefault(TEST_THREADS_ENV, "1")  # inherited by every sub-run the tests start
    torch.set_num_threads(int(os.environ[TEST_THREADS_ENV]))


def _sub_run_pythonpath() -> str:
    """This checkout first on a sub-run's path: pytester puts only its own folder there, and an
    editable install elsewhere (another worktree's) would otherwise be what the sub-run imports."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(autouse=True)
def _clean_sub_run_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    for name in _NOT_FOR_SUB_RUNS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", _sub_run_pythonpath())
    # A sub-run of this repository's suite on the CPU first counts instructions under valgrind
    # ([tool.perfgate.counts]): about 30 s each, for tests about something else. Only tests marked
    # `counts` (tests/counts/, the record-and-open-PR flow) count; the others' records say why not.
    if request.node.get_closest_marker("counts") is None:
        monkeypatch.setenv(NO_COUNTS_ENV, "1")
    else:
        monkeypatch.delenv(NO_COUNTS_ENV, raising=False)


@dataclass(frozen=True)
class RealRun:
    """Files of one real run of the benchmark suite: what the report, the Markdown and the history read."""

    folder: Path
    results: Path  # --benchmark-json
    verdicts: Path  # --perfgate-verdicts
    step_summary: Path  # what the plugin appended to $GITHUB_STEP_SUMMARY
    stdout: str


# The shared 2-core machine is busy: without this every case would be "unreliable" and have no
# in-run speedup (a contended eager run gives none), and the report's speedup chart would vanish.
REAL_RUN_PYPROJECT = """
[tool.perfgate]
registries = ["models"]
[tool.perfgate.gate]
contention_max = 1000.0
"""


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    """The suite itself on two tiny models, three variants, few rounds (about 15 s): eager, bf16
    (slower than eager on most CPUs) and int8-dynamic (several times slower on the tiny block),
    with telemetry, the gate on and no baseline (so: the no-baseline notice), one skipped case."""
    folder = tmp_path_factory.mktemp("real-run")
    (folder / "benchmarks").mkdir()
    (folder / "benchmarks" / "test_models.py").write_text((ROOT / "benchmarks" / "test_models.py").read_text())
    (folder / "pyproject.toml").write_text(REAL_RUN_PYPROJECT)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFGATE_")) and k not in _NOT_FOR_SUB_RUNS
    }
    env["GITHUB_STEP_SUMMARY"] = str(folder / "step-summary.md")
    env["PYTHONPATH"] = _sub_run_pythonpath()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "perfgate.plugin.hooks",
        "-p",
        "no:cacheprovider",
        "benchmarks",
        "-q",
        "--perfgate-device",
        "cpu",
        "--perfgate-models",
        "physicsnemo-block,physicsnemo-train",
        "--perfgate-variants",
        "baseline,bf16,int8-dynamic",
        "--perfgate-smoke",
        "--benchmark-json",
        "run.json",
        "--perfgate-verdicts",
        "verdicts.json",
    ]
    r = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return RealRun(folder, folder / "run.json", folder / "verdicts.json", folder / "step-summary.md", r.stdout)
