"""The pytest integration, driven with pytester: JSON, recording, compare, gate, notices, bad input."""

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import needs_pygal

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[2]

# A model from outside models/, as a user would add one: a step of known cost and known memory.
USER_MODEL = '''
"""A stand-in model with a 20 ms step (mostly a sleep: steady under load) that touches 64 MiB.

64 MiB is above glibc's largest dynamic mmap threshold, so each step maps fresh pages and the
high-water mark sees exactly the touched size."""
import time
from dataclasses import dataclass
import torch
from torch import nn
from perfgate import ModelSpec, register_model

@dataclass(frozen=True, kw_only=True)
class SleepyConfig:
    sleep_s: float = 0.020
    mib: int = 64

CONFIGS = {"tiny": SleepyConfig()}

class Sleepy(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        buf = torch.empty(self.config.mib * 2**20, dtype=torch.uint8).fill_(1)
        time.sleep(self.config.sleep_s)
        return x * self.w + buf[:1].float() * 0

def example_inputs(config, *, batch=1, seed=0, device="cpu", dtype=torch.float32, **options):
    return (torch.ones(batch, 4, device=device, dtype=dtype),)

def step_info(config, *, batch=1, **options):
    return {"frames": float(batch)}

OUTPUT_KIND = "tensor"

register_model(ModelSpec(name="sleepy", module=__name__, model_class="Sleepy", default_sizes={"cpu": "tiny"}))
'''

PYPROJECT = """
[tool.perfgate]
model_files = ["user_model.py"]
[tool.perfgate.gate]
contention_max = 1000.0  # the test machine is shared; contention is tested elsewhere
remeasure = 2  # as by default: a shared machine can fake one slowdown
# The sleepy step read +35.6% between two unchanged runs while other jobs ran: these tests check the
# plumbing, so no load can reach the tolerance, and a regression is a baseline claiming 10x faster.
latency_tolerance = 3.0
memory_slack_mib = 1.0
"""

# The device is pinned: on a machine with a GPU the default would be CUDA, and these tests mean the CPU.
# Raw ms: the sleepy step is mostly a sleep, so it does not slow with a busy machine as the reference
# workload does; normalising would judge the test machine's load, not the step.
ARGS = [
    "-p",
    "perfgate.plugin.hooks",
    "--perfgate-device",
    "cpu",
    "--perfgate-no-reference",
    "--perfgate-models",
    "sleepy",
    "--perfgate-variants",
    "baseline",
    "--perfgate-min-rounds",
    "15",
    "--perfgate-max-rounds",
    "15",
    "-p",
    "no:cacheprovider",
]


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_models=(ROOT / "benchmarks" / "test_models.py").read_text())
    pytester.path.joinpath("user_model.py").write_text(USER_MODEL)
    pytester.path.joinpath("pyproject.toml").write_text(PYPROJECT)
    return pytester


def _baseline_file(pytester) -> Path:
    files = sorted(pytester.path.joinpath("baselines").glob("*/0*.json"))
    assert len(files) == 1, files
    return files[0]


@pytest.fixture(scope="module")
def _recorded_baselines(tmp_path_factory) -> Path:
    """Where the module's one `ARGS --perfgate-record` run leaves its baselines folder (empty until then)."""
    return tmp_path_factory.mktemp("recorded") / "baselines"


@pytest.fixture
def recorded(suite, _recorded_baselines):
    """suite with the baseline one `ARGS --perfgate-record` sub-run wrote in its baselines/: the first
    test of a module to ask runs it in its own folder (the sub-run as each test ran it before, ~7 s of
    CPU, most of it start-up), the others get a copy of what it wrote, taken before any test edits it."""
    if not _recorded_baselines.is_dir():
        suite.runpytest_subprocess(*ARGS, "--perfgate-record").assert_outcomes(passed=1)
        shutil.copytree(suite.path / "baselines", _recorded_baselines)
    else:
        shutil.copytree(_recorded_baselines, suite.path / "baselines")
    return suite


