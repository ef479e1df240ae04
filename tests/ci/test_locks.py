"""The hashed locks (requirements/*.txt, scripts/_lock.sh) and scripts/_venv.sh's PERFGATE_REQUIREMENTS:
the locks pin what pyproject.toml pins, and an install from a lock refuses anything without a hash."""

from __future__ import annotations

import hashlib
import re
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.ci.helpers import ROOT, run, script_env

LOCKS = {"requirements/gpu.txt": [], "requirements/ci-cpu.txt": ["dev"]}


def locked_versions(text: str) -> dict[str, str]:
    return {m[0].lower().replace("_", "-"): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", text, re.M)}


def drift(pyproject: dict, lock_text: str, extras: list[str]) -> list[str]:
    """pyproject.toml's exact pins that the lock does not hold at that version (a local version
    label such as +cpu is the same release)."""
    project = pyproject["project"]
    pins = list(project["dependencies"]) + [d for e in extras for d in project["optional-dependencies"][e]]
    locked = locked_versions(lock_text)
    found = []
    for pin in pins:
        name, version = re.match(r"([A-Za-z0-9_.-]+)==([^\s;]+)", pin).groups()
        got = locked.get(name.lower().replace("_", "-"))
        if got is None or got.split("+")[0] != version:
            found.append(f"{name}=={version} locked as {got}")
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_holds_pyprojects_pins(lock: str) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    text = (ROOT / lock).read_text()
    assert drift(pyproject, text, LOCKS[lock]) == [], "run scripts/_lock.sh"
    assert "setuptools==" in text  # the build backend, for --no-build-isolation
    # A pin moved in pyproject.toml without a new lock is seen.
    pyproject["project"]["dependencies"] = [
        d.replace("torch==2.13.0", "torch==2.14.0") for d in pyproject["project"]["dependencies"]
    ]
    assert drift(pyproject, text, LOCKS[lock]) == ["torch==2.14.0 locked as " + locked_versions(text)["torch"]]


def test_a_missing_lock_is_one_line(tmp_path: Path) -> None:
    env = script_env(tmp_path, PERFGATE_VENV=str(tmp_path / "venv"), PERFGATE_REQUIREMENTS="requirements/none.txt")
    env.pop("PERFGATE_SKIP_INSTALL")
    r = run(["bash", "-c", "source scripts/_venv.sh"], env)
    assert r.returncode == 4
    assert r.stderr.strip() == (
        "perfgate: PERFGATE_REQUIREMENTS=requirements/none.txt is not a file; name a lock under requirements/ "
        "(scripts/_lock.sh writes them)"
    )
    assert not (tmp_path / "venv").exists()


def tiny_wheel(folder: Path) -> Path:
    """A real (tiny) wheel for pip to find offline."""
    wheel = folder / "perfgate_tiny-1.0-py3-none-any.whl"
    files = {
        "perfgate_tiny/__init__.py": "",
        "perfgate_tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: perfgate-tiny\nVersion: 1.0\n",
        "perfgate_tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files["perfgate_tiny-1.0.dist-info/RECORD"] = "".join(
        f"{p},,\n" for p in [*files, "perfgate_tiny-1.0.dist-info/RECORD"]
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "pip_says"),
    [
        ("perfgate-tiny==1.0\n", "Hashes are required in --require-hashes mode"),
        ("perfgate-tiny==1.0 --hash=sha256:" + "0" * 64 + "\n", "THESE PACKAGES DO NOT MATCH THE HASHES"),
    ],
    ids=["no-hash", "wrong-hash"],
)
def test_an_install_from_a_lock_refuses_an_unchecked_file(tmp_path: Path, entry: str, pip_says: str) -> None:
    """scripts/_venv.sh with PERFGATE_REQUIREMENTS, offline, against a wheel in a local folder."""
    wheel = tiny_wheel(tmp_path)
    lock = tmp_path / "lock.txt"
    lock.write_text(entry)
    env = script_env(
        tmp_path,
        PERFGATE_VENV=str(tmp_path / "venv"),
        PERFGATE_REQUIREMENTS=str(lock),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(tmp_path),
    )
    env.pop("PERFGATE_SKIP_INSTALL")
    r = run(["bash", "-c", "source scripts/_venv.sh"], env, timeout=180)
    assert r.returncode != 0 and pip_says in r.stderr, r.stderr[-2000:]
    assert f"installing --require-hashes -r {lock}" in r.stderr
    assert not (tmp_path / "venv" / ".perfgate-installed").exists()
    # The same lock with the wheel's true hash gets past pip's check (to perfgate's own install).
    lock.write_text(f"perfgate-tiny==1.0 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    r = run(["bash", "-c", "source scripts/_venv.sh"], env, timeout=180)
    assert pip_says not in r.stderr
    assert list((tmp_path / "venv" / "lib").glob("python3*/site-packages/perfgate_tiny/__init__.py")), r.stderr[-2000:]
