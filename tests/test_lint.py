"""ruff (pinned in the dev extra, configured in pyproject.toml) finds nothing and formats nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["perfgate", "models", "tests", "benchmarks", "conftest.py"]


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed: pip install -e '.[dev]'")
    return found


def test_ruff_check_finds_nothing() -> None:
    r = subprocess.run([_ruff(), "check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_would_change_nothing() -> None:
    r = subprocess.run(
        [_ruff(), "format", "--check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