# Seen from inside the run, as a user's conftest would see it: what the collector still walks when a
# case starts, against what perfgate froze after collection.
GC_PROBE = """
import gc, json, pathlib
def pytest_runtest_call(item):
    pathlib.Path("gc.json").write_text(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
"""


def test_the_long_lived_objects_are_frozen_before_the_first_case(suite):
    """torch, perfgate and the collected items are frozen after collection: the gc.collect() before
    each case and its timed rounds walks only what the run made since (0.15-0.4 s each otherwise)."""
    suite.makeconftest(GC_PROBE)
    suite.runpytest_subprocess(*ARGS).assert_outcomes(passed=1)
    seen = json.loads(suite.path.joinpath("gc.json").read_text())
    assert seen["frozen"] > 100_000 and seen["tracked"] < seen["frozen"] / 10, seen


@needs_pygal  # the run also writes its histogram
def test_run_writes_json_with_extra_info_and_fingerprint(suite):
    r = suite.runpytest_subprocess(*ARGS, "--benchmark-json", "out.json", "--benchmark-histogram")
    r.assert_outcomes(passed=1)
    # pytest-benchmark's histogram (pygal) under .perfgate/, not in the project's root.
    (svg,) = suite.path.joinpath(".perfgate", "histograms").glob("benchmark_*.svg")
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert list(suite.path.glob("*.svg")) == []
    data = json.loads(suite.path.joinpath("out.json").read_text())
    info = data["benchmarks"][0]["extra_info"]
    for key in (
        "model",
        "size",
        "variant",
        "device",
        "dtype",
        "params",
        "peak_mem_mib",
        "first_call_s",
        "throughput",
        "unit",
        "samples_ms",
        "median_ms",
        "p90_ms",
        "p99_ms",
        "accuracy",
    ):
        assert key in info, key
    assert info["model"] == "sleepy" and info["variant"] == "baseline" and info["device"] == "cpu"
    assert info["median_ms"] >= 20.0 and info["unit"] == "frames" and info["params"] == 4
    assert info["reserved_mem_mib"] is None  # no CUDA figure from a CPU run
    assert len(info["samples_ms"]) == 15 == len(data["benchmarks"][0]["stats"]["data"])
    # 15 rounds support no tail (MLPerf LoadGen: 64 for p90): None, with the reason
    assert info["p90_ms"] is None and info["p99_ms"] is None and "p90 needs >= 64" in info["tail_note"]
    # Energy from the CPU's RAPL counter where readable, else skipped with the reason: never a zero
    assert ("energy_skipped" in info) != ("energy_j_per_step" in info) and info.get("energy_j_per_step", 1) > 0
    fp = data["machine_info"]["perfgate"]["fingerprint"]
    assert fp["device_type"] == "cpu" and "cpu_flags" in fp and fp["threads"] >= 1
    assert data["perfgate"]["schema"] == 1
    r.stdout.fnmatch_lines(["*no baseline recorded for this machine's fingerprint*--perfgate-record*"])


