"""The workflows are safe for pull requests from forks on a self-hosted GPU runner (docs/gpu-runner.md,
"Who may run code on the runner"): properties of the YAML as GitHub reads it, then the two scripts
that carry data across the trust boundary (scripts/pr-comment from a run's artifact, and
scripts/record-baselines --from), run here with a fake `gh`.

The YAML properties, each a test below:
1. no workflow with a self-hosted job is started by `pull_request` (GitHub would take the workflow
   file from the pull request, which could delete any guard in it);
2. every workflow declares its token's permissions, read-only or none at the top;
3. a job on a self-hosted runner may read the repository's contents and nothing else, and names
   no secret and no token;
4. a job whose token can write runs on a GitHub-hosted runner and checks out the workflow's own
   revision, never a pull request's;
5. every checkout leaves no credentials in git's config;
6. in a `pull_request_target` workflow every job either never runs for that event or waits for a
   maintainer in the protected environment, and then checks out exactly the approved commit; that
   job is the only one that lifts actions/checkout's guard against a fork's code;
7. the jobs that run a pull request's code and the jobs that run the repository's own (the ones
   recording baselines included) keep their environment, inductor and download caches in disjoint
   folders, and no Actions cache is used where a pull request's code runs or writes go to the base
   branch's cache;
8. no `${{ }}` expression inside a `run:` (untrusted text goes through the environment);
9. the comment workflow runs from the default branch on `workflow_run` of benchmark-gpu's
   pull-request runs only, with the fewest permissions, and feeds scripts/pr-comment only the run's
   title and artifact, the title in the format benchmark-gpu's run-name writes;
10. every action is pinned to a commit (its release in a comment), and Dependabot updates the pins.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_workflows import SCRIPTS, SMALLEST, install_fake_gh, project_copy_with_origin, run, script_env, tool

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
PR_ENVIRONMENT = "gpu-pull-request"
CACHE_VARS = ("PERFGATE_VENV", "PERFGATE_INDUCTOR_CACHE", "XDG_CACHE_HOME")
ONLY_OTHER_EVENTS = "github.event_name != 'pull_request_target'"
ONLY_PULL_REQUESTS = "github.event_name == 'pull_request_target'"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


ALL = {p.name: load(p) for p in sorted(WORKFLOWS.glob("*.yml"))}


def triggers(wf: dict[str, Any]) -> set[str]:
    on = wf["on"]
    return {on} if isinstance(on, str) else set(on)


def jobs(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return wf["jobs"]


def self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job["runs-on"]
    return "self-hosted" in (runs_on if isinstance(runs_on, list) else [runs_on])


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if str(s.get("uses", "")).startswith(f"{action}@")]


def grants(job: dict[str, Any], wf: dict[str, Any]) -> dict[str, str]:
    """The job's token permissions: its own block, else the workflow's."""
    perms = job.get("permissions", wf.get("permissions"))
    assert isinstance(perms, dict), f"permissions {perms!r}: name each scope (no read-all/write-all)"
    return perms


def all_jobs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(f"{name}:{job_id}", job, wf) for name, wf in ALL.items() for job_id, job in jobs(wf).items()]


def cache_dirs(job: dict[str, Any]) -> dict[str, str]:
    """The cache folders a job's steps see (job env, then each step's)."""
    env = dict(job.get("env", {}))
    for step in job.get("steps", []):
        env.update({k: v for k, v in step.get("env", {}).items() if k in CACHE_VARS})
    return {k: env[k] for k in CACHE_VARS if k in env}


def nested(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


# --- the YAML ------------------------------------------------------------------------------------


def test_the_workflows_are_the_ones_this_test_knows() -> None:
    assert set(ALL) == {"benchmark-gpu.yml", "pr-comment.yml", "record-baselines.yml", "tests.yml"}


def test_1_no_self_hosted_job_in_a_workflow_a_pull_request_can_edit() -> None:
    for name, wf in ALL.items():
        if any(self_hosted(j) for j in jobs(wf).values()):
            assert not triggers(wf) & {"pull_request", "pull_request_review", "pull_request_review_comment"}, name


def test_2_every_workflow_sets_its_token_read_only_or_none() -> None:
    for name, wf in ALL.items():
        assert "permissions" in wf, f"{name}: no top-level permissions (the default token may write)"
        assert wf["permissions"] in ({}, {"contents": "read"}), f"{name}: {wf['permissions']}"


def test_3_self_hosted_jobs_read_contents_only_and_touch_no_secret() -> None:
    gpu_jobs = [(where, job, wf) for where, job, wf in all_jobs() if self_hosted(job)]
    assert {where for where, *_ in gpu_jobs} == {
        "benchmark-gpu.yml:benchmark",
        "benchmark-gpu.yml:benchmark-pr",
        "record-baselines.yml:record",
    }
    for where, job, wf in gpu_jobs:
        assert "permissions" in job, where
        assert grants(job, wf) == {"contents": "read"}, where
        text = yaml.safe_dump(job)
        assert "secrets." not in text and "github.token" not in text, where


def test_4_write_tokens_only_on_github_hosted_runners_at_the_workflows_own_revision() -> None:
    writers = [(where, job, wf) for where, job, wf in all_jobs() if "write" in grants(job, wf).values()]
    assert {where for where, *_ in writers} == {"pr-comment.yml:comment", "record-baselines.yml:open-pr"}
    for where, job, _ in writers:
        assert job["runs-on"] == "ubuntu-latest", where
        for checkout in steps_using(job, "actions/checkout"):
            assert "ref" not in checkout.get("with", {}), f"{where} checks out another revision"


def test_5_every_checkout_persists_no_credentials() -> None:
    checkouts = [(where, s) for where, job, _ in all_jobs() for s in steps_using(job, "actions/checkout")]
    assert len(checkouts) == 6
    for where, step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False, where


def test_6_pull_request_code_runs_only_after_approval_and_only_the_approved_commit() -> None:
    targets = {name: wf for name, wf in ALL.items() if "pull_request_target" in triggers(wf)}
    assert set(targets) == {"benchmark-gpu.yml"}
    wf = targets["benchmark-gpu.yml"]
    assert wf["on"]["pull_request_target"]["branches"] == ["main"]
    gated = []
    for job_id, job in jobs(wf).items():
        if job.get("if") == ONLY_OTHER_EVENTS:
            continue
        assert job.get("if") == ONLY_PULL_REQUESTS, f"{job_id}: runs for pull requests without the approval"
        assert job.get("environment") == PR_ENVIRONMENT, f"{job_id}: no protected environment"
        (checkout,) = steps_using(job, "actions/checkout")
        assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}", job_id
        gated.append(job_id)
    assert gated == ["benchmark-pr"]
    # actions/checkout's guard against checking out a fork's code is lifted in that job alone.
    lifted = [
        where
        for where, job, _ in all_jobs()
        for step in steps_using(job, "actions/checkout")
        if step.get("with", {}).get("allow-unsafe-pr-checkout")
    ]
    assert lifted == ["benchmark-gpu.yml:benchmark-pr"]
    # The environment and the settings behind it are documented.
    docs = (ROOT / "docs" / "gpu-runner.md").read_text()
    for words in (f"`{PR_ENVIRONMENT}`", "Required reviewers", "Prevent self-review", "Require approval for all"):
        assert words in docs, words


def test_7_pull_requests_and_the_repositorys_own_runs_share_no_cache() -> None:
    bench, record = ALL["benchmark-gpu.yml"], ALL["record-baselines.yml"]
    own = {
        "benchmark-gpu.yml:benchmark": cache_dirs(jobs(bench)["benchmark"]),
        "record-baselines.yml:record": cache_dirs(jobs(record)["record"]),
    }
    pr = cache_dirs(jobs(bench)["benchmark-pr"])
    for where, dirs in [*own.items(), ("benchmark-gpu.yml:benchmark-pr", pr)]:
        assert set(dirs) == set(CACHE_VARS), f"{where} leaves a cache at its default (shared) place"
    # The repository's runs share theirs (recording reuses the benchmark's environment), never the PRs'.
    assert own["benchmark-gpu.yml:benchmark"] == own["record-baselines.yml:record"]
    for dirs in own.values():
        for ours in dirs.values():
            for theirs in pr.values():
                assert not nested(ours, theirs), (ours, theirs)
    # actions/cache: a pull_request_target run writes into the base branch's cache; a GPU job needs none.
    for where, job, wf in all_jobs():
        if self_hosted(job) or "pull_request_target" in triggers(wf):
            assert not steps_using(job, "actions/cache"), where


def test_8_no_expression_inside_a_run_step() -> None:
    for where, job, _ in all_jobs():
        for step in job.get("steps", []):
            assert "${{" not in str(step.get("run", "")), f"{where}: {step['run']}"


def test_9_the_comment_is_posted_by_the_default_branch_from_the_artifact() -> None:
    wf, bench = ALL["pr-comment.yml"], ALL["benchmark-gpu.yml"]
    assert wf["on"] == {"workflow_run": {"workflows": [bench["name"]], "types": ["completed"]}}
    assert wf["permissions"] == {}
    (job,) = jobs(wf).values()
    assert job["permissions"] == {"actions": "read", "contents": "read", "pull-requests": "write"}
    condition = " ".join(job["if"].split())
    assert "github.event.workflow_run.event == 'pull_request_target'" in condition
    assert "startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-gpu.yml')" in condition
    (download,) = steps_using(job, "actions/download-artifact")
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    pr_upload = [s["with"]["name"] for s in steps_using(jobs(bench)["benchmark-pr"], "actions/upload-artifact")]
    assert pr_upload == ["perfgate-pr-${{ matrix.gpu }}"] and download["with"]["pattern"] == "perfgate-pr-*"
    (comment,) = [s for s in job["steps"] if "run" in s]
    assert comment["run"].startswith('./scripts/pr-comment --run-title "$RUN_TITLE"')
    assert comment["env"]["RUN_TITLE"] == "${{ github.event.workflow_run.display_title }}"


def test_10_every_action_is_pinned_to_a_commit() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(- )?uses:", line):
                assert re.search(r"uses: [\w-]+/[\w-]+@[0-9a-f]{40}  # v\d+\.\d+\.\d+", line), f"{path.name}: {line}"
    dependabot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    assert {"package-ecosystem": "github-actions", "directory": "/", "schedule": {"interval": "weekly"}} in dependabot[
        "updates"
    ]


def test_zizmor_finds_nothing() -> None:
    """zizmor, the GitHub Actions security linter, offline (no GitHub API). The two triggers it always
    flags (pull_request_target, workflow_run) carry an ignore comment saying why they are safe here."""
    zizmor = tool("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed: pip install -e '.[dev]'")
    r = subprocess.run(
        [zizmor, "--offline", "--no-progress", str(WORKFLOWS)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No findings to report" in r.stdout + r.stderr


def pr_run_title(number: int, sha: str) -> str:
    """benchmark-gpu's run-name for a pull request, as GitHub's format() fills it in."""
    (template,) = re.findall(r"format\('(benchmark-gpu: pull request[^']*)'", ALL["benchmark-gpu.yml"]["run-name"])
    return template.replace("{0}", str(number)).replace("{1}", sha)


# --- scripts/pr-comment from a run's artifact ----------------------------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"


def artifact_from_ci_benchmark(tmp_path: Path, pr: str, head: str) -> tuple[Path, subprocess.CompletedProcess]:
    """What benchmark-pr uploads when the runner's GPU is unfit: scripts/ci-benchmark itself writes
    pull-request.json and the health summary (tests/fake_cuda: torch sees a GPU, NVML finds no driver)."""
    out = tmp_path / "perfgate-results" / "perfgate-pr-gpu"
    env = script_env(tmp_path, PYTHONPATH=str(ROOT / "tests" / "fake_cuda"), PERFGATE_PR=pr, PERFGATE_PR_HEAD=head)
    cuda = [a if a != "cpu" else "cuda:0" for a in SMALLEST]
    return out, run([str(SCRIPTS / "ci-benchmark"), "--out", str(out), *cuda], env)


def test_the_comment_goes_to_the_pull_request_the_run_measured(tmp_path: Path) -> None:
    out, r = artifact_from_ci_benchmark(tmp_path, "42", SHA)
    assert r.returncode == 5, r.stderr[-3000:]
    assert json.loads((out / "pull-request.json").read_text()) == {"pr": 42, "head_sha": SHA}
    state_file = install_fake_gh(tmp_path)
    env = script_env(tmp_path, GH_REPO="owner/repo")
    url = "https://github.com/owner/repo/actions/runs/7"
    results = str(out.parent)
    r = run([str(SCRIPTS / "pr-comment"), "--run-title", pr_run_title(42, SHA), "--run-url", url, results], env)
    assert r.returncode == 0, r.stderr
    state = json.loads(state_file.read_text())
    assert state["calls"][-1][1:4] == ["--method", "POST", "repos/{owner}/{repo}/issues/42/comments"]
    (body,) = [c["body"] for c in state["comments"]]
    assert "### perfgate: cannot run here: the runner's GPU failed 1 health check(s)" in body
    assert body.rstrip().endswith(
        f"<sub>[workflow run]({url}): job summaries, and the JSON, HTML report and traces as artifacts</sub>"
    )

    # The artifact names another pull request or commit than the run: no comment at all.
    for other in (pr_run_title(43, SHA), pr_run_title(42, "f" * 40)):
        r = run([str(SCRIPTS / "pr-comment"), "--run-title", other, results], env)
        assert r.returncode == 4 and "as the run does; no comment" in r.stderr, r.stderr
    # A title that is not benchmark-gpu's pull-request format: bad input, no comment.
    r = run([str(SCRIPTS / "pr-comment"), "--run-title", "benchmark-gpu: push on main at " + SHA, results], env)
    assert r.returncode == 4 and "is not the title of a pull-request run" in r.stderr
    assert len(json.loads(state_file.read_text())["calls"]) == len(state["calls"])


def test_an_artifact_without_its_pull_request_or_with_html_is_handled(tmp_path: Path) -> None:
    state_file = install_fake_gh(tmp_path)
    env = script_env(tmp_path, GH_REPO="owner/repo")
    job = tmp_path / "results" / "perfgate-pr-gpu"
    job.mkdir(parents=True)
    (job / "summary.md").write_text(
        "### perfgate: ok\n\n<!-- perfgate --><img src=x onerror=alert(1)> cc @octocat\n"
        "<details><summary>Other verdicts</summary>\n\n```\n<kept> @as-is\n```\n</details>\n"
    )
    r = run([str(SCRIPTS / "pr-comment"), "--run-title", pr_run_title(5, SHA), str(job.parent)], env)
    assert r.returncode == 4 and "no pull request named beside the summary" in r.stderr
    (job / "pull-request.json").write_text(json.dumps({"pr": "5", "head_sha": SHA}))  # a string, not a number
    r = run([str(SCRIPTS / "pr-comment"), "--run-title", pr_run_title(5, SHA), str(job.parent)], env)
    assert r.returncode == 4 and json.loads(state_file.read_text())["calls"] == []

    (job / "pull-request.json").write_text(json.dumps({"pr": 5, "head_sha": SHA}))
    r = run([str(SCRIPTS / "pr-comment"), "--run-title", pr_run_title(5, SHA), str(job.parent)], env)
    assert r.returncode == 0, r.stderr
    (body,) = [c["body"] for c in json.loads(state_file.read_text())["comments"]]
    assert body.count("<!-- perfgate -->") == 1 and body.startswith("<!-- perfgate -->")  # ours, the only marker
    assert "&lt;img src=x onerror=alert(1)>" in body and "<img" not in body
    assert "@&#8203;octocat" in body and "@octocat" not in body
    assert "<details><summary>Other verdicts</summary>" in body and "</details>" in body  # perfgate's own tags
    assert "```\n<kept> @as-is\n```" in body  # a code block shows text as it is


# --- scripts/record-baselines --from ---------------------------------------------------------------


def git_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "gitconfig").write_text("")
    return script_env(
        tmp_path,
        GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Perf Gate",
        GIT_AUTHOR_EMAIL="perfgate@example.com",
        GIT_COMMITTER_NAME="Perf Gate",
        GIT_COMMITTER_EMAIL="perfgate@example.com",
    )


@pytest.mark.slow
def test_record_on_one_machine_open_the_pull_request_from_another(tmp_path: Path) -> None:
    """The workflow's two jobs: `record` on the GPU runner (read-only token) and `open-pr` on a fresh
    checkout with the artifact (the only job that can push)."""
    env = git_env(tmp_path)
    state_file = install_fake_gh(tmp_path)
    copy = project_copy_with_origin(tmp_path, env)
    recorded = tmp_path / "artifact"
    r = run(["scripts/record-baselines", "--label", "gpu", "--out", str(recorded), *SMALLEST], env, cwd=copy)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (listed,) = (recorded / "new-baselines.txt").read_text().split()
    assert re.fullmatch(r"baselines/[^/]+/0001_gpu\.json", listed) and (recorded / "new" / listed).is_file()

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
    assert show.stdout.split() == [listed]
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
