"""Tiers: named selections from [tool.perfgate], chosen per device type, validated with one-line errors."""

from __future__ import annotations

import textwrap

import pytest

from perfgate.cases import tiers
from perfgate.cases.selection import expand_cases
from perfgate.gate import policy

pytest_plugins = ("pytester",)


def test_this_repositorys_pr_tier_selects_only_real_cases_on_the_gpu_sizes() -> None:
    """The committed pr tier parses and each of its globs matches a case at the CUDA default sizes."""
    table = policy.load_table(tiers.__file__.rsplit("/perfgate/", 1)[0] + "/pyproject.toml")
    by_name, defaults = tiers.parse(table)
    assert defaults == {"cuda": "pr"}
    pr = by_name["pr"]
    import models  # noqa: F401  (the built-in registry)
    from perfgate.cases.workload import MODELS

    gpu_sizes = sorted({MODELS[m].default_sizes["cuda"] for m in pr.models})
    cases = expand_cases(
        "cpu", models=list(pr.models), sizes_=gpu_sizes, variants=list(pr.variants), case_ids=list(pr.cases)
    )
    ids = {c.id for c in cases}
    assert "owl-world-model-1b-cacheframes0-cudagraphs" in ids and "wan-vae-decoder-full-bf16" in ids
    assert not any(
        i.endswith(("autocast-bf16", "tensorrt-bf16")) or "host-data" in i or "-baseline" in i and i.startswith("owl")
        for i in ids
    )
    assert len(ids) == 19


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"tiers": {"pr": {"modles": ["x"]}}}, "tiers.pr: unknown key 'modles'"),
        ({"tiers": {"pr": {"variants": "baseline"}}}, "tiers.pr: variants must be a list"),
        ({"tiers": {"pr": {"budget_min": 0}}}, "budget_min must be a positive number"),
        ({"tiers": {"all": {}}}, "'all' is the built-in whole matrix"),
        ({"tier": {"cuda": "nightly"}}, "tier.cuda = 'nightly': no such tier; known: all"),
        ({"tier": {"tpu": "all"}}, "device type 'tpu' is neither cpu nor cuda"),
        ({"tier": "pr"}, "tier: must map device types to tier names"),
    ],
    ids=["typo", "not-a-list", "budget", "all", "unknown-default", "device-type", "not-a-table"],
)
def test_bad_tier_tables_are_one_line_errors(raw: dict, message: str) -> None:
    with pytest.raises(tiers.TierError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiers.parse(raw, "pyproject.toml [tool.perfgate]")


def test_the_named_tier_wins_then_the_device_default_then_all() -> None:
    by_name, defaults = tiers.parse({"tier": {"cuda": "pr"}, "tiers": {"pr": {"variants": ["baseline"]}}})
    assert tiers.choose(by_name, defaults, "cuda", None).name == "pr"
    assert tiers.choose(by_name, defaults, "cpu", None).name == "all"
    assert tiers.choose(by_name, defaults, "cuda", "all").name == "all"
    with pytest.raises(tiers.TierError, match="--perfgate-tier 'nightly': no such tier"):
        tiers.choose(by_name, defaults, "cuda", "nightly")


def test_a_case_glob_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="case glob 'nosuch-\\*' matches no case"):
        expand_cases("cpu", models=["physicsnemo-block"], variants=["baseline"], case_ids=["nosuch-*"])


PYPROJECT = textwrap.dedent("""
    [tool.perfgate]
    registries = ["models"]
    tier = { cpu = "quick" }
    [tool.perfgate.tiers.quick]
    models = ["physicsnemo-block", "physicsnemo-train"]
    variants = ["baseline", "bf16"]
    cases = ["physicsnemo-block-*"]
""")


def _collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    r = pytester.runpytest_subprocess(
        "-p", "perfgate.plugin.hooks", "--perfgate-device", "cpu", "--collect-only", "-q", *args
    )
    return sorted(line.split("[", 1)[1].rstrip("]") for line in r.outlines if "::test_step[" in line)


def test_the_plugin_runs_the_device_default_tier_unless_a_selection_is_given(pytester: pytest.Pytester) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pytester.makepyfile(test_models=(root / "benchmarks" / "test_models.py").read_text())
    pytester.path.joinpath("pyproject.toml").write_text(PYPROJECT)
    assert _collected(pytester) == ["physicsnemo-block-tiny-baseline", "physicsnemo-block-tiny-bf16"]
    # A selection on the command line runs on its own ...
    assert _collected(pytester, "--perfgate-models", "physicsnemo-train", "--perfgate-variants", "baseline") == [
        "physicsnemo-train-tiny-baseline"
    ]
    # ... unless the tier is named too: then it replaces the tier's list of that name.
    assert _collected(pytester, "--perfgate-tier", "quick", "--perfgate-variants", "bf16") == [
        "physicsnemo-block-tiny-bf16"
    ]
    r = pytester.runpytest_subprocess(
        "-p", "perfgate.plugin.hooks", "--perfgate-device", "cpu", "--perfgate-tier", "nope"
    )
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--perfgate-tier 'nope': no such tier; known: all, quick*"])
