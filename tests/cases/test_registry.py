"""Model registries: perfgate registers nothing itself; the plugin and the CLI load the registry
modules and model files a project names, and a broken one is a one-line usage error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfgate.cli import EXIT_BAD_INPUT

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[2]

# A family that only needs to be listed and collected, not run.
TINY_MODEL = """
from perfgate import ModelSpec, register_model

CONFIGS = {"tiny": None}
register_model(ModelSpec(name="tiny-model", module=__name__, model_class="M", default_sizes={"cpu": "tiny"}))
"""
# The same name with another spec.
TWIN_MODEL = TINY_MODEL.replace('model_class="M"', 'model_class="Other"')


def _run(pytester: pytest.Pytester, pyproject: str, files: dict[str, str], *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_models=(ROOT / "benchmarks" / "test_models.py").read_text())
    pytester.path.joinpath("pyproject.toml").write_text(textwrap.dedent(pyproject))
    for name, text in files.items():
        pytester.path.joinpath(name).write_text(text)
    return pytester.runpytest_subprocess(
        "-p", "perfgate.plugin.hooks", "--perfgate-device", "cpu", "--collect-only", "-q", *args
    )


def test_perfgate_does_not_import_models_and_knows_every_step_kind(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        import perfgate.cli, perfgate.plugin.torchrun, perfgate.dist.ranks, perfgate.plugin.hooks
        import perfgate.plugin.session
        import perfgate.cases.workload as w
        from perfgate.cases.steps import STEP_KIND_BUILDERS
        assert "models" not in sys.modules, "perfgate imported the repository's families unasked"
        assert not w.MODELS, sorted(w.MODELS)
        assert set(w.STEP_KINDS) == set(STEP_KIND_BUILDERS)  # every kind a spec may name is built, no registration
        assert w.DATA_PARALLEL_STEP_KINDS <= set(w.STEP_KINDS) and w.TRAINING_STEP_KINDS <= set(w.STEP_KINDS)
        w.ModelSpec(name="x", module="x", model_class="X", default_sizes={}, step_kind="ddp-train", data="device")
        try:
            w.get_model("physicsnemo-block")
        except KeyError as exc:
            print(exc.args[0])
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "unknown model 'physicsnemo-block': no models are registered" in p.stdout
    assert 'registries = ["models"]' in p.stdout and "--perfgate-registry" in p.stdout


def test_a_registry_module_from_the_option_and_a_model_file_are_loaded(pytester: pytest.Pytester) -> None:
    r = _run(
        pytester,
        '[tool.perfgate]\nmodel_files = ["extra.py"]\n',
        {"local_registry.py": TINY_MODEL, "extra.py": TINY_MODEL.replace("tiny-model", "extra-model")},
        "--perfgate-registry",
        "local_registry",
        "--perfgate-variants",
        "baseline",
    )
    assert r.ret == 0, r.stderr.str()
    r.stdout.fnmatch_lines(["*test_step[[]tiny-model-tiny-baseline[]]", "*test_step[[]extra-model-tiny-baseline[]]"])


@pytest.mark.parametrize(
    ("pyproject", "files", "message"),
    [
        (
            '[tool.perfgate]\nregistries = ["nosuch_registry"]\n',
            {},
            "registry 'nosuch_registry' cannot be imported: ModuleNotFoundError: No module named 'nosuch_registry'; "
            "fix the module*",
        ),
        (
            '[tool.perfgate]\nregistries = ["broken_registry"]\n',
            {"broken_registry.py": "import os\nraise RuntimeError('boom')\n"},
            "registry 'broken_registry' cannot be imported: RuntimeError: boom (*broken_registry.py:2); fix the "
            "module*",
        ),
        (
            '[tool.perfgate]\nregistries = "my_registry"\n',
            {},
            "*pyproject.toml [[]tool.perfgate[]] registries: must be a list of strings, e.g. registries = "
            "[[]\"models\"[]], got 'my_registry'",
        ),
        (
            '[tool.perfgate]\nregistries = ["perfgate.models"]\n',
            {},
            "registry 'perfgate.models': the model families moved out of the perfgate package to the "
            'repository\'s top-level models/; write [[]tool.perfgate[]] registries = [[]"models"[]]*',
        ),
        (
            '[tool.perfgate]\nmodel_files = ["bad_model.py"]\n',
            {"bad_model.py": "def broken(:\n"},
            "model file */bad_model.py: SyntaxError: *line 1*; fix the file, or remove it from [[]tool.perfgate[]] "
            "model_files*",
        ),
        (
            '[tool.perfgate]\nmodel_files = ["first.py", "twin.py"]\n',
            {"first.py": TINY_MODEL, "twin.py": TWIN_MODEL},
            "model file */twin.py: model 'tiny-model' is already registered (from perfgate_user_first); give the "
            "new one another name",
        ),
        ("[tool.perfgate]\n", {}, "no models are registered: name the modules that register them in pyproject.toml*"),
        (
            '[tool.perfgate]\nvariants = "bf16"\n',  # once split into characters: "'b' matches no variant"
            {},
            "*pyproject.toml [[]tool.perfgate[]] variants: must be a list of strings, e.g. variants = "
            "[[]\"baseline\"[]], got 'bf16'",
        ),
    ],
    ids=[
        "missing-registry",
        "raising-registry",
        "not-a-list",
        "old-perfgate-models",
        "syntax-error",
        "duplicate-name",
        "nothing-registered",
        "variants-not-a-list",
    ],
)
def test_a_broken_registry_is_a_one_line_usage_error(
    pytester: pytest.Pytester, pyproject: str, files: dict[str, str], message: str
) -> None:
    r = _run(pytester, pyproject, files)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    r.stderr.fnmatch_lines([f"ERROR: perfgate: {message}"])
    assert "Traceback" not in r.stderr.str() and "INTERNALERROR" not in r.stderr.str() + r.stdout.str()


def _perfgate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_perfgate_models_lists_the_families_this_repositorys_pyproject_registers() -> None:
    p = _perfgate(ROOT, "models", "--no-flops", "--sizes", "tiny", "--models", "physicsnemo-*,vjepa2-*")
    assert p.returncode == 0, p.stderr
    listed = {line.split()[0] for line in p.stdout.splitlines()[2:]}
    assert listed == {
        "physicsnemo-block",
        "physicsnemo-train",
        "physicsnemo-train-host-data",
        "physicsnemo-ddp-train",
        "vjepa2-encoder",
        "vjepa2-dp-inference",
    }


def test_cli_commands_load_the_registries_of_the_current_directory(tmp_path: Path) -> None:
    p = _perfgate(tmp_path, "models")
    assert p.returncode == EXIT_BAD_INPUT and p.stderr.startswith("perfgate models: no models are registered"), p.stderr
    tmp_path.joinpath("pyproject.toml").write_text('[tool.perfgate]\nregistries = ["nosuch_registry"]\n')
    p = _perfgate(tmp_path, "profile", "physicsnemo-block")
    assert p.returncode == EXIT_BAD_INPUT and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith("perfgate profile: registry 'nosuch_registry' cannot be imported: ModuleNotFoundError")
    tmp_path.joinpath("pyproject.toml").write_text('[tool.perfgate]\nmodel_files = ["mine.py"]\n')
    tmp_path.joinpath("mine.py").write_text(TINY_MODEL)
    p = _perfgate(tmp_path, "profile", "physicsnemo-block")
    assert (
        p.returncode == EXIT_BAD_INPUT
        and p.stderr.strip() == "perfgate profile: unknown model 'physicsnemo-block'; known: tiny-model"
    )


def test_one_exit_code_table_for_pytest_runs_and_the_cli():
    """Bad input is 4 and "cannot run here" 5 everywhere, as pytest numbers them (perfgate.exitcodes)."""
    from perfgate import exitcodes
    from perfgate.cli import EXIT_UNAVAILABLE, main

    assert (
        (EXIT_BAD_INPUT, EXIT_UNAVAILABLE)
        == (exitcodes.BAD_INPUT, exitcodes.UNAVAILABLE)
        == (pytest.ExitCode.USAGE_ERROR, 5)
    )
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--no-such-option"])  # argparse's own error: 4 here too, not argparse's 2
    assert exc.value.code == EXIT_BAD_INPUT
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0


def test_a_model_is_built_by_its_class_or_by_any_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import torch

    from perfgate.cases.workload import ModelSpec, build_module

    fam = types.ModuleType("perfgate_test_factory_family")
    fam.CONFIGS = {"dict": {"width": 3}, "object": 5, "linear": {"in_features": 3, "out_features": 2}}
    fam.Wide = lambda n: torch.nn.Linear(n, 2)  # a "class" taking the config object
    monkeypatch.setitem(sys.modules, fam.__name__, fam)

    def spec(**how):
        return ModelSpec(name="f", module=fam.__name__, default_sizes={"cpu": "dict"}, **how)

    by_kwargs = build_module(spec(factory=lambda width: torch.nn.Linear(width, 1)), "dict")
    assert by_kwargs.in_features == 3 and not by_kwargs.training  # a dict config: keyword arguments
    assert build_module(spec(factory=lambda n: torch.nn.Linear(n, 1)), "object").in_features == 5  # else one argument
    assert build_module(spec(model_class="Wide"), "object").in_features == 5
    a, b = (build_module(spec(factory=torch.nn.Linear), "linear", seed=1) for _ in range(2))  # a library's own
    assert a.in_features == 3 and torch.equal(a.weight, b.weight)  # seeded before the factory runs
    with pytest.raises(TypeError, match=r"model 'f': .*<lambda> returned a int, not a torch nn.Module"):
        build_module(spec(factory=lambda width: 7), "dict")
    for how in ({}, {"model_class": "Wide", "factory": torch.nn.Linear}):
        with pytest.raises(ValueError, match="give either model_class .* or factory"):
            spec(**how)
    with pytest.raises(ValueError, match="factory must be callable"):
        spec(factory="timm.create_model")


def test_the_step_kind_has_its_own_keyword_and_the_old_one_says_so() -> None:
    import dataclasses

    from perfgate.cases.workload import ModelSpec

    spec = ModelSpec(name="k", module="k", model_class="K", default_sizes={}, step_kind="train", data="host")
    assert spec.step_kind == "train" and dataclasses.replace(spec, step_kind="ddp-train").step_kind == "ddp-train"
    with pytest.raises(TypeError, match=r"^ModelSpec\(step='train'\): the keyword is step_kind now"):
        ModelSpec(name="k", module="k", model_class="K", default_sizes={}, step="train")
    with pytest.raises(ValueError, match="step_kind must be one of inference, train, ddp-train, dp-inference"):
        ModelSpec(name="k", module="k", model_class="K", default_sizes={}, step_kind="eval")
