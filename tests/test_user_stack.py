"""perfgate installed into someone else's environment: a venv that already holds its own torch,
numpy and pytest (other releases than the repository's lock, within perfgate's ranges) gets
perfgate's wheel, and pip replaces none of them.

pip resolves the install with `--dry-run --report`: the JSON report lists every distribution the
install would put in, so "replaced" is exact (a name the venv already has) and nothing is
downloaded beyond metadata. The user's packages come from wherever this pip is configured to find
them (PyPI; this machine's torch CPU build lies in pip's find-links).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.ci.helpers import tool
from tests.test_install import NOT_PACKAGED

ROOT = Path(__file__).resolve().parents[1]
# The user's stack: allowed by pyproject.toml's ranges, other releases than requirements/ci-cpu.txt's.
USER_NUMPY, USER_PYTEST = "numpy==2.2.6", "pytest==8.4.2"

pytestmark = pytest.mark.slow


def pip(python: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PERFGATE_"))}
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def installed(python: Path) -> dict[str, str]:
    r = pip(python, "list", "--format=json")
    return {canonical(p["name"]): p["version"] for p in json.loads(r.stdout)}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def replaced(report: dict, before: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{name: (the user's version, the version pip would put in)} from pip's install report."""
    found = {}
    for item in report["install"]:
        name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
        if name in before:
            found[name] = (before[name], version)
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_PACKAGED, "docs", "site", "requirements"))
    r = pip(Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(src))
    assert r.returncode == 0, r.stderr[-2000:]
    (built,) = tmp.glob("perfgate-*.whl")
    return built


def uv_install_args() -> list[str]:
    """pip's configured find-links and extra index for uv, which reads neither from pip's config."""
    args = []
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        args += ["--find-links", folder]
    if os.environ.get("PIP_EXTRA_INDEX_URL"):
        args += ["--extra-index-url", os.environ["PIP_EXTRA_INDEX_URL"], "--index-strategy", "unsafe-best-match"]
    return args


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the user's torch (this interpreter's release), numpy and pytest; uv (the dev
    extra's) sets it up in seconds where pip takes a minute and more."""
    probe = pip(Path(sys.executable), "index", "versions", "scipy", timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"no package index reachable (pip index versions scipy: {probe.stderr.strip()[-200:]})")
    import torch

    folder = tmp_path_factory.mktemp("user") / "venv"
    user_python = folder / "bin" / "python"
    stack = [f"torch=={torch.__version__}", USER_NUMPY, USER_PYTEST]
    uv = tool("uv")
    if uv:
        subprocess.run([uv, "venv", "-q", "--seed", "--python", sys.executable, str(folder)], check=True, timeout=120)
        cmd = [uv, "pip", "install", "-q", "--python", str(user_python), *uv_install_args(), *stack]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    else:
        venv.create(folder, with_pip=True)
        r = pip(user_python, "install", "-q", *stack, timeout=600)
    if r.returncode != 0 and re.search(
        r"torch==\S+ (?:was not found|is not available)|No matching distribution", r.stderr
    ):
        pytest.skip(f"torch=={torch.__version__} is not at hand here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    return user_python


def test_installing_the_wheel_replaces_nothing_of_the_users(wheel: Path, user_env: Path, tmp_path: Path) -> None:
    before = installed(user_env)
    assert before["numpy"] == USER_NUMPY.split("==")[1] and before["pytest"] == USER_PYTEST.split("==")[1]
    assert "torch" in before
    out = tmp_path / "report.json"
    r = pip(user_env, "install", "--dry-run", "--report", str(out), "-q", str(wheel), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    names = {canonical(i["metadata"]["name"]) for i in report["install"]}
    assert "perfgate" in names
    assert replaced(report, before) == {}
    # The light core: nothing of the report, gpu or quant extras comes with a plain install.
    assert names.isdisjoint({"matplotlib", "jinja2", "ruptures", "pygal", "nvidia-ml-py", "torchao"})
    print("would add:", sorted(names - {"perfgate"}))


def test_the_check_sees_a_pin_that_would_replace_the_users_numpy(user_env: Path) -> None:
    """The same check, on an install that does replace something: a pin on another numpy."""
    before = installed(user_env)
    out = user_env.parent.parent / "pin-report.json"
    r = pip(user_env, "install", "--dry-run", "--report", str(out), "-q", "numpy==2.4.6", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert replaced(json.loads(out.read_text()), before) == {"numpy": ("2.2.6", "2.4.6")}
