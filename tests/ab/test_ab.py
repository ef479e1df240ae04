"""Same-job A/B: the paired verdicts, the interleaved worker on a real model, mode choice, injection, bisect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from perfgate import gate
from perfgate.ab import run as ab_run
from perfgate.ab import verdicts as ab
from perfgate.ab.job import CaseResult, Job, Measured, NotMeasured, read_results
from perfgate.gate.policy import Policy
from perfgate.gate.settings import GateSettings
from perfgate.quality import inject
from tests.helpers import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
S = GateSettings()


def _worker(cases: list[str], tmp: Path, env: dict[str, str] | None = None) -> list[CaseResult]:
    out = tmp / "out.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfgate.ab.interleave",
            # the default device is CUDA where a GPU is: the test is about the interleaving
            str(Job(base=ROOT, head=ROOT, out=out, cases=cases, budget_s=1, device="cpu").write(tmp / "job.json")),
        ],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert out.is_file(), r.stderr[-2000:]
    results = read_results(out)
    assert [r.to_json() for r in results] == json.loads(out.read_text())["results"]  # read back as written
    return results


@pytest.mark.slow
def test_interleaved_worker_on_a_real_model_sees_an_injected_slowdown_and_not_its_own_noise(tmp_path: Path) -> None:
    case = "owl-audio-decoder-tiny-baseline"
    # What is asserted is what a busy machine cannot flip: the verdict kinds, never how many
    # percent a ratio reads (an injected 10% read +26% while another job ran and turned CI red).
    runs = [_worker([case, "no-such-case"], tmp_path) for _ in range(3)]
    same = [r[0] for r in runs]
    assert all(isinstance(r, Measured) and r.ratio > 0 and r.rounds > 0 for r in same), same  # no error entry
    (v, *_) = ab.interleaved_verdicts(f"x[{case}]", same, Policy(), final=True)
    assert v.verdict in (gate.UNCHANGED, gate.INCONCLUSIVE), v.message  # never an alarm on unchanged code
    # A slowdown far beyond any machine's noise (the interleaved ratio cancels the machine's speed).
    slowed = [_worker([case], tmp_path, {"PERFGATE_INJECT_HEAD": "local:50"})[0] for _ in range(3)]
    assert all(isinstance(r, Measured) and r.ratio > 0 and r.rounds > 0 for r in slowed), slowed  # both sides timed
    (v, *_) = ab.interleaved_verdicts(f"x[{case}]", slowed, Policy(), final=True)
    # The pooled verdict kind, not each process's direction nor the significance: beside another
    # xdist worker's valgrind sub-run one process read this +50% as 0.75 (others 1.15-1.5), and
    # over 3 processes the t-test's p can land either side of its threshold (+48.6%, p=0.011 read
    # 'inconclusive' in CI); what it decides on given figures is tested with fixed ratios in the
    # gate's own tests. A 50% slowdown is never called unchanged or an improvement.
    assert v.verdict in (gate.REGRESSION, gate.INCONCLUSIVE), v.message
    # A case the head does not have is an error entry beside the measured one (no process of its own).
    assert all(r[1] == NotMeasured(case="no-such-case", error="no such case in the head revision") for r in runs)


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


SLEEPY = """
import time
from dataclasses import dataclass
import torch
from torch import nn
from perfgate import ModelSpec, register_model

@dataclass(frozen=True, kw_only=True)
class Config:
    pass

CONFIGS = {{"tiny": Config()}}
SLEEP_S = {sleep}

