"""scripts/history-store as history.yml runs it: in a clone of a repository (here a local bare
origin), a real run's artifact validated and committed to perfgate-history, then pushed; a run of a
commit that is not on main refused with nothing pushed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.ci.helpers import ROOT, SCRIPTS, run, script_env
from tests.helpers import counted_run

RUN = sorted((ROOT / "tests" / "data" / "history-step").glob("*/0001_*.json"))[0]


def git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def _artifact(folder: Path, commit: str) -> Path:
    """The real CPU run as if it had measured `commit` (the job measures the commit it checked out),
    counted as benchmark-cpu's main run counts it (a CPU run is kept only with its counts)."""
    counted_run(folder / "results.json", commit=commit)
    return folder


def test_a_main_run_is_kept_on_the_data_branch_and_a_side_run_is_refused(tmp_path):
    project, origin, clone, first = _project_with_origin(tmp_path, "history-store", "_venv.sh")
    env = script_env(tmp_path, PERFGATE_STORE_DEVICE="cpu", PERFGATE_PYTHON=sys.executable)
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    cmd = [str(clone / "scripts" / "history-store"), str(_artifact(tmp_path / "a1", first))]
    r = run([*cmd, "--commit", first, "--tier", "pr", "--push"], env, cwd=clone)
    assert r.returncode == 0, r.stderr
    fp_id = json.loads(RUN.read_text())["perfgate"]["fingerprint_id"]
    listed = git(origin, "ls-tree", "-r", "--name-only", "perfgate-history")
    assert listed == f"{fp_id}/0001_{first[:12]}-pr.json"
    # A second main commit adds the next file; history on the branch is linear.
    git(project, "commit", "-q", "--allow-empty", "-m", "two")
    git(project, "push", "-q", str(origin), "main")
    second = git(project, "rev-parse", "HEAD")
    cmd2 = [str(clone / "scripts" / "history-store"), str(_artifact(tmp_path / "a2", second))]
    r = run([*cmd2, "--commit", second, "--tier", "pr", "--push"], env, cwd=clone)
    assert r.returncode == 0, r.stderr
    assert (
        git(origin, "ls-tree", "-r", "--name-only", "perfgate-history")
        .splitlines()[1]
        .startswith(f"{fp_id}/0002_{second[:12]}")
    )
    # A commit only on a side branch: refused by the validation, nothing committed or pushed.
    git(project, "checkout", "-q", "-b", "side")
    git(project, "commit", "-q", "--allow-empty", "-m", "side")
    git(project, "push", "-q", str(origin), "side")
    side = git(project, "rev-parse", "HEAD")
    before = git(origin, "rev-parse", "perfgate-history")
    cmd3 = [str(clone / "scripts" / "history-store"), str(_artifact(tmp_path / "a3", side))]
    r = run([*cmd3, "--commit", side, "--tier", "pr", "--push"], env, cwd=clone)
    assert r.returncode == 4 and f"commit {side} is not on origin/main" in r.stderr
    assert git(origin, "rev-parse", "perfgate-history") == before


def _project_with_origin(tmp_path: Path, *scripts: str) -> tuple[Path, Path, Path, str]:
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    for name in scripts:
        shutil.copy2(SCRIPTS / name, project / "scripts" / name)
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "one")
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(project), str(origin)], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    return project, origin, clone, git(clone, "rev-parse", "HEAD")


