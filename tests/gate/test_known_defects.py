"""Known upstream defects ([[tool.perfgate.known_defect]]): named instead of failing where an entry
applies, still failing where none does, "defect not seen" once a case passes; and every entry of this
repository's pyproject.toml re-checked by running its reproduction where it applies."""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfgate.cases.project import PolicyError
from perfgate.gate import known_defects, policy
from perfgate.gate.known_defects import Host, this_host
from perfgate.gate.verdicts import Verdict
from perfgate.record import CaseRecord
from tests.helpers import HANG_GUARD_S

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[2]
REPO_DEFECTS = policy.load(ROOT / "pyproject.toml").known_defects

MODEL = """
from dataclasses import dataclass
import torch
from torch import nn
from perfgate import ModelSpec, register_model

@dataclass(frozen=True, kw_only=True)
class Config:
    dim: int = 64

CONFIGS = {"tiny": Config()}

class M(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.dim, config.dim)
    def forward(self, x):
        return self.proj(x)

def example_inputs(config, *, batch=1, seed=0, device="cpu", dtype=torch.float32, **options):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 8, config.dim, generator=g).to(device, dtype),)

def step_info(config, *, batch=1, **options):
    return {"frames": float(batch)}

register_model(ModelSpec(name="kd-model", module=__name__, model_class="M", default_sizes={"cpu": "tiny"}))
"""

# bf16 and autocast-bf16 really miss a zero tolerance (the runner's own accuracy check); baseline passes.
PYPROJECT = """
[tool.perfgate]
model_files = ["kd_model.py"]

[tool.perfgate.tolerance."*bf16*"]
rel_l2 = 0.0
cosine = 1.0

[[tool.perfgate.known_defect]]
name = "bf16-defect"
title = "bf16 is wrong here"
link = "https://example.invalid/issues/1"
cases = ["*-tiny-bf16"]
device = "cpu"
packages = { torch = ">=2.0" }
workaround = "use fp32"

[[tool.perfgate.known_defect]]
name = "elsewhere-defect"
title = "only on a CPU that does not exist"
cases = ["*-autocast-bf16"]
cpu_features = ["no_such_cpu_flag"]
workaround = "none"

[[tool.perfgate.known_defect]]
name = "fixed-defect"
title = "baseline used to be wrong"
cases = ["*-baseline"]
workaround = "none"
"""


def test_an_entry_names_the_failure_it_explains_and_only_that_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_models=(ROOT / "benchmarks" / "test_models.py").read_text())
    pytester.path.joinpath("pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    pytester.path.joinpath("kd_model.py").write_text(MODEL)
    verdicts_file = pytester.path / "verdicts.json"
    r = pytester.runpytest_subprocess(
        "-p",
        "perfgate.plugin.hooks",
        "--perfgate-device",
        "cpu",
        "--perfgate-smoke",
        "--perfgate-no-gate",
        "--perfgate-variants",
        "baseline,bf16,autocast-bf16",
        "--perfgate-verdicts",
        str(verdicts_file),
        timeout=HANG_GUARD_S,
    )
    # The failure no applying entry explains still fails the run; the explained one does not.
    r.assert_outcomes(passed=2, failed=1)
    assert r.ret == 1
    by_case = {}
    for v in json.loads(verdicts_file.read_text())["verdicts"]:
        by_case.setdefault(v["case"].split("[")[-1].rstrip("]"), []).append(v)
    bf16 = [v for v in by_case["kd-model-tiny-bf16"] if v["metric"] == "accuracy"]
    assert bf16 and {v["verdict"] for v in bf16} == {"known defect"}  # rel-L2 and cosine both missed
    assert bf16[0]["message"].startswith(
        "known defect bf16-defect: bf16 is wrong here (https://example.invalid/issues/1); workaround: use fp32; "
        "relative L2 error"
    )
    autocast = [v["verdict"] for v in by_case["kd-model-tiny-autocast-bf16"] if v["metric"] == "accuracy"]
    assert autocast and set(autocast) == {"regression"}
    baseline = [v for v in by_case["kd-model-tiny-baseline"] if v["metric"] == "accuracy"]
    assert [v["verdict"] for v in baseline] == ["defect not seen"]
    assert "it looks fixed; remove its [[tool.perfgate.known_defect]] entry" in baseline[0]["message"]
    r.stdout.fnmatch_lines(["*known defect*kd-model-tiny-bf16*"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"title": "t", "workaround": "w", "cases": ["*"]}, "*known_defect #1: name is missing*"),
        ({"name": "n", "title": "t", "workaround": "w", "cases": "*"}, "*known_defect #1: cases must be a list*"),
        ({"name": "n", "title": "t", "workaround": "w", "cases": ["*"], "cpus": []}, "*unknown key 'cpus'*"),
        ({"name": "n", "title": "t", "workaround": "w", "cases": ["*"], "metrics": ["speed"]}, "*metric 'speed'*"),
        (
            {"name": "n", "title": "t", "workaround": "w", "cases": ["*"], "packages": {"torch": "2.13"}},
            "*packages.torch = '2.13' is no version range*",
        ),
        (
            {"name": "n", "title": "t", "workaround": "w", "cases": ["*"], "record": {"freezing": False}},
            "*record.freezing is no field of the case record*",
        ),
        (
            {"name": "n", "title": "t", "workaround": "w", "cases": ["*"], "cpu_features": ["not avx512f"]},
            '*cpu_features entry \'not avx512f\' is no flag; write "avx2" (present) or "!avx512f" (absent)',
        ),
    ],
)
def test_a_bad_entry_is_a_one_line_error_naming_it(entry: dict, message: str) -> None:
    with pytest.raises(PolicyError) as e:
        known_defects.parse([entry], "pyproject.toml [tool.perfgate]")
    assert "\n" not in str(e.value)
    assert fnmatch.fnmatchcase(str(e.value), message), str(e.value)