class Sleepy(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        time.sleep(SLEEP_S)
        return x * self.w

def example_inputs(config, *, batch=1, seed=0, device="cpu", dtype=torch.float32, **options):
    return (torch.ones(batch, 4, device=device, dtype=dtype),)

def step_info(config, *, batch=1, **options):
    return {{"frames": float(batch)}}

register_model(ModelSpec(name="sleepy", module=__name__, model_class="Sleepy", default_sizes={{"cpu": "tiny"}}))
"""


def _project(tmp: Path) -> Path:
    repo = tmp / "proj"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "test_models.py").write_text((ROOT / "benchmarks" / "test_models.py").read_text())
    (repo / "conftest.py").write_text('pytest_plugins = ("perfgate.plugin.hooks",)\n')
    (repo / "pyproject.toml").write_text('[tool.perfgate]\nmodel_files = ["sleepy.py"]\n')
    (repo / "sleepy.py").write_text(SLEEPY.format(sleep=0.002))
    (repo / "README.md").write_text("a project\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "fast")
    return repo


def test_the_mode_follows_what_changed(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("docs only\n")
    assert ab_run.choose_mode(repo, base, None, {"sleepy.py"})[0] == "interleaved"
    (repo / "sleepy.py").write_text(SLEEPY.format(sleep=0.003))
    assert ab_run.choose_mode(repo, base, None, {"sleepy.py"}) == ("interleaved", "only model files changed")
    (repo / "conftest.py").write_text('pytest_plugins = ("perfgate.plugin.hooks",)\n# changed\n')
    mode, why = ab_run.choose_mode(repo, base, None, {"sleepy.py"})
    assert mode == "processes" and "conftest.py" in why


@pytest.mark.slow
def test_bisect_finds_the_commit_that_made_the_case_slower(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    good = _git(repo, "rev-parse", "HEAD").strip()
    for i, sleep in enumerate((0.002, 0.003, 0.003)):  # the second commit adds a millisecond
        (repo / "README.md").write_text(f"change {i}\n")
        (repo / "sleepy.py").write_text(SLEEPY.format(sleep=sleep))
        _git(repo, "commit", "-qam", f"change {i}")
    culprit = _git(repo, "rev-parse", "HEAD~1").strip()
    r = subprocess.run(
        [sys.executable, "-m", "perfgate", "bisect", good, "HEAD", "--case", "sleepy-tiny-baseline", "--device", "cpu"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"perfgate bisect: {culprit} is the first bad commit" in r.stdout
    assert "regression" in r.stdout  # the A/B evidence of the commits judged


def test_the_bisect_harness_runs_the_bisected_commits_families(tmp_path: Path) -> None:
    """A commit is judged as `git bisect run` starts it: in the checked-out commit, the harness first on the
    path. perfgate comes from the harness, the families (top-level models/) from the commit, no link."""
    from perfgate.commands.bisect import copy_harness

    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "__init__.py").write_text("WHERE = 'the checked-out commit'\n")
    harness = tmp_path / "harness"
    copy_harness(ROOT / "perfgate", harness / "perfgate")
    assert (harness / "perfgate" / "commands" / "models.py").is_file()
    assert not any(p.is_symlink() for p in harness.rglob("*")) and not (harness / "perfgate" / "models").exists()
    code = "import models as m, perfgate.plugin.hooks as p; print(m.WHERE); print(p.__file__)"
    env = {**os.environ, "PYTHONPATH": str(harness)}
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    where, plugin = r.stdout.splitlines()
    assert where == "the checked-out commit" and Path(plugin).parent == harness / "perfgate" / "plugin"


def test_injected_slowdowns_are_what_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="write local:K or shared:K"):
        inject.parse("model:5")
    ran: list[int] = []
    original = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a, **k: ran.append(1) or original(*a, **k))
    undo = inject.slow_linear(25.0)  # every 4th call done twice
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    for _ in range(8):
        torch.nn.functional.linear(x, w)
    undo()
    assert len(ran) == 10
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 64)
    step = inject.local_slowdown_step(lambda: model(x), model, 10.0)
    assert torch.equal(step(), model(x))  # the model's own result: the extra work is discarded


FACTORY_FAMILY = """
import torch
from perfgate import ModelSpec, register_model

CONFIGS = {{"tiny": {{"width": 2}}}}


def {name}(width):
    return torch.nn.Linear(width, {out})


register_model(ModelSpec(name="factory-ab", module=__name__, factory={name}, default_sizes={{"cpu": "tiny"}}))
"""


def test_the_interleaved_base_builds_with_its_own_copy_of_a_factory(tmp_path: Path, monkeypatch) -> None:
    from perfgate.ab import interleave
    from perfgate.cases import workload

    monkeypatch.setattr(workload, "MODELS", {})
    head, base, new = tmp_path / "head", tmp_path / "base", tmp_path / "new"
    for root, name, out in ((head, "make", 4), (base, "make", 8), (new, "other", 8)):
        root.mkdir()
        (root / "factory_ab_family.py").write_text(FACTORY_FAMILY.format(name=name, out=out))
    module = workload.load_model_file(head / "factory_ab_family.py")
    try:
        spec = workload.MODELS["factory-ab"]
        base_spec = interleave.base_spec(spec, head, base)
        assert workload.build_module(spec, "tiny").out_features == 4
        assert workload.build_module(base_spec, "tiny").out_features == 8  # the base's code, not the head's
        assert list(workload.MODELS) == ["factory-ab"]  # the base's copy registered nothing
        del sys.modules[f"perfgate_ab_base.{module.__name__}"]  # one base per process: loaded once
        assert interleave.base_spec(spec, head, new) is None  # no such factory in the base: a new model
    finally:
        for name in [n for n in sys.modules if n.endswith(module.__name__)]:
            del sys.modules[name]


def test_the_interleaved_driver_gives_its_workers_the_heads_inductor_cache(tmp_path: Path, monkeypatch) -> None:
    """What ci-benchmark's pr mode relies on: the stored run after `perfgate ab` finds the head's
    compiled artifacts in the head side's cache, in interleaved mode too (the worker's Job says where)."""
    from perfgate.ab.job import write_results

    jobs: list[Job] = []

    def worker(cmd, **kw):  # the worker process, as far as the driver can tell: its job read, no results
        jobs.append(Job.read(Path(cmd[-1])))
        write_results(jobs[-1].out, [NotMeasured(case=c, error="not run here") for c in jobs[-1].cases])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(ab_run.subprocess, "run", worker)
    head = ab_run.Side(name="head", label="h", sha="1" * 40, root=tmp_path, cache=tmp_path / "head-cache")
    base = ab_run.Side(name="base", label="b", sha="2" * 40, root=tmp_path / "b", cache=tmp_path / "base-cache")
    ab_run.run_interleaved(base, head, ["m-tiny-compile"], Policy(), max_processes=2)
    assert jobs and {j.inductor_cache for j in jobs} == {head.cache}


@pytest.fixture
def in_process_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project with the sleepy family, the working directory for an in-process interleaved worker;
    the registry and the modules the worker loaded are put back after the test."""
    from perfgate.cases import workload

    project = tmp_path / "proj"
    project.mkdir()
    (project / "sleepy_ab.py").write_text(SLEEPY.format(sleep=0.0))
    (project / "pyproject.toml").write_text('[tool.perfgate]\nmodel_files = ["sleepy_ab.py"]\n')
    monkeypatch.chdir(project)
    before, modules = dict(workload.MODELS), set(sys.modules)
    yield project
    workload.MODELS.clear()
    workload.MODELS.update(before)
    for name in set(sys.modules) - modules:
        if "sleepy_ab" in name:
            del sys.modules[name]


