"""The hashed locks (requirements/*.txt, scripts/_lock.sh) and scripts/_venv.sh's PERFGATE_REQUIREMENTS:
the locks pin what pyproject.toml pins, and an install from a lock refuses anything without a hash."""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.ci.helpers import ROOT, run, script_env

# Each lock and the extras it holds (scripts/_lock.sh).
LOCKS = {
    "requirements/gpu.txt": ["all"],
    "requirements/ci-cpu.txt": ["dev"],
    "requirements/ci-oldest.txt": ["dev"],
    "requirements/ci-newest.txt": ["dev"],
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(text: str) -> dict[str, str]:
    return {canonical(m[0]): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", text, re.M)}


def requirements(project: dict, extras: list[str]) -> list[Requirement]:
    """The project's dependencies with `extras`, a self-reference (perfgate[report,gpu]) expanded."""
    found, todo, seen = list(map(Requirement, project["dependencies"])), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in map(Requirement, project["optional-dependencies"][extra]):
            if canonical(req.name) == canonical(project["name"]):
                todo += sorted(req.extras)
            else:
                found.append(req)
    return found


def drift(pyproject: dict, lock_text: str, extras: list[str]) -> list[str]:
    """pyproject.toml's requirements that the lock does not satisfy (a local version label such as
    +cpu is the same release)."""
    locked = locked_versions(lock_text)
    found = []
    for req in requirements(pyproject["project"], extras):
        got = locked.get(canonical(req.name))
        if got is None or not req.specifier.contains(Version(got), prereleases=True):
            found.append(f"{req} locked as {got}")
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_satisfies_pyprojects_ranges(lock: str) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    text = (ROOT / lock).read_text()
    assert drift(pyproject, text, LOCKS[lock]) == [], "run scripts/_lock.sh"
    assert "setuptools==" in text  # the build backend, for --no-build-isolation
    assert re.match(r"# Python 3\.\d+, ", text)  # scripts/_venv.sh installs it only into that Python
    # A floor raised in pyproject.toml without a new lock is seen.
    torch = locked_versions(text)["torch"]
    pyproject["project"]["dependencies"] = [
        "torch>=2.99" if d.startswith("torch>=") else d for d in pyproject["project"]["dependencies"]
    ]
    assert drift(pyproject, text, LOCKS[lock]) == [f"torch>=2.99 locked as {torch}"]


def test_dependencies_are_ranges_and_exact_versions_live_in_the_locks() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every = list(project["dependencies"]) + [d for e in project["optional-dependencies"].values() for d in e]
    assert [d for d in every if "==" in d or "<" in d] == []
    assert all(Requirement(d).specifier for d in every if not d.startswith("perfgate["))  # each has a floor


def test_the_oldest_lock_holds_the_floors_and_the_newest_lock_is_newer() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    oldest = locked_versions((ROOT / "requirements/ci-oldest.txt").read_text())
    newest = locked_versions((ROOT / "requirements/ci-newest.txt").read_text())
    above = {}
    for req in requirements(project, ["dev"]):
        (floor,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        got = Version(oldest[canonical(req.name)])
        # lowest-direct: the floor's release (psutil's 5.9 floor is 5.9.4, the first with a wheel for 3.11)
        if got.release[: len(floor.release)] != floor.release:
            above[req.name] = str(got)
    assert above == {}, "ci-oldest.txt is not a lowest-direct resolution: run scripts/_lock.sh"
    assert Version(newest["torch"]) > Version(oldest["torch"])


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


FAKE_PYTHON = """#!/bin/sh
# python3 / the venv's python: says it is $FAKE_PY_VERSION and records every other call.
case "$1" in -c) echo "$FAKE_PY_VERSION"; exit 0;; esac
echo "$*" >> "$FAKE_LOG"
"""


def without_nvidia_smi(folder: Path, shadow: Path) -> str:
    """`folder` for PATH, or where it holds a real nvidia-smi (a GPU machine: /usr/bin) a folder
    of links to everything else in it: dropping /usr/bin would drop bash, sed and sha256sum too."""
    if not (folder / "nvidia-smi").exists():
        return str(folder)
    shadow.mkdir()
    for entry in folder.iterdir():
        if entry.name != "nvidia-smi":
            (shadow / entry.name).symlink_to(entry)
    return str(shadow)


def default_install(tmp_path: Path, version: str, gpu: bool = False, **extra: str) -> tuple[str, list[str]]:
    """scripts/_venv.sh with PERFGATE_REQUIREMENTS as given (unset by default), a python3 that
    reports `version`, and an nvidia-smi on PATH when `gpu`: (stderr, the pip calls it made)."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    for where in (bin_dir / "python3", venv / "bin" / "python"):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(FAKE_PYTHON)
        where.chmod(0o755)
    if gpu:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    keep = [
        without_nvidia_smi(Path(p), tmp_path / f"path{i}")
        for i, p in enumerate(os.environ["PATH"].split(os.pathsep))
        if p
    ]
    env = script_env(tmp_path, PERFGATE_VENV=str(venv), FAKE_PY_VERSION=version, FAKE_LOG=str(tmp_path / "log"))
    env.update(PATH=os.pathsep.join([str(bin_dir), *keep]), **extra)
    env.pop("PERFGATE_SKIP_INSTALL")
    r = run(["bash", "-c", "PERFGATE_SETUP_EXTRAS=dev source scripts/_venv.sh"], env)
    assert r.returncode == 0, r.stderr
    return r.stderr, (tmp_path / "log").read_text().splitlines()


def lock_python(lock: str) -> str:
    return re.match(r"# Python (3\.\d+),", (ROOT / lock).read_text()).group(1)


def test_the_repositorys_runs_install_the_cpu_lock_by_default(tmp_path: Path) -> None:
    stderr, calls = default_install(tmp_path, lock_python("requirements/ci-cpu.txt"))
    assert "ranges" not in stderr
    assert calls[0].endswith(
        "-m pip install --disable-pip-version-check -q --require-hashes -r requirements/ci-cpu.txt"
    )
    assert calls[1].endswith("--no-deps --no-build-isolation -e .")


def test_a_machine_with_nvidia_smi_installs_the_gpu_lock(tmp_path: Path) -> None:
    _, calls = default_install(tmp_path, lock_python("requirements/gpu.txt"), gpu=True)
    assert calls[0].endswith("--require-hashes -r requirements/gpu.txt")


def test_another_python_gets_one_line_and_the_ranges(tmp_path: Path) -> None:
    stderr, calls = default_install(tmp_path, "3.99")
    cpu = lock_python("requirements/ci-cpu.txt")
    assert stderr.splitlines()[0] == (
        f"perfgate: requirements/ci-cpu.txt is locked for Python {cpu} and python3 is 3.99: installing "
        "pyproject.toml's ranges instead (versions not pinned; PERFGATE_REQUIREMENTS=FILE picks a lock)"
    )
    assert calls == ["-m pip install --disable-pip-version-check -q -e .[dev]"]


def test_an_empty_requirements_variable_installs_the_ranges_without_a_word(tmp_path: Path) -> None:
    stderr, calls = default_install(tmp_path, lock_python("requirements/ci-cpu.txt"), PERFGATE_REQUIREMENTS="")
    assert "locked for" not in stderr
    assert calls == ["-m pip install --disable-pip-version-check -q -e .[dev]"]