@pytest.mark.usefixtures("recorded")  # baselines/ holds one `ARGS --perfgate-record` run's baseline
def test_record_then_compare_passes_unchanged_and_fails_on_edited_baselines(suite):
    path = _baseline_file(suite)
    assert path.name == "0001_baseline.json"

    r = suite.runpytest_subprocess(*ARGS, "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stderr.fnmatch_lines(["*Comparing against benchmarks from: */baselines/*/0001_baseline.json*"])
    r.stdout.fnmatch_lines(
        [
            "*the gate judged each case against the newest baseline holding it: 1 case(s) against *0001_baseline.json",
            "*pytest-benchmark's table compared with *0001_baseline.json",
        ]
    )
    r.stdout.no_fnmatch_line("*machine_info is different*")
    # Judged: counted among the unchanged, or a row of its own where noise made it inconclusive.
    assert any(
        line.startswith("unchanged: ") and "latency" in line or "sleepy-tiny-baseline  latency" in line
        for line in r.outlines
    )
    r.stdout.no_fnmatch_line("*latency*regression*")

    data = json.loads(path.read_text())
    original = json.dumps(data)
    info = data["benchmarks"][0]["extra_info"]
    info["samples_ms"] = [s / 10 for s in info["samples_ms"]]  # the baseline claims 10x as fast
    path.write_text(json.dumps(data))
    r = suite.runpytest_subprocess(*ARGS, "--benchmark-compare")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*latency regression: median*"])

    data = json.loads(original)
    data["benchmarks"][0]["extra_info"]["peak_mem_mib"] /= 2  # ... or to use half the memory
    path.write_text(json.dumps(data))
    r = suite.runpytest_subprocess(*ARGS)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*memory regression: peak*"])


def test_recording_appends_history(suite):
    suite.runpytest_subprocess(*ARGS, "--perfgate-record=first", "--perfgate-no-gate").assert_outcomes(passed=1)
    suite.runpytest_subprocess(
        *ARGS, "--perfgate-record=second", "--perfgate-no-gate", "--benchmark-save", "s"
    ).assert_outcomes(passed=1)
    names = sorted(p.name for p in suite.path.joinpath("baselines").glob("*/0*.json"))
    assert names == ["0001_first.json", "0002_second.json"]
    # pytest-benchmark's own save, written by perfgate.files (its indent, not pytest-benchmark's 4)
    (saved,) = suite.path.joinpath(".perfgate", "benchmarks").glob("*/*/0001_s.json")
    assert saved.read_text().startswith('{\n  "machine_info"')


@pytest.mark.parametrize("content, problem", [("{", "truncated JSON"), ('{"benchmarks": []}', "no 'perfgate' block")])
@pytest.mark.usefixtures("recorded")  # baselines/ holds one `ARGS --perfgate-record` run's baseline
def test_bad_baseline_is_one_line_and_a_usage_error(suite, content, problem):
    path = _baseline_file(suite)
    path.write_text(content)
    r = suite.runpytest_subprocess(*ARGS)
    assert r.ret == pytest.ExitCode.USAGE_ERROR  # not 1: a broken file is not a regression
    r.stderr.fnmatch_lines([f"*perfgate: {path}: {problem}*record one with*"])


def test_bad_options_are_one_line_usage_errors(suite):
    r = suite.runpytest_subprocess("-p", "perfgate.plugin.hooks", "--perfgate-models", "nosuch")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--perfgate-models 'nosuch' matches no model*"])
    r = suite.runpytest_subprocess("-p", "perfgate.plugin.hooks", "--perfgate-precision", "2")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*precision must be in (0, 1)*"])


def test_an_inductor_cache_that_cannot_be_made_is_a_usage_error(suite):
    suite.path.joinpath("a-file").write_text("")
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-inductor-cache", "a-file/cache")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        ["*perfgate: --perfgate-inductor-cache a-file/cache: *a-file is not a folder*--perfgate-inductor-cache DIR"]
    )
    assert "INTERNALERROR" not in r.stdout.str() + r.stderr.str()


def test_recording_into_a_folder_that_takes_no_file_is_a_usage_error_before_any_case(suite):
    suite.path.joinpath("a-file").write_text("")
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-record", "--perfgate-baselines", "a-file/baselines")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        [
            "*perfgate: --perfgate-record: --perfgate-baselines a-file/baselines takes no baseline "
            "(*a-file is not a folder)*"
        ]
    )
    assert not suite.path.joinpath(".perfgate", "verdicts.json").exists()  # nothing ran


# The baselines folder turns into a file after the start (a full disk, a folder made read-only, ...).
BREAK_BASELINES = """
import shutil, pathlib, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    shutil.rmtree("bl")
    pathlib.Path("bl").write_text("")
"""