def test_the_workers_results_file_reads_back_key_for_key(tmp_path: Path, monkeypatch, in_process_project) -> None:
    """The interleaved worker itself (interleave.main: its job read, a case measured on both sides,
    its results file written) and the driver's reader: the file's keys and values, in their order,
    are what the records write back, and the verdicts are judged from the records."""
    from perfgate.ab import interleave

    project = in_process_project
    out = tmp_path / "out.json"
    case, gone = "sleepy-tiny-baseline", "no-such-case"
    cache = tmp_path / "head-inductor-cache"
    job = Job(base=project, head=project, out=out, cases=[case, gone], device="cpu", budget_s=0.2, inductor_cache=cache)
    assert Job.read(job.write(tmp_path / "job.json")) == job
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "restored-after-the-test")
    assert interleave.main([str(tmp_path / "job.json")]) == 0
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache) and cache.is_dir()  # compiles go to the head's
    written = json.loads(out.read_text())["results"]
    measured, missing = read_results(out)
    assert [measured.to_json(), missing.to_json()] == written  # same keys, same values, same order
    assert list(written[0]) == [
        "case", "ratio", "rounds", "median_base_ms", "median_head_ms", "peak_base_mib", "peak_head_mib",
        "contention_cores", "accuracy_base", "accuracy_head", "device", "model", "variant",
    ]  # fmt: skip
    assert written[1] == {
        "case": gone, "error": "no such case in the head revision", "raised": False, "context_lost": False
    }  # fmt: skip
    assert isinstance(measured, Measured) and measured.case == case and measured.rounds >= 50
    assert (measured.model, measured.variant, measured.device) == ("sleepy", "baseline", "cpu")
    assert measured.ratio > 0 and measured.accuracy_base == written[0]["accuracy_base"]
    assert isinstance(missing, NotMeasured) and not missing.new and missing.skipped is None
    assert ab.interleaved_verdicts(f"x[{case}]", [measured, missing], Policy(), final=False) is None  # one process
    (latency, *_) = ab.interleaved_verdicts(f"x[{case}]", [measured], Policy(), final=True)
    assert latency.metric == "latency" and latency.verdict in (gate.UNRELIABLE, gate.INCONCLUSIVE)


@pytest.mark.slow
def test_a_case_a_sides_process_fails_is_an_error_not_a_skip(tmp_path: Path) -> None:
    """Processes mode, from each side's real pytest process: a case whose head raises is an error
    verdict naming why (it used to read "skipped in both", exit 0); a variant this machine cannot
    run, skipped by both sides, stays a skip; a case only the base's process failed is nothing to
    compare, not the change's error; a side whose process died reached no case, and each is an
    error."""
    repo = _project(tmp_path)
    base = ab_run.checkout(repo, "HEAD", "base")
    (repo / "sleepy.py").write_text(
        SLEEPY.format(sleep=0.001).replace("return x * self.w", "raise RuntimeError('CUDA error: an illegal access')")
    )
    head = ab_run.working_tree(repo)
    cases = ["sleepy-tiny-baseline", "sleepy-tiny-cudagraphs"]
    runs = {
        s.name: ab_run.measure(s, cases, ["--perfgate-device", "cpu"], timeout_s=HANG_GUARD_S) for s in (base, head)
    }
    assert set(runs["base"].records) == {"sleepy-tiny-baseline"} and not runs["base"].failed
    assert "CUDA" in runs["head"].skipped["sleepy-tiny-cudagraphs"]
    assert "an illegal access" in runs["head"].failed["sleepy-tiny-baseline"]

    result = ab_run.run_ab(base, head, cases, Policy(), measure_fn=lambda s, ids: runs[s.name], max_pairs=1)
    assert result.skipped == ["sleepy-tiny-cudagraphs"]
    (v,) = result.verdicts
    assert v.verdict == gate.ERROR and v.case.endswith("[sleepy-tiny-baseline]") and "head: " in v.message
    assert gate.failing(result.verdicts) == [v]
    # The other way round, the base's process failing it and the head's measuring it (a pull request
    # that fixes a crash on main): measured again in the next pair (a base process the machine killed
    # once is not the base's code), and failed twice, nothing to compare, not the change's failure.
    fixed = {"base": runs["head"], "head": runs["base"]}
    result = ab_run.run_ab(base, head, cases, Policy(), measure_fn=lambda s, ids: fixed[s.name], max_pairs=5)
    (v,) = result.verdicts
    assert (v.verdict, v.metric, result.processes) == (gate.INCONCLUSIVE, "run", 4)
    assert v.message.startswith("base failed it in 2 pair(s) (") and "an illegal access" in v.message
    assert v.message.endswith("the head ran it: nothing to compare") and gate.failing(result.verdicts) == []
    once = iter([runs["head"], runs["base"]])  # the base's process fails it once, then measures it
    result = ab_run.run_ab(
        base, head, cases[:1], Policy(), max_pairs=2,
        measure_fn=lambda s, ids: next(once) if s.name == "base" else runs["base"],
    )  # fmt: skip
    assert len(result.pairs[cases[0]]) == 1 and "run" not in {v.metric for v in result.verdicts}

    # A process that dies before writing anything (a segfault, the OOM killer: os._exit here) reached
    # none of its cases, the one it would have skipped included: each is an error naming its exit.
    (repo / "sleepy.py").write_text(SLEEPY.format(sleep=0.001).replace("return x * self.w", "import os; os._exit(3)"))
    runs["head"] = ab_run.measure(head, cases, ["--perfgate-device", "cpu"], timeout_s=HANG_GUARD_S)
    assert not runs["head"].records and not runs["head"].skipped
    assert all("head process (exit 3) left no result" in runs["head"].failed[c] for c in cases)
    result = ab_run.run_ab(base, head, cases, Policy(), measure_fn=lambda s, ids: runs[s.name], max_pairs=1)
    assert not result.skipped and sorted(result.failed) == cases
    assert [v.verdict for v in result.verdicts] == [gate.ERROR, gate.ERROR]


