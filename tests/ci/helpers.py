"""What the tests of the workflows, their scripts and the deployment share: the project's paths, the
smallest real benchmark selection, running a script as a workflow step would (this Python, no venv,
no GitHub variables) and a fake `gh` that records its calls and keeps one pull request's comments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
WORKFLOWS = ROOT / ".github" / "workflows"
DEPLOY = ROOT / "deploy"
MARKER = "<!-- perfgate -->"
BOT = "github-actions[bot]"  # the login of comments made with a workflow's own token
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
    if "PERFGATE_NO_COUNTS" in os.environ:  # set by tests/conftest.py for tests not marked `counts`
        env["PERFGATE_NO_COUNTS"] = os.environ["PERFGATE_NO_COUNTS"]
    env.update(
        PERFGATE_SKIP_INSTALL="1",
        PERFGATE_PYTHON=sys.executable,
        PERFGATE_INDUCTOR_CACHE=str(tmp_path / "inductor"),
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        FAKE_GH_STATE=str(tmp_path / "gh-state.json"),
    )
    if "PYTHONPATH" in extra:  # in front of the inherited path: this Python's packages stay importable
        extra["PYTHONPATH"] = os.pathsep.join(filter(None, [extra["PYTHONPATH"], env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run(
    cmd: list[str], env: dict[str, str], cwd: Path = ROOT, timeout: float = HANG_GUARD_S
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


FAKE_GH = r'''#!{python}
"""A stand-in for the GitHub CLI: records each call and keeps one pull request's comments in a JSON
file; a comment it creates is FAKE_GH_LOGIN's (default github-actions[bot]), as GitHub records the
token's user."""
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
    if method == "GET" and "/pulls/" in path:  # the pull request, as GitHub's API gives it
        number = path.rsplit("/", 1)[1]
        if number not in state.get("pulls", {}):
            sys.exit(f"gh: HTTP 404: Not Found ({path})")
        print(json.dumps(state["pulls"][number]))
    elif method == "GET" and path.endswith("/pulls"):  # the list, filtered as GitHub filters it
        assert "--paginate" in args and "--slurp" in args, args
        query = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-f")
        listed = list(state.get("pulls", {}).values())
        if state.get("filtered", True):  # False: every pull request, as a filter GitHub ignored
            user, _, ref = query.get("head", "").partition(":")
            listed = [
                p for p in listed
                if p["state"] == query.get("state", "open")
                and p["base"]["ref"] == query.get("base", p["base"]["ref"])
                and (p["head"]["repo"]["full_name"].split("/")[0], p["head"]["ref"]) == (user, ref)
            ]
        print(json.dumps([listed[i:i + 2] for i in range(0, len(listed), 2)] or [[]]))
    elif method == "GET":  # --paginate --slurp: one JSON array of pages, two comments a page
        assert "--paginate" in args and "--slurp" in args, args
        print(json.dumps([comments[i:i + 2] for i in range(0, len(comments), 2)] or [[]]))
    elif method == "POST":
        login = os.environ.get("FAKE_GH_LOGIN", "github-actions[bot]")
        comments.append({"id": 9000 + len(comments), "user": {"login": login}, "body": body()})
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


def install_fake_gh(
    tmp_path: Path, comments: list[dict] | None = None, pulls: dict | None = None, filtered: bool = True
) -> Path:
    """Put the fake `gh` on tmp_path/bin; returns the state file (calls, comments, pr_body).
    `pulls`: number (a string) -> what GET repos/OWNER/REPO/pulls/N returns (and GET .../pulls lists);
    `filtered` False: GET .../pulls lists them all, whatever its query (GitHub ignores a `head`
    filter it cannot read), so that what pr-comment checks itself is tested."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    gh = tmp_path / "bin" / "gh"
    gh.write_text(FAKE_GH.replace("{python}", sys.executable))
    gh.chmod(0o755)
    state = tmp_path / "gh-state.json"
    state.write_text(json.dumps({"calls": [], "comments": comments or [], "pulls": pulls or {}, "filtered": filtered}))
    return state


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


def project_copy_with_origin(tmp_path: Path, env: dict[str, str]) -> Path:
    """project_copy() as a git repository on `main`, pushed to a bare `origin`."""
    return on_main_with_origin(project_copy(tmp_path), tmp_path / "origin.git", env)


def on_main_with_origin(repo: Path, origin: Path, env: dict[str, str]) -> Path:
    """`repo`'s files committed on `main` and pushed to a bare `origin` there."""
    for cmd in (
        ["git", "init", "-q", "--bare", str(origin)],
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "main"],
        ["git", "remote", "add", "origin", str(origin)],
        ["git", "push", "-q", "origin", "main"],
    ):
        subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    return repo


FAKE_PYTHON = r'''#!{python}
"""This Python as PERFGATE_PYTHON, except for the calls that would measure: `-m perfgate ab`,
`-m perfgate health` and `-m pytest` only record their arguments (a JSON line each in
FAKE_PYTHON_CALLS); perfgate ab writes FAKE_AB_RESULT as its --json and a heading as its --markdown."""
import json, os, sys

args = sys.argv[1:]
if args[:3] in (["-m", "perfgate", "ab"], ["-m", "perfgate", "health"]) or args[:2] == ["-m", "pytest"]:
    with open(os.environ["FAKE_PYTHON_CALLS"], "a") as fh:
        fh.write(json.dumps(args) + "\n")
    if args[:3] == ["-m", "perfgate", "ab"]:
        result = os.environ.get("FAKE_AB_RESULT", '{"processes": 2, "wall_s": 1.0, "pairs": {}, "verdicts": []}')
        with open(args[args.index("--json") + 1], "w") as fh:
            fh.write(result)
        with open(args[args.index("--markdown") + 1], "w") as fh:
            fh.write("### perfgate ab: no regression\n")
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *args])
'''


def git_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """script_env() with git's identity and configuration its own (no user's or system's settings)."""
    (tmp_path / "gitconfig").write_text("")
    return script_env(
        tmp_path,
        GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Perf Gate",
        GIT_AUTHOR_EMAIL="perfgate@example.com",
        GIT_COMMITTER_NAME="Perf Gate",
        GIT_COMMITTER_EMAIL="perfgate@example.com",
        **extra,
    )


def fake_python_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """git_env() with FAKE_PYTHON as PERFGATE_PYTHON."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    python = tmp_path / "bin" / "fake-python"
    python.write_text(FAKE_PYTHON.replace("{python}", sys.executable))
    python.chmod(0o755)
    return git_env(tmp_path, PERFGATE_PYTHON=str(python), FAKE_PYTHON_CALLS=str(tmp_path / "calls.jsonl"), **extra)


def fake_python_calls(tmp_path: Path) -> list[list[str]]:
    """The measuring calls FAKE_PYTHON recorded, in order."""
    calls = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def scripts_repo_with_origin(tmp_path: Path, env: dict[str, str]) -> Path:
    """A repository holding only scripts/ (perfgate itself is this Python's) on `main`, pushed to a
    bare `origin`: enough for scripts/ci-benchmark with FAKE_PYTHON."""
    repo = tmp_path / "repo"
    shutil.copytree(SCRIPTS, repo / "scripts")
    return on_main_with_origin(repo, tmp_path / "origin.git", env)