def test_history_yml_two_jobs_bundle_then_push_only_store_files(tmp_path):
    """history.yml's split: `validate` commits and bundles (no push), `push` (another machine: a
    fresh clone) checks the bundle with git alone and pushes; a bundle whose commit touches anything
    but run files, or is not on top of origin's branch, is refused with nothing pushed."""
    _, origin, clone, first = _project_with_origin(tmp_path, "history-store", "history-push", "_venv.sh")
    env = script_env(tmp_path, PERFGATE_STORE_DEVICE="cpu", PERFGATE_PYTHON=sys.executable)
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    out = tmp_path / "github-output"
    bundle = tmp_path / "b" / "commit.bundle"
    cmd = [str(clone / "scripts" / "history-store"), str(_artifact(tmp_path / "a1", first))]
    r = run(
        [*cmd, "--commit", first, "--tier", "pr", "--bundle", str(bundle)],
        {**env, "GITHUB_OUTPUT": str(out)},
        cwd=clone,
    )
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "kept=true\n" and bundle.is_file()
    assert "perfgate-history" not in git(origin, "branch", "--list")  # nothing pushed by the validating job

    def pusher_checkout(name: str) -> Path:  # the push job: its own checkout, main's tip alone (as actions/checkout)
        folder = tmp_path / name
        cmd = [
            "git",
            "clone",
            "-q",
            "--depth",
            "1",
            "--single-branch",
            "--branch",
            "main",
            origin.as_uri(),
            str(folder),
        ]
        subprocess.run(cmd, check=True)
        return folder

    pusher = pusher_checkout("pusher")
    r = run([str(pusher / "scripts" / "history-push"), str(bundle)], env, cwd=pusher)
    assert r.returncode == 0, r.stderr
    fp_id = json.loads(RUN.read_text())["perfgate"]["fingerprint_id"]
    assert git(origin, "ls-tree", "-r", "--name-only", "perfgate-history") == f"{fp_id}/0001_{first[:12]}-pr.json"

    # A compromised validating job: its commit adds a script beside a run file. Refused.
    git(clone, "fetch", "-q", "origin", "perfgate-history:refs/remotes/origin/perfgate-history")
    store = clone / ".perfgate" / "history"
    (store / "evil.sh").write_text("echo pwned\n")
    git(store, "add", "-A")
    git(store, "commit", "-qm", "evil")
    hostile = tmp_path / "hostile.bundle"
    git(store, "bundle", "create", "-q", str(hostile), "origin/perfgate-history..perfgate-history")
    pusher = pusher_checkout("pusher-2")  # the next run's push job
    r = run([str(pusher / "scripts" / "history-push"), str(hostile)], env, cwd=pusher)
    assert r.returncode == 4 and "touches evil.sh" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    # The same bundle again (origin's tip moved past its parent): refused, not force-pushed.
    r = run([str(pusher / "scripts" / "history-push"), str(bundle)], env, cwd=pusher)
    assert r.returncode == 4 and "not origin's perfgate-history tip" in r.stderr, r.stderr
    assert git(origin, "ls-tree", "-r", "--name-only", "perfgate-history") == f"{fp_id}/0001_{first[:12]}-pr.json"


def test_an_artifact_without_results_json_keeps_nothing_and_says_so_in_one_line(tmp_path):
    """A run that wrote no results.json (an A/B run by hand: ab.json and summary.md; a failed health
    check or a pytest that stopped before the gate: the summary alone): exit 0, one line, `kept=false`,
    no bundle, nothing committed or pushed, so history.yml stays green and stores nothing half-made."""
    _, origin, clone, first = _project_with_origin(tmp_path, "history-store", "_venv.sh")
    env = script_env(tmp_path, PERFGATE_STORE_DEVICE="cpu", PERFGATE_PYTHON=sys.executable)
    for name, files in {"ab": ["ab.json", "summary.md", "ab.log"], "health": ["summary.md"]}.items():
        artifact = tmp_path / name
        artifact.mkdir()
        for f in files:
            (artifact / f).write_text("{}\n")
        out, bundle = tmp_path / f"{name}-output", tmp_path / name / "b" / "commit.bundle"
        cmd = [str(clone / "scripts" / "history-store"), str(artifact), "--commit", first, "--tier", "pr"]
        r = run([*cmd, "--bundle", str(bundle)], {**env, "GITHUB_OUTPUT": str(out)}, cwd=clone)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == [
            f"history-store: {artifact} has no results.json (an A/B run, or one stopped before the gate): nothing kept"
        ]
        assert out.read_text() == "kept=false\n" and not bundle.exists()
    assert not (clone / ".perfgate").exists()
    assert "perfgate-history" not in git(origin, "branch", "--list")