def test_an_interleaved_case_that_raised_is_an_error_and_one_not_found_is_not() -> None:
    raised = NotMeasured(case="m-tiny-bf16", error="RuntimeError: CUDA error", raised=True)
    (v,) = ab.interleaved_verdicts("x[m-tiny-bf16]", [raised], Policy(), final=True)
    assert (v.verdict, v.metric, v.message) == (gate.ERROR, "run", "RuntimeError: CUDA error")
    gone = NotMeasured(case="m-tiny-bf16", error="no such case in the head revision")
    (v,) = ab.interleaved_verdicts("x[m-tiny-bf16]", [gone], Policy(), final=True)
    assert v.verdict == gate.INCONCLUSIVE


def test_the_interleaved_worker_skips_a_variant_found_unrunnable_while_building(
    tmp_path: Path, monkeypatch, in_process_project
) -> None:
    """A variant can learn only while building that it cannot run here (no FP8 kernel in this
    cuBLAS, torchao converting no layer): VariantError is a skip, as the stored run and processes
    mode make it, not an error that fails the comparison; any other exception is the case's error."""
    from perfgate.ab import interleave
    from perfgate.cases.conversions import VariantError

    project = in_process_project

    def fails(case_id, *args):
        if case_id.endswith("bf16"):
            raise VariantError("no layer was converted: nothing for int8 to do")
        raise RuntimeError("CUDA error: an illegal memory access")

    monkeypatch.setattr(interleave, "measure_case", fails)
    out = tmp_path / "out.json"
    cases = ["sleepy-tiny-bf16", "sleepy-tiny-baseline"]
    Job(base=project, head=project, out=out, cases=cases, device="cpu", budget_s=0.2).write(tmp_path / "job.json")
    assert interleave.main([str(tmp_path / "job.json")]) == 0
    skipped, raised = read_results(out)
    assert skipped == NotMeasured(case="sleepy-tiny-bf16", skipped="no layer was converted: nothing for int8 to do")
    assert raised == NotMeasured(
        case="sleepy-tiny-baseline", error="RuntimeError: CUDA error: an illegal memory access", raised=True
    )
    (v,) = ab.interleaved_verdicts("x[sleepy-tiny-baseline]", [raised], Policy(), final=True)
    assert v.verdict == gate.ERROR


def test_an_interleaved_case_only_the_base_raised_is_measured_again_then_nothing_to_compare(
    tmp_path: Path, monkeypatch, in_process_project
) -> None:
    """The interleaved worker names the side whose code raised, building or in the rounds, and blames
    the base only if, each run alone afresh as many steps, the head's case runs and the base's
    raises (what fails both lands on the base's step, which comes first); the driver measures a
    case only the base raised again in the next process (a pull request that fixes a crash on main,
    or trouble of the base's own), and after BASE_FAILURES processes it is nothing to compare, not
    the change's failure; a raise in the head's code, or one only with both built, is an error."""
    from perfgate.ab import interleave
    from perfgate.ab.job import write_results
    from perfgate.cases import workload

    project, case = in_process_project, "sleepy-tiny-baseline"
    # Each model counts its own calls (the reference output, while building, is its first) and sees
    # the models alive in the process (as a GPU's memory would).
    clean = (
        SLEEPY.format(sleep=0.0)
        .replace("import time", "import sys\nimport time\nimport weakref")
        .replace(
            "self.w = nn.Parameter(torch.ones(4))",
            "self.w = nn.Parameter(torch.ones(4))\n        self.calls = 0\n"
            "        sys.__dict__.setdefault('sleepy_alive', weakref.WeakSet()).add(self)",
        )
    )
    raising = {
        "building": "raise RuntimeError('CUDA error: building')",
        "the rounds": "if self.calls > 20: raise RuntimeError('CUDA error: the rounds')",
        # the 5th step: both sides' steps alternate, the base's first, up to the 6th
        "the 5th step": "if self.calls > 5: raise RuntimeError('CUDA error: the 5th step')",
        "together": "if self.calls > 1 and len(sys.sleepy_alive) > 1: raise RuntimeError('CUDA error: oom')",
    }

    def broken(when: str) -> str:
        return clean.replace(
            "return x * self.w", f"self.calls += 1\n        {raising[when]}\n        return x * self.w"
        )

    def copy(name: str, source: str) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "sleepy_ab.py").write_text(source)
        return tmp_path / name

    def worker(base: Path, head_source: str, name: str) -> CaseResult:
        (project / "sleepy_ab.py").write_text(head_source)  # the head's code: the project's own family
        for module in [m for m in sys.modules if "sleepy_ab" in m]:
            del sys.modules[module]  # each worker is a fresh process: both copies loaded anew
        workload.MODELS.pop("sleepy", None)
        out = tmp_path / f"{name}.json"
        Job(base=base, head=project, out=out, cases=[case], device="cpu", budget_s=0.2).write(tmp_path / "job.json")
        assert interleave.main([str(tmp_path / "job.json")]) == 0
        (row,) = read_results(out)
        return row

    base_clean = copy("clean", clean)
    for when in ("building", "the rounds", "the 5th step"):  # the base's code alone
        row = worker(copy(when.replace(" ", "-"), broken(when)), clean, f"base-{when}")
        assert isinstance(row, NotMeasured) and (row.raised, row.side) == (True, "base"), row
        assert row.error == f"base: RuntimeError: CUDA error: {when}"
    for when in ("building", "the rounds"):  # the head's code alone
        head_raised = worker(base_clean, broken(when), f"head-{when}")
        assert isinstance(head_raised, NotMeasured) and (head_raised.raised, head_raised.side) == (True, "head")
        assert head_raised.error == f"head: RuntimeError: CUDA error: {when}"
    # Both sides' code raising at their 5th step: the base's first; the head alone, afresh, as many steps.
    both = worker(tmp_path / "the-5th-step", broken("the 5th step"), "both")
    assert isinstance(both, NotMeasured) and both.side == "head", both
    fifth = "RuntimeError: CUDA error: the 5th step"
    assert both.error == f"head: {fifth} (with both built: {fifth})"
    # Failing only with both built (memory the two need at once): each runs alone, the failed pair
    # freed first, so it is neither side's alone: an error, never "nothing to compare".
    together = worker(copy("together", broken("together")), broken("together"), "together")
    assert isinstance(together, NotMeasured) and together.side == "both", together
    assert together.error == "both: RuntimeError: CUDA error: oom (with both sides built; each ran alone)"
    measured = worker(base_clean, clean, "both-run")
    assert isinstance(measured, Measured)

    def replay(rows: list[CaseResult]) -> ab_run.ABResult:
        it = iter(rows)

        def run(cmd, **kw):  # the worker process as the driver sees it: its results file
            write_results(Job.read(Path(cmd[-1])).out, [next(it)])
            return subprocess.CompletedProcess(cmd, 0, "", "")

        monkeypatch.setattr(ab_run.subprocess, "run", run)
        head = ab_run.Side(name="head", label="h", sha="1" * 40, root=tmp_path, cache=None)
        base = ab_run.Side(name="base", label="b", sha="2" * 40, root=tmp_path / "b", cache=None)
        return ab_run.run_interleaved(base, head, [case], Policy(), max_processes=len(rows))

    result = replay([row, row, row])
    (v,) = result.verdicts
    assert (v.verdict, v.metric, result.processes) == (gate.INCONCLUSIVE, "run", ab_run.BASE_FAILURES)
    assert v.message == f"base failed it in 2 process(es) ({fifth}); the head ran it: nothing to compare"
    assert gate.failing(result.verdicts) == [] and result.failed[case].startswith("base: RuntimeError")
    result = replay([row, measured])  # once, then measured: judged on what was measured
    assert result.interleaved[case] == [measured] and "run" not in {v.metric for v in result.verdicts}
    result = replay([row])  # the budget ends after one: still nothing to compare, not an error
    assert [(v.verdict, v.message.split(" (")[0]) for v in result.verdicts] == [
        (gate.INCONCLUSIVE, "base failed it in 1 process(es)")
    ]
    (v,) = replay([head_raised, row]).verdicts  # the head's code: the change's error, at once
    assert (v.verdict, v.message) == (gate.ERROR, "head: RuntimeError: CUDA error: the rounds")
    (v,) = replay([together, row]).verdicts  # only with both built: an error too
    assert (v.verdict, v.message) == (gate.ERROR, together.error)