def test_a_baseline_that_cannot_be_written_keeps_the_run_writes_the_verdicts_and_fails(suite):
    from perfgate.gate import store

    suite.makeconftest(BREAK_BASELINES)
    suite.path.joinpath("bl").mkdir()
    verdicts = suite.path.joinpath(".perfgate", "verdicts.json")
    verdicts.parent.mkdir()
    verdicts.write_text('{"stale": true}\n')
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-record=main", "--perfgate-no-gate", "--perfgate-baselines", "bl")
    assert r.ret == pytest.ExitCode.USAGE_ERROR  # asked to record and nothing was recorded: never 0
    assert "Traceback" not in r.stdout.str() + r.stderr.str()
    (kept,) = suite.path.joinpath(".perfgate", "unrecorded").glob("*/0001_main.json")
    r.stdout.fnmatch_lines(
        [
            f"perfgate: the baseline could not be recorded in bl/* the run is kept in {kept}: once the folder is "
            "writable, copy it there as the next NNNN_main.json, or record again with --perfgate-baselines DIR"
        ]
    )
    assert [b.fullname for b in store.by_name(store.load(kept)).values()] == [
        "test_models.py::test_step[sleepy-tiny-baseline]"
    ]
    assert "stale" not in verdicts.read_text()  # this run's verdicts, not the last run's
    r.stdout.fnmatch_lines([f"perfgate: verdicts written to {verdicts}"])


def test_earlier_passes_are_read_before_any_case_and_a_real_one_is_used(suite):
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-no-gate", "--perfgate-earlier-passes", "missing.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        ["*perfgate: --perfgate-earlier-passes missing.json: cannot read (*); give the result files*"]
    )
    assert not suite.path.joinpath(".perfgate", "verdicts.json").exists()  # stopped before the first case
    suite.runpytest_subprocess(*ARGS, "--perfgate-no-gate", "--benchmark-json", "p1.json").assert_outcomes(passed=1)
    r = suite.runpytest_subprocess(
        *ARGS, "--perfgate-no-gate", "--perfgate-earlier-passes", "p1.json", "--benchmark-json", "p2.json"
    )
    r.assert_outcomes(passed=1)
    (bench,) = json.loads(suite.path.joinpath("p2.json").read_text())["benchmarks"]
    assert bench["extra_info"]["pass_noise"]["latency"]["passes"] == 2


def test_a_missing_checkpoint_is_a_usage_error_and_a_wrong_one_a_one_line_error_verdict(suite):
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-no-gate", "--perfgate-checkpoint", "nofile.pt")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*perfgate: --perfgate-checkpoint nofile.pt: no such file; give the path of a state dict*"])
    import torch

    torch.save({"w": torch.ones(3)}, suite.path / "other.pt")  # another model's: w has 3 values, sleepy's 4
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-no-gate", "--perfgate-checkpoint", "other.pt")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            "*sleepy-tiny-baseline: checkpoint other.pt: does not fit Sleepy: size mismatch for w: *; give a state "
            "dict of this model saved with torch.save (--perfgate-checkpoint, perfgate profile --checkpoint)"
        ]
    )
    r.stdout.no_fnmatch_line("*Traceback*")


def test_unavailable_variant_is_skipped_with_its_reason(suite):
    r = suite.runpytest_subprocess(
        "-p",
        "perfgate.plugin.hooks",
        "--perfgate-device",
        "cpu",
        "--perfgate-models",
        "sleepy",
        "--perfgate-variants",
        "tensorrt,cudagraphs",
        "-rs",
    )
    r.assert_outcomes(skipped=2)
    r.stdout.fnmatch_lines(["*skipped variants:*", "*1 x TensorRT needs a CUDA device*"])
    r.stdout.fnmatch_lines(["*SKIPPED*tensorrt: TensorRT needs a CUDA device*"])


FLAKY_MODEL = '''
"""A model that hangs in its forward, fails to build, or works, by size."""
import time
from dataclasses import dataclass
import torch
from torch import nn
from perfgate import ModelSpec, register_model

@dataclass(frozen=True, kw_only=True)
class FlakyConfig:
    mode: str = "ok"

CONFIGS = {"ok": FlakyConfig(), "hang": FlakyConfig(mode="hang"), "broken": FlakyConfig(mode="broken")}

class Flaky(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.mode == "broken":
            raise RuntimeError("weights of layer 3 do not fit: 64 != 65")
        self.config = config
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        if self.config.mode == "hang":
            time.sleep(3600)
        return x * self.w

def example_inputs(config, *, batch=1, seed=0, device="cpu", dtype=torch.float32, **options):
    return (torch.ones(batch, 4, device=device, dtype=dtype),)

def step_info(config, *, batch=1, **options):
    return {"frames": float(batch)}

register_model(ModelSpec(name="flaky", module=__name__, model_class="Flaky", default_sizes={"cpu": "ok"}))
'''