def test_the_amx_entry_applies_by_cpu_feature_and_version_range() -> None:
    (amx,) = [d for d in REPO_DEFECTS if d.name == "torch-int-mm-amx-strided-lhs"]
    versions = {"torch": "2.13.0+cpu", "torchao": "0.18.0"}
    assert amx.machine_reason(Host(cpu_features=frozenset({"amx_tile", "avx512f"}), versions=versions)) is None
    assert amx.machine_reason(Host(cpu_features=frozenset({"avx512f"}), versions=versions)) == (
        "this CPU has no amx_tile"
    )
    # PEP 440 with pre-releases allowed: a later release line's nightly is inside >=2.13; a 2.13
    # pre-release (a source build, 2.13.0a0+git...) comes before 2.13 and is not.
    nightly = Host(cpu_features=frozenset({"amx_tile"}), versions={**versions, "torch": "2.14.0.dev20261101+cpu"})
    assert amx.machine_reason(nightly) is None
    source = Host(cpu_features=frozenset({"amx_tile"}), versions={**versions, "torch": "2.13.0a0+git1234abc"})
    assert amx.machine_reason(source) == "torch 2.13.0a0+git1234abc is outside >=2.13"
    old = {**versions, "torch": "2.12.1"}
    assert amx.machine_reason(Host(cpu_features=frozenset({"amx_tile"}), versions=old)) == (
        "torch 2.12.1 is outside >=2.13"
    )