STICKY = "CUDA error: an illegal memory access was encountered"


@pytest.fixture
def sticky_context(monkeypatch: pytest.MonkeyPatch, in_process_project: Path) -> Iterator[Path]:
    """A CUDA context's sticky fault, on the CPU, as the real library has it: the faulting call
    returns normally and breaks the process's context (`sys.sticky_poisoned`), after which every
    CUDA-like call raises, whichever side makes it: either side's model (`sticky_family`), isolate,
    the timer's syncs (before the step and on its end event), the worker's syncs and its probe. A
    fault that is not sticky (`sys.sticky_pending`) is raised once, by the next such call."""
    from perfgate.ab import interleave
    from perfgate.cases import runner

    def cuda_call() -> None:
        if getattr(sys, "sticky_poisoned", False):
            raise RuntimeError(STICKY)
        if getattr(sys, "sticky_pending", False):
            sys.sticky_pending = False  # type: ignore[attr-defined]
            raise RuntimeError(STICKY)

    class Timer:  # CudaEventTimer: a sync before the step, one on its end event after it
        def time_ms(self, step):
            cuda_call()
            t0 = time.perf_counter_ns()
            out = step()
            cuda_call()
            return (time.perf_counter_ns() - t0) / 1e6, out

    isolate = runner.isolate
    monkeypatch.setattr(runner, "isolate", lambda device: (cuda_call(), isolate(device))[1])
    monkeypatch.setattr(interleave, "_sync", lambda device: cuda_call())
    monkeypatch.setattr(interleave, "make_timer", lambda device: Timer())
    monkeypatch.setattr(sys, "sticky_poisoned", False, raising=False)
    monkeypatch.setattr(sys, "sticky_pending", False, raising=False)
    yield in_process_project


def sticky_family(*, faults_after: int | None = None, sticky: bool = True) -> str:
    """The sleepy family whose model raises once the context is broken, and, given `faults_after`,
    breaks it (asynchronously: the call returns) at each call after that many of its own in fp32
    (the baseline case; the bf16 case runs clean); not `sticky`: the fault is raised once."""
    flag = "sys.sticky_poisoned" if sticky else "sys.sticky_pending"
    fault = "if self.calls > {} and x.dtype == torch.float32: {} = True\n        "
    fault = fault.format(faults_after, flag) if faults_after else ""
    return (
        SLEEPY.format(sleep=0.0)
        .replace("import time", "import sys\nimport time")
        .replace("self.w = nn.Parameter(torch.ones(4))", "self.w = nn.Parameter(torch.ones(4))\n        self.calls = 0")
        .replace(
            "return x * self.w",
            f"if getattr(sys, 'sticky_poisoned', False): raise RuntimeError({STICKY!r})\n        "
            f"if getattr(sys, 'sticky_pending', False):\n            sys.sticky_pending = False\n"
            f"            raise RuntimeError({STICKY!r})\n        "
            f"self.calls += 1\n        {fault}return x * self.w",
        )
    )