@pytest.fixture
def flaky(suite):
    suite.path.joinpath("flaky_model.py").write_text(FLAKY_MODEL)
    return suite


FLAKY = [
    "-p",
    "perfgate.plugin.hooks",
    "--perfgate-device",
    "cpu",
    "--perfgate-model-file",
    "flaky_model.py",
    "--perfgate-models",
    "flaky",
    "--perfgate-variants",
    "baseline",
    "--perfgate-min-rounds",
    "5",
    "--perfgate-max-rounds",
    "5",
    "-p",
    "no:cacheprovider",
]


def test_a_hanging_case_times_out_and_the_suite_goes_on(flaky):
    # 30 s, not 10: the limit holds for the good case too, and on a busy VM (load 8 on 2 cores) its
    # build, reference and rounds once passed 10 s.
    r = flaky.runpytest_subprocess(
        *FLAKY, "--perfgate-sizes", "hang,ok", "--perfgate-case-timeout-s", "30", "--perfgate-no-gate"
    )
    r.assert_outcomes(failed=1, passed=1)
    r.stdout.fnmatch_lines(["*flaky-hang-baseline: timed out after 30 s (--perfgate-case-timeout-s*"])
    verdicts = json.loads(flaky.path.joinpath(".perfgate", "verdicts.json").read_text())["verdicts"]
    assert [(v["verdict"], v["message"][:20]) for v in verdicts if v["metric"] == "run"] == [
        ("error", "timed out after 30 s")
    ]


def test_a_model_that_fails_to_build_is_one_line_and_its_traceback_only_with_v(flaky):
    r = flaky.runpytest_subprocess(*FLAKY, "--perfgate-sizes", "broken,ok", "--perfgate-no-gate")
    r.assert_outcomes(failed=1, passed=1)
    r.stdout.fnmatch_lines(
        ["*flaky-broken-baseline: RuntimeError: weights of layer 3 do not fit: 64 != 65 (the traceback with -v)*"]
    )
    r.stdout.no_fnmatch_line("*Traceback*")
    r.stdout.no_fnmatch_line("*raise RuntimeError*")
    r.stdout.no_fnmatch_line("*Benchmark fixture was not used*")  # the failure's one line says it all
    r = flaky.runpytest_subprocess(*FLAKY, "--perfgate-sizes", "broken", "--perfgate-no-gate", "-v")
    r.stdout.fnmatch_lines(["*raise RuntimeError*"])


