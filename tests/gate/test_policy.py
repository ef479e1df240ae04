import pytest

from perfgate.gate.policy import PolicyError, load, parse
from perfgate.gate.settings import GateSettings


def test_overrides_by_glob_later_wins():
    p = parse(
        {
            "gate": {"latency_tolerance": 0.03},
            "override": [
                {"model": "wan-*", "latency_tolerance": 0.10},
                {"model": "wan-*", "variant": "compile*", "metric": "latency", "latency_tolerance": 0.20},
                {"metric": "memory", "memory_slack_mib": 64},
            ],
        }
    )
    assert p.settings("owl-world-model", "baseline", "latency").latency_tolerance == 0.03
    assert p.settings("wan-vae-decoder", "baseline", "latency").latency_tolerance == 0.10
    assert p.settings("wan-vae-decoder", "compile-max-autotune", "latency").latency_tolerance == 0.20
    assert p.settings("wan-vae-decoder", "compile", "memory").latency_tolerance == 0.10
    assert p.settings("x", "y", "memory").memory_slack_mib == 64
    assert parse({}).defaults == GateSettings()


@pytest.mark.parametrize(
    "table, match",
    [
        ({"gate": {"latency_tolerence": 0.1}}, "unknown key 'latency_tolerence'"),
        ({"gate": {"alpha": "0.01"}}, "alpha must be a number, got '0.01'"),
        ({"gate": {"alpha": -1}}, r"alpha = -1 is outside \(0, 0.2\]"),
        # Values that used to pass and switched a check off or made it meaningless:
        ({"gate": {"alpha": 0}}, r"alpha = 0 is outside \(0, 0.2\] \(a significance level above 0"),
        ({"gate": {"alpha": 1.5}}, r"alpha = 1.5 is outside"),
        ({"gate": {"latency_tolerance": float("nan")}}, "latency_tolerance = nan is outside"),
        ({"gate": {"latency_tolerance": float("inf")}}, "latency_tolerance = inf is outside"),
        ({"gate": {"remeasure": 2.7}}, "remeasure must be a whole number, got 2.7"),
        ({"gate": {"remeasure": 1000000}}, r"remeasure = 1000000 is outside \[0, 10\]"),
        ({"gate": {"normalise": 1}}, "normalise must be true or false, got 1"),
        ({"gate": 5}, "gate: must be a table of settings, got 5"),
        (
            {"override": {"metric": "latency"}},
            r"override: must be an array of tables \(\[\[tool.perfgate.override\]\]\)",
        ),
        ({"override": [{"metric": "latncy", "alpha": 0.1}]}, "metric 'latncy'"),
        ({"override": [{"model": 3, "alpha": 0.1}]}, "model must be a name or glob, got 3"),
        ({"budget": [{"min_fsp": 30}]}, "unknown key 'min_fsp'"),
        ({"budget": [{"min_fps": "fast"}]}, "min_fps must be a positive number, got 'fast'"),
        ({"budget": [{"max_p90_ms": float("nan")}]}, "max_p90_ms must be a positive number, got nan"),
    ],
)
def test_bad_policy_names_the_key(table, match):
    with pytest.raises(PolicyError, match=match):
        parse(table)


def test_load_from_pyproject(tmp_path):
    f = tmp_path / "pyproject.toml"
    f.write_text(
        '[tool.perfgate.gate]\nalpha = 0.05\n[[tool.perfgate.override]]\nvariant = "bf16"\nlatency_tolerance = 0.2\n'
    )
    p = load(f)
    assert p.defaults.alpha == 0.05 and p.settings("m", "bf16", "latency").latency_tolerance == 0.2
    f.write_text("[tool.perfgate\n")
    with pytest.raises(PolicyError, match="invalid TOML"):
        load(f)
    f.write_text('[tool.perfgate]\nvariantz = ["x"]\n')
    with pytest.raises(PolicyError, match="unknown key 'variantz'"):
        load(f)


def test_overrides_can_select_the_device():
    p = parse({"override": [{"device": "cpu", "metric": "latency", "latency_tolerance": 1.5}]})
    assert p.settings("m", "baseline", "latency", "cpu").latency_tolerance == 1.5
    assert p.settings("m", "baseline", "latency", "cuda:0").latency_tolerance == 0.05
    assert p.settings("m", "baseline", "memory", "cpu").latency_tolerance == 0.05