def _fresh_worker(project: Path, job: Path) -> None:
    """interleave.main as a fresh worker process runs it: a context not broken, both copies loaded anew."""
    from perfgate.ab import interleave
    from perfgate.cases import workload

    sys.sticky_poisoned = False  # type: ignore[attr-defined]
    for module in [m for m in sys.modules if "sleepy_ab" in m]:
        del sys.modules[module]
    workload.MODELS.pop("sleepy", None)
    assert interleave.main([str(job)]) == 0


def _sides(tmp_path: Path, project: Path, base: str, head: str) -> tuple[ab_run.Side, ab_run.Side]:
    (project / "sleepy_ab.py").write_text(head)  # the head's code: the project's own family
    (tmp_path / "base").mkdir(exist_ok=True)
    (tmp_path / "base" / "sleepy_ab.py").write_text(base)
    head_side = ab_run.Side(name="head", label="h", sha="1" * 40, root=project, cache=None)
    return ab_run.Side(name="base", label="b", sha="2" * 40, root=tmp_path / "base", cache=None), head_side


def test_a_sticky_device_fault_of_the_base_is_not_the_heads_nor_the_next_cases(
    tmp_path: Path, monkeypatch, sticky_context
) -> None:
    """A real CUDA fault (an illegal memory access, a device-side assert) is asynchronous and sticky:
    the worker stops at the case after which its context is broken (no later case is an error: the
    driver measures them again in a fresh process), and the driver tells whose it was by running
    each side alone in a fresh process of its own, with CUDA_LAUNCH_BLOCKING=1, as many steps as
    the pair ran and one more: the base's is measured again, then nothing to compare; the head's
    is the change's error."""
    project, case, other = sticky_context, "sleepy-tiny-baseline", "sleepy-tiny-bf16"
    base, head = _sides(tmp_path, project, sticky_family(faults_after=5), sticky_family())
    jobs: list[tuple[Job, str | None]] = []
    rows: list[list[CaseResult]] = []

    def run(cmd, env, **kw):  # each worker a fresh process, its job and results kept
        jobs.append((Job.read(Path(cmd[-1])), env.get("CUDA_LAUNCH_BLOCKING")))
        _fresh_worker(project, Path(cmd[-1]))
        rows.append(read_results(jobs[-1][0].out))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(ab_run.subprocess, "run", run)
    result = ab_run.run_interleaved(base, head, [case, other], Policy(), max_processes=3, case_budget_s=0.2)
    (lost, *after) = rows[0]
    assert not after  # the next case has no row (its verdict is not an error): it runs in the next process
    assert isinstance(lost, NotMeasured) and lost.context_lost and lost.side != "head" and not lost.raised, lost
    assert lost.error == f"base: RuntimeError: {STICKY}" and lost.calls == 5  # the base's own sync said so
    alone = [(job.alone, job.steps, blocking) for job, blocking in jobs[1:3]]
    assert alone == [("base", 6, "1"), ("head", 6, "1")]  # fresh, one side each, the pair's steps and one
    assert [type(r[0]).__name__ for r in rows[1:3]] == ["RanAlone", "RanAlone"]
    assert (rows[1][0].error, rows[2][0].error) == (f"RuntimeError: {STICKY}", None)
    assert jobs[3][0].cases == [case, other] and jobs[3][0].alone is None  # measured again: both cases
    verdict = {v.case.split("[")[1].rstrip("]"): v for v in result.verdicts if v.metric == "run"}
    assert set(verdict) == {case}  # the other case was never an error
    assert verdict[case].verdict == gate.INCONCLUSIVE and gate.failing(result.verdicts) == []
    assert verdict[case].message == (
        f"base failed it in 2 process(es) (RuntimeError: {STICKY}); the head ran it: nothing to compare"
    )
    assert any(isinstance(r, Measured) for r in result.interleaved[other])

    # The head's sticky fault: the change's error, the base having run alone as many steps.
    base, head = _sides(tmp_path, project, sticky_family(), sticky_family(faults_after=5))
    jobs.clear()
    rows.clear()
    (v,) = ab_run.run_interleaved(base, head, [case], Policy(), max_processes=3, case_budget_s=0.2).verdicts
    assert (v.verdict, v.metric) == (gate.ERROR, "run") and v.message.startswith(f"head: RuntimeError: {STICKY}")
    assert [(job.alone, job.steps) for job, _ in jobs] == [(None, 0), ("base", 6), ("head", 6)]


@pytest.mark.parametrize("faults_after", [3, 20])  # in the warm-up, in the timed rounds
def test_an_asynchronous_fault_lands_on_the_side_that_launched_it(tmp_path: Path, sticky_context, faults_after) -> None:
    """A fault that is not sticky but asynchronous is raised by the next sync, not by the launch:
    each warm-up call is followed by a sync of its side's, and the timer's syncs are the timed side's,
    so the base's fault is the base's (not the head's next call's, nor untagged, an error at once)."""
    from perfgate.ab import interleave

    project, case = sticky_context, "sleepy-tiny-baseline"
    base, _ = _sides(tmp_path, project, sticky_family(faults_after=faults_after, sticky=False), sticky_family())
    out = tmp_path / "out.json"
    Job(base=base.root, head=project, out=out, cases=[case], device="cpu", budget_s=0.2).write(tmp_path / "j")
    assert interleave.main([str(tmp_path / "j")]) == 0
    (row,) = read_results(out)
    assert isinstance(row, NotMeasured) and (row.side, row.raised, row.context_lost) == ("base", True, False), row
    assert row.error == f"base: RuntimeError: {STICKY}"


