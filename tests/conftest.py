"""Fixtures shared by the harness's tests (no test logic here)."""

import pytest


@pytest.fixture(autouse=True)
def _no_xdist_worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-benchmark disables benchmarking in any process that sees PYTEST_XDIST_WORKER, and the
    pytest runs these tests start inherit it under `pytest -n N`: on the first GPU run, 4 tests
    failed for that alone (nothing was recorded). Sub-runs are not xdist workers."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
