"""The documentation site builds with `mkdocs build --strict`: a page, a link or an anchor that is
not there fails the build (mkdocs.yml's validation), and so does an API page whose module moved."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (the dev extra has it)")
pytest.importorskip("material", reason="mkdocs-material is not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed: pip install -e '.[docs]'")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    r = build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "packaging" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf8")
    assert "MissingExtra" in api  # mkdocstrings read perfgate.extras' docstrings


@pytest.mark.parametrize(
    ("page", "old", "new", "named"),
    [
        ("index.md", "(packaging.md)", "(packing.md)", "packing.md"),  # a page that is not there
        ("running.md", "# Running", "# Running [x](gate-policy.md#no-such-heading)\n\n#", "no-such-heading"),
        ("api.md", "::: perfgate.exitcodes", "::: perfgate.exit_codes", "perfgate.exit_codes"),  # a moved module
    ],
    ids=["page", "anchor", "api-module"],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, page: str, old: str, new: str, named: str) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copytree(ROOT / "docs", root / "docs")
    (root / "perfgate").symlink_to(ROOT / "perfgate")
    text = (root / "docs" / page).read_text(encoding="utf8")
    assert old in text
    (root / "docs" / page).write_text(text.replace(old, new, 1), encoding="utf8")
    r = build(root, tmp_path / "site")
    assert r.returncode != 0, r.stderr[-2000:]
    assert named in r.stderr, r.stderr[-2000:]