def test_a_run_that_judged_no_latency_says_so_and_fails_in_ci(flaky, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    r = flaky.runpytest_subprocess(*FLAKY)  # no baseline recorded: nothing to judge against
    r.assert_outcomes(passed=1)
    assert r.ret == 0
    r.stdout.fnmatch_lines(["perfgate: no case's latency could be judged (1 no baseline): this run gated no latency"])
    monkeypatch.setenv("CI", "true")
    r = flaky.runpytest_subprocess(*FLAKY)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*this run gated no latency (failing the run: --perfgate-fail-unjudged)"])
    assert flaky.runpytest_subprocess(*FLAKY, "--perfgate-fail-unjudged", "no").ret == 0


# A plugin (here a conftest) adapting the run through the hooks perfgate.plugin.hooks declares
# (perfgate.plugin.hookspecs).
SESSION_HOOK = """
from dataclasses import replace
from perfgate.measure.core import StopRule

def pytest_perfgate_run_config(config, run_config):
    assert run_config.tier.name == "all"
    return replace(
        run_config,
        run_options=replace(run_config.run_options, stop=StopRule(min_rounds=3, max_rounds=3)),
        record_label="from-hook",
        verdict_file=config.rootpath / "hook-verdicts.json",
    )

def pytest_perfgate_configure_session(config, session):
    assert [c.id for c in session.cases] == ["sleepy-tiny-baseline"]
    assert session.config.record_label == "from-hook"  # the plugins' changes are in the config it was built with
"""


def test_a_plugin_adjusts_the_run_through_the_declared_hooks(suite):
    suite.makeconftest(SESSION_HOOK)
    r = suite.runpytest_subprocess(*ARGS, "--perfgate-record", "--perfgate-no-gate", "--benchmark-json", "out.json")
    r.assert_outcomes(passed=1)
    info = json.loads(suite.path.joinpath("out.json").read_text())["benchmarks"][0]["extra_info"]
    assert len(info["samples_ms"]) == 3  # the hook's stop rule, not the 15 rounds of ARGS
    assert _baseline_file(suite).name == "0001_from-hook.json"
    assert (
        suite.path.joinpath("hook-verdicts.json").is_file()
        and not suite.path.joinpath(".perfgate", "verdicts.json").exists()
    )
    r.stdout.fnmatch_lines(["*recorded baseline*0001_from-hook.json", "*verdicts written to*hook-verdicts.json"])


def test_a_plugin_chooses_the_device_through_the_declared_hook(suite):
    suite.makeconftest("def pytest_perfgate_device(config):\n    return 'cuda:99'\n")
    r = suite.runpytest_subprocess(*ARGS)  # ARGS name --perfgate-device cpu: the hook's answer wins
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*perfgate: --perfgate-device cuda:99: no such CUDA device here*"])


def test_histogram_prefix_with_a_folder_is_kept_and_missing_pygal_is_a_usage_error(tmp_path, monkeypatch):
    from perfgate.plugin import benchmark_adapter as plugin

    assert plugin.histogram_prefixes(["out/h", "bench"], tmp_path) == [
        "out/h",
        str(tmp_path / ".perfgate" / "histograms" / "bench"),
    ]
    real_find_spec = plugin.importlib.util.find_spec
    monkeypatch.setattr(
        plugin.importlib.util, "find_spec", lambda name: None if name == "pygal" else real_find_spec(name)
    )
    with pytest.raises(pytest.UsageError, match="--benchmark-histogram needs pygal"):
        plugin.histogram_prefixes(["bench"], tmp_path)


def test_a_case_whose_passes_still_disagree_is_not_recorded_and_its_older_baseline_still_gates_it(
    pytester, monkeypatch
):
    # The user's model with its sleep set from the environment: a slow phase is a longer sleep.
    slow = "sleep_s: float = float(__import__('os').environ.get('SLEEP', '0.020'))"
    pytester.makepyfile(test_models=(ROOT / "benchmarks" / "test_models.py").read_text())
    pytester.path.joinpath("user_model.py").write_text(USER_MODEL.replace("sleep_s: float = 0.020", slow))
    pytester.path.joinpath("pyproject.toml").write_text(
        PYPROJECT.replace("latency_tolerance = 3.0", "latency_tolerance = 0.5")
    )
    monkeypatch.setenv("SLEEP", "0.002")
    pytester.runpytest_subprocess(
        *ARGS, "--perfgate-no-gate", "--perfgate-record", "quiet", "--benchmark-json", "p1.json"
    ).assert_outcomes(passed=1)
    first = _baseline_file(pytester)
    # The last pass and its re-measurement caught a slow phase, far past the 50% tolerance.
    monkeypatch.setenv("SLEEP", "0.2")
    r = pytester.runpytest_subprocess(
        *ARGS, "--perfgate-no-gate", "--perfgate-record", "slow", "--perfgate-earlier-passes", "p1.json,p1.json"
    )
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(
        [
            "perfgate: not recorded: test_models.py::test_step?sleepy-tiny-baseline?: its 3 recording passes "
            "disagree: latency *% apart (> 50%), a slow phase of the machine; "
            f"the previous baseline *{first.name} still gates it"
        ]
    )
    assert _baseline_file(pytester) == first  # no file with the flagged record, which would hide the first
    from perfgate.run.config import RunConfig
    from perfgate.run.runner import Host

    config = RunConfig(device="cpu", baselines_root=pytester.path / "baselines")
    found = Host.detect(config).baseline_record("test_models.py::test_step[sleepy-tiny-baseline]")
    assert found is not None and found[1] == first and found[0].unreliable is None