def test_the_avx2_entry_applies_where_the_cpu_has_avx2_and_neither_avx512f_nor_avx_vnni() -> None:
    (avx2,) = [d for d in REPO_DEFECTS if d.name == "inductor-frozen-int8-linear-avx2-saturation"]
    versions = {"torch": "2.13.0+cpu", "torchao": "0.18.0"}

    def reason(*flags: str) -> str | None:
        return avx2.machine_reason(Host(cpu_features=frozenset(flags), versions=versions))

    assert reason("avx2", "fma", "sse4_2") is None  # AMD family 23 (Zen 2)
    assert reason("avx2", "avx512f", "avx512_vnni") == "this CPU has avx512f"  # Zen 4, Cascade Lake
    assert reason("avx2", "avx512f", "avx_vnni", "amx_tile") == "this CPU has avx512f, avx_vnni"  # model 167
    assert reason("avx2", "avx_vnni") == "this CPU has avx_vnni"  # Alder Lake's client cores
    assert reason("sse4_2") == "this CPU has no avx2"


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or shutil.which("valgrind") is None,
    reason="needs valgrind on an x86-64 CPU (its virtual CPU is an AVX2-only i7-4910MQ)",
)
def test_the_avx2_defect_and_its_workaround_on_valgrinds_avx2_cpu(tmp_path: Path) -> None:
    """The AVX2 entry's reproduction on a CPU without AVX-512 or VNNI, on any x86-64 machine: valgrind
    answers CPUID as an AVX2-only i7-4910MQ, so torch, oneDNN and cpuinfo all dispatch as on AMD's
    family 23. The frozen Linear is wrong there and the plain compile, perfgate's workaround, exact.
    Inductor reads /proc/cpuinfo and compiles with -march=native, so its kernels are held to AVX2
    (ATEN_CPU_CAPABILITY, TORCHINDUCTOR_CPP_MARCH): valgrind 3.19 decodes no AVX-512."""
    (avx2,) = [d for d in REPO_DEFECTS if d.name == "inductor-frozen-int8-linear-avx2-saturation"]
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": "avx2",
        "TORCHINDUCTOR_CPP_MARCH": "haswell",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    cmd = ["valgrind", "--tool=none", "-q", sys.executable, str(ROOT / avx2.reproduction)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cpu"] == {"avx2": True, "avx512_f": False, "avx512_vnni": False, "avx_vnni": False, "amx_tile": False}
    assert out["rel_l2_vs_exact_int8"]["plain"] < 1e-3, out  # the workaround: exact
    assert r.returncode == 1 and out["rel_l2_vs_exact_int8"]["frozen"] > 1e-3, (
        f"the frozen int8 Linear is right on valgrind's AVX2 CPU ({out}): the AVX2 defect looks fixed; remove "
        "its [[tool.perfgate.known_defect]] entry and freeze everywhere (perfgate.cases.conversions)"
    )


@pytest.mark.parametrize("entry", [d for d in REPO_DEFECTS if d.reproduction], ids=lambda d: d.name)
def test_each_entry_still_reproduces_where_it_applies(entry: known_defects.KnownDefect) -> None:
    """An entry stays only while its defect shows: its reproduction exits 1 where the entry applies.
    When an upgrade fixes it upstream this fails, saying to remove the entry."""
    why = entry.machine_reason(this_host())
    if why:
        pytest.skip(f"{entry.name} does not apply here: {why}")
    script = ROOT / entry.reproduction
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert r.returncode == 1, (
        f"{entry.name} no longer reproduces ({r.stdout.strip()}): it looks fixed; remove its "
        "[[tool.perfgate.known_defect]] entry from pyproject.toml"
    )


def test_the_amx_workaround_holds_where_the_cpu_has_amx() -> None:
    """The workaround perfgate's int8-dynamic+compile uses on the CPU (freezing) gives the right
    result on the very machine where the plain compile gives uninitialised memory."""
    (amx,) = [d for d in REPO_DEFECTS if d.name == "torch-int-mm-amx-strided-lhs"]
    why = amx.machine_reason(this_host())
    if why:
        pytest.skip(f"the AMX defect cannot show here: {why}")
    script = ROOT / amx.reproduction
    r = subprocess.run([sys.executable, str(script), "freezing"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_a_defect_is_not_called_fixed_where_its_metric_was_not_judged() -> None:
    """`defect not seen` only where every metric of the entry was judged and passed: a run that
    left accuracy unjudged (--perfgate-gate-metrics latency), or a latency entry whose case had no
    baseline, proves nothing about the defect."""
    acc = known_defects.KnownDefect(name="a", title="t", workaround="w", cases=("*",))
    lat = known_defects.KnownDefect(name="l", title="t", workaround="w", cases=("*",), metrics=("latency",))
    record = CaseRecord(model="m", size="tiny", variant="v", device="cpu", accuracy={"rel_l2": 0.01, "cosine": 1.0})
    host = Host(cpu_features=frozenset())
    none_yet = [Verdict(case="c", metric="latency", verdict="no baseline")]
    seen = known_defects.explain("m-tiny-v", record, none_yet, [acc, lat], host)
    assert [v.metric for v in seen if v.verdict == "defect not seen"] == ["accuracy"]  # latency was not judged
    unjudged = known_defects.explain("m-tiny-v", record, none_yet, [acc], host, judged=lambda m: m != "accuracy")
    assert all(v.verdict != "defect not seen" for v in unjudged)
    judged = [Verdict(case="c", metric="latency", verdict="unchanged")]
    assert [v.metric for v in known_defects.explain("m-tiny-v", record, judged, [lat], host)][-1] == "latency"
