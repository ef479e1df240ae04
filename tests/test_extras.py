"""The light core and its extras: perfgate.extras' table agrees with pyproject.toml, every module of
perfgate imports with no extra installed, and each entry point that needs an extra stops with one
line naming it. A missing package is simulated in a subprocess by a meta-path finder that refuses
the modules, as Python does for a package that is not installed."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from perfgate import extras
from tests.helpers import empty_pyproject

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "tests" / "data" / "history-step"
FP_ID = next(p.name for p in HISTORY.iterdir() if p.is_dir())
RUN = sorted((HISTORY / FP_ID).glob("*.json"))[-1]
ALL_OPTIONAL = sorted(extras.MODULES)

BLOCKER = textwrap.dedent(
    """
    import sys
    BLOCKED = set(sys.argv[1].split(","))
    class Hide:  # each finder as it was, but blind to the blocked packages: what an uninstalled one looks like
        def __init__(self, finder):
            self.finder = finder
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return None
            return self.finder.find_spec(name, path, target)
        def invalidate_caches(self):
            getattr(self.finder, "invalidate_caches", lambda: None)()
    sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
    sys.argv = sys.argv[1:]
    """
)


def run_blocked(blocked: list[str], code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    script = BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script, ",".join(blocked), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def cli(blocked: list[str], *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return run_blocked(blocked, "from perfgate.cli import main\nsys.exit(main(sys.argv[1:]))", *argv, cwd=cwd)


def line(module: str, purpose: str) -> str:
    dist, extra = extras.MODULES[module]
    return f"{purpose} needs {dist}, in perfgate's `{extra}` extra: pip install 'perfgate[{extra}]'"


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")


def test_the_table_names_each_optional_distribution_under_its_extra_in_pyproject() -> None:
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    core = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for module, (dist, extra) in extras.MODULES.items():
        assert dist in {_name(r) for r in optional[extra]}, f"{module}: {dist} is not in the [{extra}] extra"
        assert dist not in core, f"{dist} is both core and optional"
    # Every distribution of the user-facing extras has a module here (pygaljs: pygal's assets, imported by pygal).
    named = {d for d, _ in extras.MODULES.values()} | {"pygaljs"}
    for extra in ("report", "gpu", "quant", "tensorrt"):
        assert {_name(r) for r in optional[extra]} <= named, extra
    assert set(optional["all"]) == {"perfgate[report,gpu,quant]"}


def test_every_perfgate_module_imports_without_any_extra() -> None:
    r = run_blocked(
        ALL_OPTIONAL,
        """
        import importlib, pkgutil, perfgate
        names = [m.name for m in pkgutil.walk_packages(perfgate.__path__, "perfgate.") if "__main__" not in m.name]
        for name in names:
            importlib.import_module(name)
        print(len(names))
        """,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout) > 50


def test_the_blocker_is_what_python_does_for_a_missing_package() -> None:
    r = run_blocked(["matplotlib"], "import matplotlib")
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'matplotlib'" in r.stderr


@pytest.mark.parametrize(
    ("blocked", "module", "purpose"),
    [(["jinja2"], "jinja2", "the HTML report"), (["matplotlib"], "matplotlib", "drawing a chart")],
)
def test_perfgate_report_without_the_report_extra_is_one_line(tmp_path, blocked, module, purpose) -> None:
    out = tmp_path / "report.html"
    r = cli(blocked, "report", str(RUN), "-o", str(out), "--no-history")
    assert r.returncode == 5, r.stderr[-3000:]
    assert r.stderr == f"perfgate report: {line(module, purpose)}\n"
    assert not out.exists()
    # With the extra installed the same command writes the report.
    ok = cli([], "report", str(RUN), "-o", str(out), "--no-history")
    assert ok.returncode == 0 and out.exists(), ok.stderr[-3000:]


def test_history_change_points_without_ruptures_is_one_line(tmp_path) -> None:
    argv = [
        "history",
        "--baselines",
        str(HISTORY),
        "--fingerprint",
        FP_ID,
        "--pyproject",
        str(empty_pyproject(tmp_path)),
    ]
    r = cli(["ruptures"], *argv, "--change-points")
    assert r.returncode == 5
    assert r.stderr == f"perfgate history: {line('ruptures', 'finding change points')}\n"
    assert cli(["ruptures"], *argv).returncode == 0  # the history itself needs no extra


def test_perfgate_profile_checks_for_the_report_extra_before_profiling(tmp_path) -> None:
    r = cli(["jinja2", "matplotlib"], "profile", "no-such-model", cwd=tmp_path)
    assert r.returncode == 5
    expected = line("jinja2", "perfgate profile's report.html")  # the first of the two it checks
    assert r.stderr == f"perfgate profile: {expected}\n"


def test_gpu_telemetry_and_quantisation_say_which_extra_is_missing() -> None:
    r = run_blocked(
        ["pynvml", "torchao"],
        """
        from perfgate.measure import energy, telemetry, throttle
        from perfgate.cases.conversions import Env, Quantize
        print(telemetry.open_nvml()[1])
        print(throttle.open_probe()[1])
        try:
            energy.open_nvml_counter()
        except energy.EnergyUnavailable as exc:
            print(exc)
        print(Quantize(scheme="int8-dynamic").unavailable(Env(device_type="cpu")))
        """,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    gpu = line("pynvml", "GPU telemetry")
    assert r.stdout.splitlines() == [gpu, gpu, gpu, "torchao is not installed: pip install 'perfgate[quant]'"]


def test_a_broken_dependency_inside_an_installed_extra_is_not_called_missing() -> None:
    """matplotlib is installed but one of its own dependencies is not: installing perfgate[report]
    would not fix that, so the original ImportError goes through."""
    r = run_blocked(
        ["kiwisolver"],
        """
        from perfgate.extras import MissingExtra, need
        try:
            need("matplotlib.pyplot", "drawing a chart")
        except MissingExtra:
            print("missing extra")
        except ImportError as exc:
            print("import error", exc.name)
        """,
    )
    assert r.stdout.strip() == "import error kiwisolver", r.stderr[-2000:]