def test_a_worker_that_dies_keeps_the_cases_it_finished(tmp_path: Path) -> None:
    """The worker writes its results after every case: one killed in its second case (os._exit, as a
    CUDA abort or the OOM killer) leaves the first case's row, and the driver measures the second
    again in its next process rather than stopping the A/B; a worker that dies in its first case
    wrote nothing, and that is one line."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.perfgate]\nmodel_files = ["sleepy_ab.py"]\n')
    (project / "sleepy_ab.py").write_text(  # the third model built in a process (its second case) kills it
        SLEEPY.format(sleep=0.0)
        .replace("import time", "import os\nimport sys\nimport time")
        .replace(
            "self.w = nn.Parameter(torch.ones(4))",
            "self.w = nn.Parameter(torch.ones(4))\n        built = sys.__dict__.setdefault('sleepy_built', [])\n"
            "        built.append(1)\n        if len(built) > int(os.environ.get('SLEEPY_BUILDS', 2)): os._exit(3)",
        )
    )
    side = ab_run.Side(name="head", label="h", sha="1" * 40, root=project, cache=None)
    cases = ["sleepy-tiny-baseline", "sleepy-tiny-bf16"]
    result = ab_run.run_interleaved(
        side, side, cases, Policy(), max_processes=1, case_budget_s=0.2, device="cpu", harness=ROOT
    )
    first, second = (result.interleaved[c] for c in cases)
    assert len(first) == 1 and isinstance(first[0], Measured)
    assert second == [NotMeasured(case=cases[1], error=second[0].error)]
    assert second[0].error.startswith("no result: the worker exited 3")
    (v,) = [v for v in result.verdicts if v.case.endswith(f"[{cases[1]}]")]
    assert v.verdict == gate.INCONCLUSIVE  # not measured, not the change's error
    with pytest.raises(ab_run.ABError, match="the interleaved measurement failed"):
        ab_run.run_interleaved(
            side, side, cases, Policy(), max_processes=1, device="cpu", harness=ROOT, env={"SLEEPY_BUILDS": "0"}
        )


def test_a_base_that_fails_late_is_the_bases_not_both(tmp_path: Path, monkeypatch, in_process_project) -> None:
    """A base that raises from its 106th call on (a leak the change fixes), alone too: alone, each side
    runs as many steps as the pair did (bounded by time, not by a count: 100 used to stop it short
    and call it both sides' error); a side whose time ran out first is not attributable (measured
    again, then nothing to compare), never both sides' error."""
    from perfgate.ab import interleave
    from perfgate.ab.job import RanAlone, blame

    project, case = in_process_project, "sleepy-tiny-baseline"
    late = SLEEPY.format(sleep=0.0).replace(
        "return x * self.w",
        "self.calls = getattr(self, 'calls', 0) + 1\n        "
        "if self.calls > 105: raise RuntimeError('CUDA out of memory (a leak)')\n        return x * self.w",
    )  # 50 rounds at least: 105 calls are always reached
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "sleepy_ab.py").write_text(late)
    out = tmp_path / "out.json"
    Job(base=tmp_path / "base", head=project, out=out, cases=[case], device="cpu", budget_s=0.2).write(tmp_path / "j")
    assert interleave.main([str(tmp_path / "j")]) == 0
    (row,) = read_results(out)
    assert isinstance(row, NotMeasured) and (row.raised, row.side) == (True, "base"), row
    assert row.error == "base: RuntimeError: CUDA out of memory (a leak)"

    ran = {"head": RanAlone(case=case, side="head", steps=861), "base": RanAlone(case=case, side="base", steps=300)}
    short = blame(case, "RuntimeError: oom", ran, 861, "each ran alone")
    assert (short.side, short.raised) == ("base", True)  # measured again, then nothing to compare
    assert short.error == (
        "RuntimeError: oom (not attributable: alone, the base ran 300 and the head 861 of 861 steps in the "
        "time the pair took)"
    )
    ran["base"] = RanAlone(case=case, side="base", steps=861)
    assert blame(case, "RuntimeError: oom", ran, 861, "each ran alone").side == "both"


