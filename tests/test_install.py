"""perfgate as an installed package: what its wheel puts into site-packages, and a project elsewhere
that benchmarks its own models with perfgate loaded only through the pytest11 entry point.

The project's files are the docs' own (docs/own-project.md, "Benchmark your own model from another
repository"), so the page cannot drift from what works. The wheel is built from this checkout
and installed with pip into a folder of its own; the test processes import perfgate from there,
never from this checkout (the project folder is elsewhere) and never via conftest.py.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "# Benchmark your own model from another repository"  # docs/own-project.md, the whole page
# Not part of the package: kept out of the copy the wheel is built from (speed, and no stray build/ here).
NOT_PACKAGED = (".git", ".venv", ".perfgate", "build", "*.egg-info", "__pycache__", "baselines", "tests", ".benchmarks")

pytestmark = pytest.mark.slow


def readme_files() -> dict[str, str]:
    """The files the README's section has a user write: each code block whose first line is `# PATH`."""
    text = (ROOT / "docs" / "own-project.md").read_text(encoding="utf8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    files = {}
    for block in re.findall(r"```(?:toml|python)\n(.*?)```", section, re.S):
        m = re.match(r"# ([\w./-]+\.(?:py|toml))\n", block)
        if m:
            files[m.group(1)] = block
    return files


def _run(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PERFGATE_"))}
    env["PYTHONPATH"] = str(site)  # the installed perfgate only
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the folder pip installed it into) for this checkout."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_PACKAGED))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheels"), str(src)]
    subprocess.run(build, check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp / "wheels").glob("perfgate-*.whl")
    site = tmp / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=600)
    return wheel, site


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("their-repo")
    for rel, text in readme_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf8")
    return root


def test_the_readme_gives_the_files_of_an_outside_project() -> None:
    files = readme_files()
    assert sorted(files) == ["bench/my_model.py", "bench/test_speed.py", "bench/vit.py", "pyproject.toml"]
    assert "factory=make_mlp" in files["bench/my_model.py"] and "class " not in files["bench/my_model.py"]


def test_the_wheel_installs_perfgate_alone_with_its_pytest_entry_point(installed: tuple[Path, Path]) -> None:
    wheel, site = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"perfgate", "perfgate-0.1.0.dist-info"}  # no top-level `models`
    assert not any(n.startswith(("perfgate/models/", "models/")) for n in names)  # the families stay in the repo
    assert any(n.startswith("perfgate/output/templates/") for n in names)
    eps = configparser.ConfigParser()
    eps.read_string(zipfile.ZipFile(wheel).read("perfgate-0.1.0.dist-info/entry_points.txt").decode())
    assert dict(eps["pytest11"]) == {"perfgate": "perfgate.plugin.autoload"}
    assert dict(eps["console_scripts"]) == {"perfgate": "perfgate.cli:main"}
    assert {p.name for p in site.iterdir()} - {"bin"} == {"perfgate", "perfgate-0.1.0.dist-info"}


def test_an_outside_project_benchmarks_a_model_built_by_a_factory(installed, project: Path) -> None:
    _, site = installed
    where = _run(["-c", "import perfgate; print(perfgate.__file__)"], project, site)
    assert Path(where.stdout.strip()).parent == site / "perfgate", where.stdout + where.stderr
    only = ["--perfgate-variants", "baseline", "-p", "no:cacheprovider"]  # the eager case: seconds, not minutes

    smoke = _run(["-m", "pytest", "bench", "--perfgate-smoke", *only], project, site)
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    assert "1 passed" in smoke.stdout

    record = _run(["-m", "pytest", "bench", "--perfgate-record", *only], project, site)
    assert record.returncode == 0, record.stdout[-3000:] + record.stderr[-3000:]
    (recorded,) = (project / "baselines").glob("*/*.json")
    assert "test_step[my-mlp-tiny-baseline]" in recorded.read_text(encoding="utf8")

    gated = _run(["-m", "pytest", "bench", *only], project, site)
    verdicts = json.loads((project / ".perfgate" / "verdicts.json").read_text(encoding="utf8"))
    text = json.dumps(verdicts)
    assert "my-mlp-tiny-baseline" in text and "latency" in text, text[:2000]
    # A shared machine can make this run slower than the recorded one: then the gate fails it (1).
    assert gated.returncode == (1 if '"regression"' in text else 0), gated.stdout[-3000:] + gated.stderr[-3000:]


def test_an_outside_project_benchmarks_a_third_party_library_model(installed, project: Path) -> None:
    pytest.importorskip("x_transformers", reason="x-transformers is not installed (the dev extra installs it)")
    _, site = installed
    args = ["-m", "pytest", "bench", "--perfgate-model-file", "bench/vit.py", "--perfgate-models", "my-vit"]
    r = _run([*args, "--perfgate-smoke", "--perfgate-variants", "baseline", "-p", "no:cacheprovider"], project, site)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed" in r.stdout


def test_a_project_without_tool_perfgate_does_not_load_it(installed, tmp_path: Path) -> None:
    _, site = installed
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "unrelated"\nversion = "1"\n')
    (tmp_path / "test_other.py").write_text(
        "import sys\n\n"
        "def test_untouched(request):\n"
        "    assert request.config.pluginmanager.has_plugin('perfgate')  # the entry point itself\n"
        "    assert request.config.pluginmanager.get_plugin('perfgate.plugin.hooks') is None\n"
        "    assert 'torch' not in sys.modules\n"
    )
    r = _run(["-m", "pytest", "-p", "no:cacheprovider", "test_other.py"], tmp_path, site)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    on = _run(["-m", "pytest", "-p", "no:cacheprovider", "test_other.py", "--perfgate-smoke"], tmp_path, site)
    # A --perfgate-* option loads it: here it finds no model to benchmark, bad input (4).
    assert on.returncode == 4 and "no models are registered" in on.stdout + on.stderr, on.stdout[-3000:]