def test_a_change_to_the_locks_is_said_unmeasured_unless_the_base_has_its_own_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sides' processes run one interpreter unless --base-python names the base's: a pull request
    that bumps a pin (requirements/) is measured on the new pins both sides, and says so."""
    from perfgate.cli import EXIT_BAD_INPUT, main
    from perfgate.commands import ab as ab_cmd

    repo = _project(tmp_path)
    (repo / "requirements").mkdir()
    (repo / "requirements" / "gpu.txt").write_text("torch==2.11.0\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "locks")
    sha = _git(repo, "rev-parse", "HEAD").strip()
    base, head = ab_run.checkout(repo, "HEAD", "base"), ab_run.working_tree(repo)
    assert ab_run.environment_note(repo, sha, None, base, head) is None  # nothing changed
    (repo / "requirements" / "gpu.txt").write_text("torch==2.12.0\n")
    note = ab_run.environment_note(repo, sha, None, base, head)
    assert note and "requirements/gpu.txt" in note and "--base-python" in note
    own = tmp_path / "base-python"
    own.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "base-python.log"}\nexec {sys.executable} "$@"\n')
    own.chmod(0o755)
    assert ab_run.environment_note(repo, sha, None, replace(base, python=str(own)), head) is None
    # the base's processes run through it: collecting its cases is one
    assert ab_run.collect(replace(base, python=str(own)), ["--perfgate-device", "cpu"]) == ab_run.collect(
        base, ["--perfgate-device", "cpu"]
    )
    assert "--collect-only" in (tmp_path / "base-python.log").read_text()
    # a --base-python that cannot run, or has no pytest, is one line naming the option, before anything runs
    with pytest.raises(ab_cmd.CommandError, match=r"--base-python \S*none: cannot run it"):
        ab_cmd.base_python(str(tmp_path / "none"))
    with pytest.raises(ab_cmd.CommandError, match="--base-python /bin/false: `import pytest` failed"):
        ab_cmd.base_python("/bin/false")
    monkeypatch.chdir(tmp_path)  # a relative path is made absolute: the base's processes start in its worktree
    assert ab_cmd.base_python("./base-python") == str(own) and ab_cmd.base_python("python3") == "python3"
    monkeypatch.chdir(repo)
    assert main(["ab", "--base-python", "/bin/false", "--", "--perfgate-device", "cpu"]) == EXIT_BAD_INPUT


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_base_is_refused_not_read_as_the_merge_base(given: str, monkeypatch, capsys) -> None:
    """A script's empty variable (`--base "$BASE"` where committing the base failed) compared the
    merge base unsaid; it is one line naming the option, before anything runs."""
    from perfgate.cli import EXIT_BAD_INPUT, main

    monkeypatch.setattr(ab_run, "default_base", lambda repo: pytest.fail("read as no --base"))
    assert main(["ab", "--base", given, "--", "--perfgate-device", "cpu"]) == EXIT_BAD_INPUT
    assert "--base is empty: give a revision" in capsys.readouterr().err


def test_a_side_process_that_runs_past_its_limit_is_that_sides_failure(tmp_path: Path, monkeypatch) -> None:
    """A hung process was a traceback that lost every verdict of the A/B; now its cases fail on that
    side (a base's is measured again, a head's is an error), and a hung collect is one line."""

    def hangs(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(ab_run.subprocess, "run", hangs)
    side = ab_run.Side(name="base", label="b", sha="2" * 40, root=tmp_path, cache=tmp_path / "cache")
    got = ab_run.measure(side, ["m-tiny-baseline"], [], timeout_s=60)
    assert got.failed == {"m-tiny-baseline": "base process ran past 60 s and was stopped"} and not got.records
    with pytest.raises(ab_run.ABError, match=r"^base \(b\): collecting the cases ran past 600 s$"):
        ab_run.collect(side, [])


def test_told_to_stop_mid_pair_keeps_what_was_decided_and_reads_no_failure(tmp_path: Path) -> None:
    """A CI step's limit (`timeout`) sends SIGTERM to perfgate ab and the processes it measures: the
    pair cut short is dropped, not read as the killed processes' failures (the head's would be an
    error), the comparison says why it stopped, and what it decided before is kept."""
    import signal

    from perfgate.commands import ab as ab_cmd
    from perfgate.record import CaseRecord

    before = signal.getsignal(signal.SIGTERM)
    with ab_cmd._told_to_stop() as told:
        calls = [0]

        def measure_fn(side, cases):
            calls[0] += 1
            if calls[0] > 2:  # the second pair: the signal reaches perfgate ab and both processes, which die of it
                os.kill(os.getpid(), signal.SIGTERM)
                return ab_run.SideRun(failed={c: f"{side.name} process (exit -15) left no result" for c in cases})
            return ab_run.SideRun(records={c: CaseRecord(model="m", variant="baseline", device="cpu", median_ms=10.0,
                                                         samples_ms=[10.0] * 12) for c in cases})  # fmt: skip

        side = {n: ab_run.Side(name=n, label=n, sha=str(i) * 40, root=tmp_path, cache=None)
                for i, n in enumerate(("base", "head"))}  # fmt: skip
        result = ab_run.run_ab(side["base"], side["head"], ["m-tiny-baseline"], Policy(), measure_fn=measure_fn,
                               max_pairs=8, seed=0, told_to_stop=told)  # fmt: skip
    assert signal.getsignal(signal.SIGTERM) is before  # put back once the comparison ends
    assert result.stopped == "stopped by SIGTERM" and result.processes == 4
    assert len(result.pairs["m-tiny-baseline"]) == 1 and not result.failed
    assert [v.verdict for v in result.verdicts] != [] and gate.ERROR not in {v.verdict for v in result.verdicts}

    # interleaved mode: the worker killed with it wrote nothing, which is not "the measurement failed"
    from perfgate.ab.job import write_results

    workers = [0]

    def worker(cmd, **kw):
        workers[0] += 1
        job = Job.read(Path(cmd[-1]))
        if workers[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            return subprocess.CompletedProcess(cmd, -15, "", "")
        write_results(job.out, [Measured(case=c, ratio=1.0, rounds=9, median_base_ms=10.0, median_head_ms=10.0,
                                         contention_cores=0.0, accuracy_base={}, accuracy_head={}, device="cpu",
                                         model="m", variant="baseline") for c in job.cases])  # fmt: skip
        return subprocess.CompletedProcess(cmd, 0, "", "")

    with ab_cmd._told_to_stop() as told:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ab_run.subprocess, "run", worker)
            result = ab_run.run_interleaved(side["base"], side["head"], ["m-tiny-baseline"], Policy(), max_processes=6,
                                            told_to_stop=told)  # fmt: skip
    rows = result.interleaved["m-tiny-baseline"]
    assert (result.stopped, result.processes, len(rows)) == ("stopped by SIGTERM", 2, 1)
