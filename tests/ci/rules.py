"""The security rules of the workflows and the GPU fleet's deployment, as data: each rule is a pure
function of the set-up (the workflow files, deploy/github-settings.yml, the Helm values, the
Kubernetes manifests, the runner image's Dockerfile, the locks) that returns its problems, one line
each. tests/ci/test_workflow_security.py runs every rule on the real files (no problem allowed) and
on realistic mistakes made to them (each must be caught). docs/gpu-runner.md explains the why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAIN_SET, PR_SET = "perfgate-gpu-main", "perfgate-gpu-pr"
SCALE_SETS = (MAIN_SET, PR_SET)
PR_ENVIRONMENT = "gpu-pull-request"
MAIN_REF = "github.ref == 'refs/heads/main'"
NOT_PR_TARGET = "github.event_name != 'pull_request_target'"
ONLY_PR_TARGET = "github.event_name == 'pull_request_target'"
PR_HEAD = "${{ github.event.pull_request.head.sha }}"
FETCH_COMMIT = "perfgate-fetch-commit"  # scripts/fetch-commit as the runner image installs it
CHART_VERSION = "0.14.2"
# GitHub-hosted runner labels: any other runs-on is a self-hosted machine.
HOSTED = {
    "ubuntu-latest", "ubuntu-slim", "ubuntu-24.04", "ubuntu-22.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm",
    "windows-latest", "windows-2025", "windows-2022", "macos-latest", "macos-15", "macos-14",
}  # fmt: skip
# Triggers whose workflow file GitHub takes from the pull request (or a merge of it).
PR_EDITABLE = {"pull_request", "pull_request_review", "pull_request_review_comment", "merge_group"}
# The only job whose token may write, and what.
WRITES = {
    ("pr-comment.yml", "comment"): {"pull-requests"},
    ("pr-comment.yml", "comment-cpu"): {"pull-requests"},
    ("pages.yml", "deploy"): {"pages", "id-token"},  # GitHub's deploy-pages action, alone
}
HISTORY_SCRIPT = "scripts/history-store"  # validates the artifact (perfgate store add) before it commits
PAGES_ENVIRONMENT = "github-pages"
HISTORY_ENVIRONMENT = "perfgate-history"
HISTORY_BRANCH = "refs/heads/perfgate-history"
HISTORY_PUSH = "scripts/history-push"  # git only: checks the validated commit, then pushes it
# Environments without required reviewers (each main run would wait for one), held to less: main
# only, and their jobs run nothing but these actions and scripts.
UNREVIEWED_ENVIRONMENTS = {
    PAGES_ENVIRONMENT: ({"actions/deploy-pages"}, set()),
    HISTORY_ENVIRONMENT: (
        {"actions/checkout", "actions/download-artifact", "actions/create-github-app-token"},
        {HISTORY_PUSH},
    ),
}
# Actions that read or write the Actions cache: actions/cache itself, and setup actions with a
# `cache` input (setup-python, -node, -java, ...) or that cache unless told not to.
CACHE_ACTIONS = {"actions/cache", "actions/cache/restore", "actions/cache/save"}
CACHING_BY_DEFAULT = {"actions/setup-go": ("cache", False), "astral-sh/setup-uv": ("enable-cache", False)}
# The fleet's egress may never reach these: private ranges, the carrier-grade NAT range (cloud
# providers' internal addresses), link-local (the metadata endpoint).
PRIVATE_RANGES = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"}
# The Kubernetes API server's public address(es), as the network policies' annotation names them.
APISERVER_ANNOTATION = "perfgate.dev/kube-apiserver"
KUBE_DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
# Events that start a job on the trusted scale set: never one a pull request or a comment makes.
TRUSTED_EVENTS = {"push", "schedule", "workflow_dispatch"}
# The scripts that install (through scripts/_venv.sh), called or sourced anywhere in a run: step.
INSTALLING = re.compile(
    r"scripts/(?:test|ci-benchmark|ci-counts|record-baselines|bench|gpu-check|history-store|history-site|_venv\.sh)\b"
)
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
PINNED_USES = re.compile(r"(?:[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}|docker://[^@\s]+@sha256:[0-9a-f]{64}|\./.+)")
# Top-level keys of the gha-runner-scale-set and gha-runner-scale-set-controller charts' values.yaml
# at 0.14.2 (actions/actions-runner-controller, charts/*/values.yaml, commented keys included): the
# charts ship no values.schema.json, and Helm ignores an unknown (misspelt) key without a word.
SCALE_SET_KEYS = {
    "githubConfigUrl", "scaleSetLabels", "githubConfigSecret", "proxy", "maxRunners", "minRunners", "runnerGroup",
    "runnerScaleSetName", "githubServerTLS", "keyVault", "containerMode", "listenerTemplate", "listenerMetrics",
    "template", "controllerServiceAccount", "namespaceOverride", "annotations", "labels", "resourceMeta",
}  # fmt: skip
CONTROLLER_KEYS = {
    "labels", "replicaCount", "image", "imagePullSecrets", "nameOverride", "fullnameOverride", "env",
    "serviceAccount", "podAnnotations", "podLabels", "podSecurityContext", "securityContext", "resources",
    "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "volumes", "volumeMounts",
    "priorityClassName", "metrics", "pprof", "flags", "namespaceOverride",
}  # fmt: skip


@dataclass
class Setup:
    """Everything the rules read, loaded from the repository (tests mutate a copy)."""

    workflows: dict[str, dict[str, Any]]  # file name -> the YAML as GitHub reads it
    settings: dict[str, Any]  # deploy/github-settings.yml
    charts: dict[str, Any]  # deploy/arc/charts.yaml
    values: dict[str, dict[str, Any]]  # deploy/arc/*.yaml values file name -> values
    k8s: list[dict[str, Any]]  # every document of deploy/k8s/*.yaml
    dockerfile: str
    locks: dict[str, str] = field(default_factory=dict)  # requirements/*.txt path -> text


def load_workflow(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def load_setup(root: Path) -> Setup:
    deploy = root / "deploy"
    return Setup(
        workflows={
            p.name: load_workflow(p.read_text()) for p in sorted((root / ".github" / "workflows").glob("*.yml"))
        },
        settings=yaml.safe_load((deploy / "github-settings.yml").read_text()),
        charts=yaml.safe_load((deploy / "arc" / "charts.yaml").read_text()),
        values={
            p.name: yaml.safe_load(p.read_text())
            for p in sorted((deploy / "arc").glob("*.yaml"))
            if p.name != "charts.yaml"
        },
        k8s=[d for p in sorted((deploy / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d],
        dockerfile=(deploy / "runner-image" / "Dockerfile").read_text(),
        locks={str(p.relative_to(root)): p.read_text() for p in sorted((root / "requirements").glob("*.txt"))},
    )


# --- reading the YAML ----------------------------------------------------------------------------


def triggers(wf: dict[str, Any]) -> set[str]:
    on = wf.get("on") or {}
    return {on} if isinstance(on, str) else set(on)


def all_jobs(s: Setup) -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    for name, wf in s.workflows.items():
        for job_id, job in (wf.get("jobs") or {}).items():
            yield name, job_id, job, wf


def labels(job: dict[str, Any]) -> list[str]:
    runs_on = job.get("runs-on")
    if isinstance(runs_on, str):
        return [runs_on]
    if isinstance(runs_on, list):
        return [str(x) for x in runs_on]
    return [yaml.safe_dump(runs_on)]  # a group or an expression: not a hosted label


def hosted(job: dict[str, Any]) -> bool:
    return len(labels(job)) == 1 and labels(job)[0] in HOSTED


def scale_set(job: dict[str, Any]) -> str | None:
    return job.get("runs-on") if job.get("runs-on") in SCALE_SETS else None


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job.get("steps") or []


def uses(step: dict[str, Any], action: str) -> bool:
    return str(step.get("uses", "")).split("@")[0] == action


def conjuncts(condition: Any) -> list[str] | None:
    """An `if:` as its `&&`-joined terms, whitespace normalised; None when it has `||` outside
    parentheses or a `!(`, whose meaning a reader of the terms alone would get wrong. A parenthesised
    `(a || b)` is one term: every other term is still required."""
    if condition is None:
        return []
    text = " ".join(str(condition).replace("${{", "").replace("}}", "").split())
    if "!(" in text:
        return None
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith("||", i):
            return None
        if depth == 0 and text.startswith("&&", i):
            terms.append(text[start:i])
            start = i + 2
    return [t.strip() for t in [*terms, text[start:]]]


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[!()<>,])"
    r"|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_*][\w-]*)*))"
)
STATUS_FUNCTIONS = {"always", "success", "failure", "cancelled"}


class ExpressionError(ValueError):
    """An `if:` this reader cannot evaluate (a function or syntax it does not know)."""


def evaluate(condition: Any, context: dict[str, Any], status: dict[str, bool] | None = None) -> bool:
    """A job's or step's `if:` as GitHub evaluates it, for the values in `context` (a missing one is
    null) and the job statuses in `status` (success, failure, cancelled; always() is true). As on
    GitHub: no status function in it means `success() && (...)`; strings compare case-insensitively;
    `a || b` is a if truthy, else b. Only what the workflows here use: literals, context names,
    ! == != < > && || ( ), startsWith, endsWith, contains, format and the status functions."""
    status = {"success": True, "failure": False, "cancelled": False, **(status or {})}
    if condition is None:
        return status["success"]
    if isinstance(condition, bool):
        return status["success"] and condition
    text = str(condition).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    value, uses_status = _expression(text, context, status)
    result = _truthy(value)
    return result if uses_status else status["success"] and result


def interpolate(value: Any, context: dict[str, Any]) -> str:
    """A workflow value as GitHub writes it (an `env:` entry, a concurrency group): each `${{ }}` in
    it replaced by its expression's value as a string (null: empty; true and false; a whole number
    without a decimal point). An expression ends at the first `}}` outside a quoted string."""
    text, out, pos = str(value), [], 0
    while (start := text.find("${{", pos)) >= 0:
        out.append(text[pos:start])
        end, quoted = start + 3, False
        while end < len(text) and (quoted or not text.startswith("}}", end)):
            quoted ^= text[end] == "'"  # '' inside a string closes and reopens it: the same
            end += 1
        if end >= len(text):
            raise ExpressionError(f"no }}}} closes the expression in {text!r}")
        out.append(_as_string(_expression(text[start + 3 : end], context, {})[0]))
        pos = end + 2
    return "".join(out) + text[pos:]


def _as_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, 0.0, "")


def _expression(text: str, context: dict[str, Any], status: dict[str, bool]) -> tuple[Any, bool]:
    """The value of one expression (the text between `${{` and `}}`), and whether it calls a status
    function."""
    status = {"success": True, "failure": False, "cancelled": False, **status}
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ExpressionError(f"cannot read {text[pos:]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    uses_status = any(k == "name" and v in STATUS_FUNCTIONS for k, v in tokens)
    i = 0

    def peek() -> tuple[str, str] | None:
        return tokens[i] if i < len(tokens) else None

    def take(value: str | None = None) -> tuple[str, str]:
        nonlocal i
        tok = peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ExpressionError(f"expected {value!r} in {text!r}")
        i += 1
        return tok

    def low(v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    def primary() -> Any:
        kind, value = take()
        if value == "(":
            v = either()
            take(")")
            return v
        if value == "!":
            return not _truthy(primary())
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value)
        if value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if peek() == ("op", "("):
            take("(")
            args = []
            while peek() != ("op", ")"):
                args.append(either())
                if peek() == ("op", ","):
                    take(",")
            take(")")
            if value in STATUS_FUNCTIONS:
                return True if value == "always" else status[value]
            if value in ("startsWith", "endsWith", "contains") and len(args) == 2:
                a, b = (low("" if x is None else str(x)) for x in args)
                return {"startsWith": a.startswith, "endsWith": a.endswith, "contains": a.__contains__}[value](b)
            if value == "format" and args:
                fields = [_as_string(a) for a in args[1:]]
                parts = re.split(r"(\{\{|\}\}|\{\d+\})", _as_string(args[0]))
                return "".join(
                    p[0] if p in ("{{", "}}") else fields[int(p[1:-1])] if re.fullmatch(r"\{\d+\}", p) else p
                    for p in parts
                )
            raise ExpressionError(f"function {value}() is not one this reader knows")
        return context.get(value)

    def comparison() -> Any:
        left = primary()
        tok = peek()
        if tok and tok[1] in ("==", "!=", "<", ">", "<=", ">="):
            op = take()[1]
            right = primary()
            a, b = low(left), low(right)
            if op in ("==", "!="):
                return (a == b) == (op == "==")
            try:
                return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
            except TypeError:
                return False
        return left

    def both() -> Any:
        v = comparison()
        while peek() == ("op", "&&"):
            take()
            w = comparison()
            v = w if _truthy(v) else v
        return v

    def either() -> Any:
        v = both()
        while peek() == ("op", "||"):
            take()
            w = both()
            v = v if _truthy(v) else w
        return v

    result = either()
    if i != len(tokens):
        raise ExpressionError(f"cannot read {text!r} past token {i}")
    return result, uses_status


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    env = dict(job.get("env") or {})
    for step in steps(job):
        env.update(step.get("env") or {})
    return env


def w(name: str, job_id: str) -> str:
    return f"{name}:{job_id}"


# --- the rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Callable[[Setup], list[str]]


RULES: list[Rule] = []


def rule(rule_id: str, summary: str) -> Callable[[Callable[[Setup], list[str]]], Callable[[Setup], list[str]]]:
    def register(fn: Callable[[Setup], list[str]]) -> Callable[[Setup], list[str]]:
        RULES.append(Rule(rule_id, summary, fn))
        return fn

    return register


@rule("actions-pinned", "every action is pinned to a full commit SHA (a Docker action to a digest)")
def _actions_pinned(s: Setup) -> list[str]:
    return [
        f"{w(n, j)}: uses {step['uses']}"
        for n, j, job, _ in all_jobs(s)
        for step in steps(job)
        if "uses" in step and not PINNED_USES.fullmatch(str(step["uses"]))
    ]


@rule("top-permissions-none", "every workflow's top-level token permissions are {}: each job asks for its own")
def _top_permissions(s: Setup) -> list[str]:
    return [
        f"{n}: permissions {wf.get('permissions')!r}" for n, wf in s.workflows.items() if wf.get("permissions") != {}
    ]


@rule("job-permissions-minimal", "every job names its scopes; only the comment job may write, and only pull requests")
def _job_permissions(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        perms = job.get("permissions")
        if not isinstance(perms, dict):
            found.append(f"{w(n, j)}: permissions {perms!r} (name each scope)")
            continue
        writes = {k for k, v in perms.items() if v == "write"}
        if writes - WRITES.get((n, j), set()):
            found.append(f"{w(n, j)}: writes {sorted(writes)}")
    return found


@rule("gpu-jobs-on-scale-sets", "a self-hosted job runs on one of the two scale sets, by name (labels are no boundary)")
def _on_scale_sets(s: Setup) -> list[str]:
    return [
        f"{w(n, j)}: runs-on {job.get('runs-on')!r}"
        for n, j, job, _ in all_jobs(s)
        if not hosted(job) and scale_set(job) is None
    ]


@rule("no-gpu-in-pr-editable-workflow", "no workflow a pull request can edit (pull_request, ...) has a self-hosted job")
def _pr_editable(s: Setup) -> list[str]:
    return [
        f"{w(n, j)}: self-hosted under {sorted(triggers(wf) & PR_EDITABLE)}"
        for n, j, job, wf in all_jobs(s)
        if not hosted(job) and triggers(wf) & PR_EDITABLE
    ]


def _groups(s: Setup) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in s.settings.get("runner_groups") or []}


def _set_values(s: Setup) -> dict[str, dict[str, Any]]:
    return {v.get("runnerScaleSetName"): v for v in s.values.values() if "runnerScaleSetName" in v}


@rule("runner-group-admits-job", "each scale-set job's workflow file at main is admitted by that set's runner group")
def _group_admits(s: Setup) -> list[str]:
    found, groups, sets = [], _groups(s), _set_values(s)
    for n, j, job, _ in all_jobs(s):
        name = scale_set(job)
        if name is None:
            continue
        group = groups.get((sets.get(name) or {}).get("runnerGroup"))
        wanted = f"OWNER/REPO/.github/workflows/{n}@refs/heads/main"
        if group is None or wanted not in (group.get("selected_workflows") or []):
            found.append(f"{w(n, j)}: {name}'s runner group does not admit {wanted}")
    return found


@rule("runner-groups-closed", "the runner groups admit only their own workflows at main, no public repository")
def _groups_closed(s: Setup) -> list[str]:
    found = []
    users: dict[str, set[str]] = {}
    for n, _, job, _ in all_jobs(s):
        if scale_set(job):
            users.setdefault(scale_set(job), set()).add(n)
    for name, group in _groups(s).items():
        if group.get("restricted_to_workflows") is not True:
            found.append(f"runner group {name}: restricted_to_workflows is not true")
        if group.get("allows_public_repositories") is not False or group.get("visibility") != "selected":
            found.append(f"runner group {name}: open to public or all repositories")
        for entry in group.get("selected_workflows") or []:
            m = re.fullmatch(r"OWNER/REPO/\.github/workflows/([\w.-]+\.ya?ml)@refs/heads/main", str(entry))
            if not m or m.group(1) not in users.get(name, set()):
                found.append(f"runner group {name}: admits {entry}, not one of its workflows at main")
    if set(_groups(s)) != set(SCALE_SETS):
        found.append(f"runner groups {sorted(_groups(s))}, not one per scale set {list(SCALE_SETS)}")
    return found


@rule(
    "trusted-jobs-main-only",
    "a job on perfgate-gpu-main runs only main's code: `if:` requires refs/heads/main, not a PR",
)
def _trusted_main_only(s: Setup) -> list[str]:
    found = []
    for n, j, job, wf in all_jobs(s):
        if scale_set(job) != MAIN_SET:
            continue
        terms = conjuncts(job.get("if"))
        needed = [MAIN_REF] + ([NOT_PR_TARGET] if "pull_request_target" in triggers(wf) else [])
        if terms is None or any(t not in terms for t in needed):
            found.append(f"{w(n, j)}: if {job.get('if')!r} does not require {' && '.join(needed)}")
        if any(uses(st, "actions/checkout") and "ref" in (st.get("with") or {}) for st in steps(job)):
            found.append(f"{w(n, j)}: checks out another revision than the run's")
        # On issue_comment, workflow_run and the like, github.ref is main whatever started the run.
        others = triggers(wf) - TRUSTED_EVENTS - {"pull_request_target"}
        if others:
            found.append(f"{w(n, j)}: runs on the trusted set for {sorted(others)} (anyone's comment or run starts it)")
    return found


def _approval_job(wf: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """Why none of the jobs `job` needs is a proper approval (empty: one is)."""
    needs = job.get("needs") or []
    needs = [needs] if isinstance(needs, str) else needs
    why = [] if needs else ["needs no approval job"]
    for need in needs:
        gate = (wf.get("jobs") or {}).get(need) or {}
        env = gate.get("environment")
        env = env.get("name") if isinstance(env, dict) else env
        problems = []
        if env != PR_ENVIRONMENT:
            problems.append(f"environment {env!r}")
        if not hosted(gate):
            problems.append(f"runs on {gate.get('runs-on')!r}")
        if gate.get("permissions") != {}:
            problems.append("its token has permissions")
        if any("uses" in st for st in steps(gate)):
            problems.append("runs actions")
        if ONLY_PR_TARGET not in (conjuncts(gate.get("if")) or []):
            problems.append("not limited to pull_request_target")
        if gate.get("continue-on-error") not in (None, False):
            problems.append(
                f"continue-on-error {gate['continue-on-error']!r} (a rejected approval would count as passed)"
            )
        if not problems:
            return []
        why.append(f"needs {need}: {', '.join(problems)}")
    return why


@rule("pr-jobs-need-approval", "a job on perfgate-gpu-pr needs a hosted job in environment gpu-pull-request, per run")
def _pr_approval(s: Setup) -> list[str]:
    found = []
    for n, j, job, wf in all_jobs(s):
        if scale_set(job) != PR_SET:
            continue
        terms = conjuncts(job.get("if"))
        if terms is None or ONLY_PR_TARGET not in terms or triggers(wf) & PR_EDITABLE:
            found.append(f"{w(n, j)}: runs for other events than an approved pull_request_target: if {job.get('if')!r}")
        found += [f"{w(n, j)}: {why}" for why in _approval_job(wf, job)]
        found += [f"{w(n, j)}: {why}" for why in _runs_unapproved(job)]
        for st in steps(job):
            if uses(st, "actions/checkout") and (st.get("with") or {}).get("ref") != PR_HEAD:
                found.append(f"{w(n, j)}: checks out {(st.get('with') or {}).get('ref')!r}, not the run's head commit")
    return found


def _runs_unapproved(job: dict[str, Any]) -> list[str]:
    """Whether the job's `if:` lets it run when a job it needs failed or was cancelled (a rejected
    or withdrawn approval): always(), !cancelled(), failure(), cancelled(), or anything that makes
    the condition true without success()."""
    ctx = {"github.event_name": "pull_request_target"}
    found = []
    for what, status in (
        ("failed", {"success": False, "failure": True}),
        ("was cancelled", {"success": False, "cancelled": True}),
    ):
        try:
            if evaluate(job.get("if"), ctx, status):
                found.append(f"runs when the approval {what}: if {job.get('if')!r}")
        except ExpressionError as exc:
            found.append(f"if {job.get('if')!r}: {exc}")
    return found


@rule(
    "pr-job-runs-no-action",
    "no action in a perfgate-gpu-pr job (its files and post steps run after the PR's code, with the runtime token)",
)
def _pr_no_action(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        if scale_set(job) != PR_SET:
            continue
        found += [f"{w(n, j)}: uses {st['uses']}" for st in steps(job) if "uses" in st]
        first = steps(job)[0] if steps(job) else {}
        if not str(first.get("run", "")).startswith(FETCH_COMMIT) or (first.get("env") or {}).get("HEAD") != PR_HEAD:
            found.append(f"{w(n, j)}: does not start with {FETCH_COMMIT} of the run's head commit ({PR_HEAD})")
    return found


@rule("unsafe-checkout-only-in-pr-job", "only a perfgate-gpu-pr job checks out a pull request's commit")
def _unsafe_checkout(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        for st in steps(job):
            given = st.get("with") or {}
            if not uses(st, "actions/checkout") or scale_set(job) == PR_SET:
                continue
            if given.get("allow-unsafe-pr-checkout") or "pull_request" in str(given.get("ref", "")):
                found.append(f"{w(n, j)}: checks out a pull request's code ({given.get('ref')!r})")
    return found


RUN_IS_PR = "github.event.workflow_run.event == 'pull_request_target'"
RUN_NOT_PR = "github.event.workflow_run.event != 'pull_request_target'"
RUN_NOT_PULL_REQUEST = "github.event.workflow_run.event != 'pull_request'"  # benchmark-cpu's pull requests
ONLY_PULL_REQUEST = "github.event_name == 'pull_request'"
# The benchmark workflows whose main runs history.yml keeps, and the path term naming one of them.
KEPT_WORKFLOWS = ("benchmark-gpu", "benchmark-cpu")
RUN_PATH = re.compile(r"startsWith\(github\.event\.workflow_run\.path, '\.github/workflows/([\w.-]+)\.yml'\)")
CREDENTIAL_TEXT = re.compile(r"secrets|github\.token|GITHUB_TOKEN|create-github-app-token", re.I)
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PRIVATE|_KEY$|^KEY", re.I)


@rule("no-credentials-on-gpu", "no self-hosted job names a secret, a token or an environment")
def _no_credentials(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        if hosted(job):
            continue
        text = yaml.safe_dump(job)
        if CREDENTIAL_TEXT.search(text):
            found.append(f"{w(n, j)}: names {CREDENTIAL_TEXT.search(text).group()}")
        found += [f"{w(n, j)}: env {k}" for k in env_of(job) if CREDENTIAL_NAME.search(str(k))]
        if "environment" in job:
            found.append(f"{w(n, j)}: environment {job['environment']!r} (its secrets would reach the runner)")
    return found


@rule(
    "pull-request-workflows-hold-nothing",
    "a workflow a pull request edits as it runs (pull_request) holds no credential, environment or write scope",
)
def _pr_workflows(s: Setup) -> list[str]:
    found = []
    for n, wf in s.workflows.items():
        if not triggers(wf) & PR_EDITABLE:
            continue
        trusted = triggers(wf) & {"pull_request_target", "workflow_run"}
        if trusted:
            found.append(
                f"{n}: {sorted(trusted)} beside {sorted(triggers(wf) & PR_EDITABLE)} (main's trust in a file PRs edit)"
            )
        for j, job in (wf.get("jobs") or {}).items():
            text = yaml.safe_dump(job)
            if CREDENTIAL_TEXT.search(text):
                found.append(f"{w(n, j)}: names {CREDENTIAL_TEXT.search(text).group()}")
            if "environment" in job:
                found.append(f"{w(n, j)}: environment {job['environment']!r}")
            perms = job.get("permissions") if isinstance(job.get("permissions"), dict) else {"all": "write"}
            if set(perms.values()) - {"read", "none"}:
                found.append(f"{w(n, j)}: permissions {perms!r}")
    return found


@rule(
    "write-tokens-hosted-at-own-revision",
    "a job holding a write token runs on a GitHub-hosted runner at its own revision",
)
def _writers_hosted(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        perms = job.get("permissions") if isinstance(job.get("permissions"), dict) else {"all": "write"}
        writes = "write" in perms.values() or CREDENTIAL_TEXT.search(yaml.safe_dump(steps(job)) or "")
        if not writes:
            continue
        if not hosted(job):
            found.append(f"{w(n, j)}: holds a write token on {job.get('runs-on')!r}")
        if any(uses(st, "actions/checkout") and "ref" in (st.get("with") or {}) for st in steps(job)):
            found.append(f"{w(n, j)}: holds a write token beside another revision's code")
    return found


@rule("secrets-only-in-protected-environments", "a job that reads a secret names a protected environment, main only")
def _secrets_in_env(s: Setup) -> list[str]:
    found, envs = [], s.settings.get("environments") or {}
    for n, j, job, _ in all_jobs(s):
        names = set(re.findall(r"secrets\.(\w+)", yaml.safe_dump(job)))
        if re.search(r"secrets\s*\[|toJSON\(\s*secrets", yaml.safe_dump(job), re.I):
            names.add("<all or computed>")
        if not names:
            continue
        env = job.get("environment")
        env = env.get("name") if isinstance(env, dict) else env
        if env not in envs:
            found.append(f"{w(n, j)}: reads secrets {sorted(names)} outside a protected environment ({env!r})")
        elif names - set(envs[env].get("secrets") or []):
            found.append(f"{w(n, j)}: reads {sorted(names - set(envs[env].get('secrets') or []))}, not {env}'s")
        if MAIN_REF not in (conjuncts(job.get("if")) or []):
            found.append(f"{w(n, j)}: reads secrets without requiring refs/heads/main")
    return found


@rule("environments-protected", "every environment a job names has reviewers, no admin bypass, main only")
def _environments(s: Setup) -> list[str]:
    found, envs = [], s.settings.get("environments") or {}
    named = set()
    for _, _, job, _ in all_jobs(s):
        env = job.get("environment")
        if env:
            named.add(env.get("name") if isinstance(env, dict) else env)
    for name in sorted(named):
        e = envs.get(name)
        if e is None:
            found.append(f"environment {name}: not in deploy/github-settings.yml")
            continue
        if name in UNREVIEWED_ENVIRONMENTS:
            found += _unreviewed_environment(s, name, e)
            continue
        if not e.get("reviewers"):
            found.append(f"environment {name}: no required reviewers")
        if e.get("can_admins_bypass") is not False:
            found.append(f"environment {name}: administrators may bypass it")
        policy = e.get("deployment_branch_policy") or {}
        if policy.get("custom_branch_policies") is not True or e.get("deployment_branches") != ["main"]:
            found.append(f"environment {name}: deployable from {e.get('deployment_branches')!r}, not main alone")
    pr = envs.get(PR_ENVIRONMENT) or {}
    if pr.get("secrets") or pr.get("variables") or pr.get("prevent_self_review") is not True:
        found.append(
            f"environment {PR_ENVIRONMENT}: holds secrets or variables, or lets an author approve their own run"
        )
    return found


def _unreviewed_environment(s: Setup, name: str, e: dict[str, Any]) -> list[str]:
    """github-pages and perfgate-history release without a reviewer (each kept run would wait for
    one), so they are held to less: main only, no admin bypass, and their jobs run nothing but the
    environment's own actions and scripts (UNREVIEWED_ENVIRONMENTS)."""
    found = []
    actions, scripts = UNREVIEWED_ENVIRONMENTS[name]
    if e.get("deployment_branches") != ["main"] or e.get("can_admins_bypass") is not False:
        found.append(f"environment {name}: deployable from {e.get('deployment_branches')!r}, or admins bypass it")
    if name == PAGES_ENVIRONMENT and (e.get("secrets") or e.get("variables")):
        found.append(f"environment {name}: holds secrets or variables")
    for n, j, job, _ in all_jobs(s):
        env = job.get("environment")
        if (env.get("name") if isinstance(env, dict) else env) != name:
            continue
        for st in steps(job):
            action = str(st.get("uses", "")).split("@")[0]
            script = str(st.get("run", "")).split(" ")[0].removeprefix("./")
            if ("uses" in st and action not in actions) or ("run" in st and script not in scripts):
                found.append(f"{w(n, j)}: runs {st.get('uses') or st.get('run')!r} in {name}")
    return found


@rule("checkout-persists-no-credentials", "every checkout leaves no token in git's config")
def _persist(s: Setup) -> list[str]:
    return [
        f"{w(n, j)}: persist-credentials {(st.get('with') or {}).get('persist-credentials')!r}"
        for n, j, job, _ in all_jobs(s)
        for st in steps(job)
        if uses(st, "actions/checkout") and (st.get("with") or {}).get("persist-credentials") is not False
    ]


@rule("no-expression-in-run", "no ${{ }} inside a run: (untrusted text goes through the environment)")
def _no_expression(s: Setup) -> list[str]:
    return [
        f"{w(n, j)}: {st['run']}"
        for n, j, job, _ in all_jobs(s)
        for st in steps(job)
        if "${{" in str(st.get("run", ""))
    ]


def _cache_uses(st: dict[str, Any]) -> str | None:
    """What in a step uses the Actions cache, or None."""
    action, given = str(st.get("uses", "")).split("@")[0], st.get("with") or {}
    if action in CACHE_ACTIONS:
        return action
    if action.startswith(("actions/setup-", "astral-sh/setup-")) and given.get("cache") not in (None, "", False):
        return f"{action} with cache: {given['cache']!r}"
    if action in CACHING_BY_DEFAULT:
        key, off = CACHING_BY_DEFAULT[action]
        if given.get(key, True) != off:
            return f"{action} (caches unless {key}: {str(off).lower()})"
    return None


def _runs_pr_code_for_main(s: Setup) -> list[str]:
    """The pull_request_target jobs that run a pull request's code: their runs write to main's
    cache scope, with the runtime token the runner holds for the job."""
    return [
        w(n, j)
        for n, j, job, wf in all_jobs(s)
        if "pull_request_target" in triggers(wf)
        and (
            scale_set(job) == PR_SET
            or any(
                uses(st, "actions/checkout") and "pull_request" in str((st.get("with") or {}).get("ref", ""))
                for st in steps(job)
            )
        )
    ]


@rule(
    "no-actions-cache",
    "no Actions cache anywhere: a pull_request_target job runs PR code, and its runs write main's cache scope",
)
def _cache(s: Setup) -> list[str]:
    found, writers = [], _runs_pr_code_for_main(s)
    for n, j, job, _ in all_jobs(s):
        for st in steps(job):
            what = _cache_uses(st)
            if what and writers:
                found.append(f"{w(n, j)}: {what}, restored from a scope {', '.join(writers)} can write")
            elif what and not hosted(job):
                found.append(f"{w(n, j)}: {what} on a self-hosted runner")
    return found


@rule("containers-by-digest", "every job container and service image is pinned by digest")
def _containers(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        images = []
        if "container" in job:
            c = job["container"]
            images.append(c.get("image") if isinstance(c, dict) else c)
        images += [v.get("image") if isinstance(v, dict) else v for v in (job.get("services") or {}).values()]
        found += [f"{w(n, j)}: image {img!r}" for img in images if not DIGEST.search(str(img))]
    return found


def matrix_values(job: dict[str, Any], value: Any) -> list[Any]:
    """`value`, or where it is exactly `${{ matrix.KEY }}` every value KEY takes in the job's
    matrix (its lists and its include entries; [None] if none names it, so that is no lock)."""
    m = re.fullmatch(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", str(value)) if isinstance(value, str) else None
    if not m:
        return [value]
    matrix = ((job.get("strategy") or {}).get("matrix")) or {}
    key = m.group(1)
    found = list(matrix.get(key) or []) if isinstance(matrix.get(key), list) else []
    if not isinstance(matrix.get(key), list):  # then every include entry must give it
        found += [e.get(key) if isinstance(e, dict) else None for e in matrix.get("include") or []]
    return found or [None]


def _lock_problems(text: str) -> list[str]:
    """Requirements in a lock file without a sha256 hash (pip's --require-hashes would refuse them)."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", text)
    return [e.split()[0] for e in entries if re.match(r"[A-Za-z0-9]", e) and "--hash=sha256:" not in e]


@rule("installs-from-hashed-locks", "every install on a runner is pip --require-hashes from a lock with hashes")
def _hashed_installs(s: Setup) -> list[str]:
    found = []
    for n, j, job, _ in all_jobs(s):
        for st in steps(job):
            cmd = str(st.get("run", ""))
            if not INSTALLING.search(cmd) or "--from" in cmd:
                continue
            env = {**(job.get("env") or {}), **(st.get("env") or {})}
            for lock in matrix_values(job, env.get("PERFGATE_REQUIREMENTS")):
                if lock not in s.locks:
                    found.append(f"{w(n, j)}: {INSTALLING.search(cmd).group()} installs without a lock ({lock!r})")
            if env.get("PERFGATE_SKIP_INSTALL"):
                found.append(f"{w(n, j)}: PERFGATE_SKIP_INSTALL uses an environment no lock checked")
    for path, text in s.locks.items():
        found += [f"{path}: {req} has no hash" for req in _lock_problems(text)]
    for line in re.findall(r"pip install[^\n\\]*(?:\\\n[^\n\\]*)*", s.dockerfile):
        if "--require-hashes" not in line or " -r " not in line:
            found.append(f"runner image: `{' '.join(line.split())}` installs without --require-hashes -r LOCK")
    return found


@rule(
    "no-shared-gpu-queue",
    "no concurrency queue in a workflow with GPU jobs: pull requests' runs never line up for main's machines",
)
def _no_queue(s: Setup) -> list[str]:
    """A queue once lined every GPU job up behind one group per GPU label, pull requests' and main's
    together (each job now gets its own pod from its own scale set). A workflow of hosted jobs alone
    may queue: history.yml's kept runs wait in order for the data branch (history-queue-kept-runs)."""
    found = []
    for n, wf in s.workflows.items():
        blocks = [("(workflow)", wf.get("concurrency"))] + [
            (j, job.get("concurrency")) for j, job in (wf.get("jobs") or {}).items()
        ]
        gpu = any(not hosted(job) for job in (wf.get("jobs") or {}).values())
        for where, block in blocks:
            if gpu and isinstance(block, dict) and "queue" in block:
                found.append(f"{w(n, where)}: concurrency queue {block['queue']!r} in a workflow with GPU jobs")
            if where != "(workflow)" and block and not hosted(wf["jobs"][where]):
                found.append(f"{w(n, where)}: a job-level concurrency group on a GPU job ({block!r})")
    return found


# Workflows whose main runs share one fixed concurrency group on purpose, and why: a pull request's
# own workflow, once approved, can name that group too (groups are the repository's), and cancel or
# replace a run there. docs/gpu-runner.md, "Concurrency groups", prints each with what to do.
# (history.yml's shared queue perfgate-history is history-queue-kept-runs' to check: workflow_run.)
SHARED_MAIN_GROUPS = {
    "pages.yml": "deployments must not overlap, a newer build replacing an older: a cancelled build"
    " leaves the site as it was until the next one; run pages by hand",
    "record-baselines.yml": "one recording at a time, so that two never number the same baseline file:"
    " a cancelled recording opens no pull request; run it again by hand",
}
PR_BRANCHES = ("feature", "main", "refs/heads/main")  # a fork names its branch as it likes


def _concurrency_blocks(wf: dict[str, Any]) -> list[tuple[str, Any]]:
    blocks = [("(workflow)", wf.get("concurrency"))]
    blocks += [(j, job.get("concurrency")) for j, job in (wf.get("jobs") or {}).items()]
    return [(where, b.get("group") if isinstance(b, dict) else b) for where, b in blocks if b]


def _group_contexts(name: str, wf: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """("main" or "pr", the github context) for each way the workflow runs: main's runs (push,
    schedule, by hand) under two run ids; pull requests' (pull_request_target, and pull_request
    from a fork) from a branch of any name."""
    base = {"github.workflow": wf.get("name") or f".github/workflows/{name}", "github.repository": "OWNER/REPO"}
    for event in sorted(triggers(wf) & TRUSTED_EVENTS):
        for run_id in (1001, 1002):
            yield (
                "main",
                {
                    **base,
                    "github.event_name": event,
                    "github.ref": "refs/heads/main",
                    "github.ref_name": "main",
                    "github.run_id": run_id,
                },
            )
    for event in sorted(triggers(wf) & {"pull_request_target", "pull_request"}):
        for branch in PR_BRANCHES:
            yield (
                "pr",
                {
                    **base,
                    "github.event_name": event,
                    "github.ref": "refs/heads/main" if event == "pull_request_target" else "refs/pull/7/merge",
                    "github.ref_name": "main" if event == "pull_request_target" else "7/merge",
                    "github.head_ref": branch,
                    "github.base_ref": "main",
                    "github.run_id": 2001,
                    "github.event.pull_request.number": 7,
                    "github.event.pull_request.head.ref": branch,
                    "github.event.pull_request.head.repo.full_name": "mallory/REPO",
                },
            )


@rule(
    "concurrency-groups-apart",
    "no pull request's run joins a group of main's runs, and main's groups are per run (no pull request can name them)",
)
def _groups_apart(s: Setup) -> list[str]:
    """Concurrency groups are the repository's: a run that joins a group cancels the one waiting
    there, and the one in progress too with cancel-in-progress. A pull request's run that lands in
    main's group (`${{ github.ref }}` is refs/heads/main under pull_request_target; a head_ref is the
    fork's to name) cancels main's gate; and a pull request's own new workflow, run once a
    maintainer clicks "Approve and run", can write any group, so main's must not be known before
    its run exists."""
    found, main_groups, pr_groups = [], {}, {}
    for n, wf in s.workflows.items():
        for where, group in _concurrency_blocks(wf):
            per_run: dict[int, set[str]] = {}
            for kind, ctx in _group_contexts(n, wf):
                try:
                    written = interpolate(group, ctx)
                except ExpressionError as exc:
                    found.append(f"{w(n, where)}: {exc}")
                    break
                if kind == "main":
                    main_groups.setdefault(written, f"{w(n, where)} for {ctx['github.event_name']}")
                    per_run.setdefault(ctx["github.run_id"], set()).add(written)
                else:
                    pr_groups.setdefault(written, f"{w(n, where)} for {ctx['github.event_name']}")
            shared = per_run.get(1001, set()) & per_run.get(1002, set())
            if shared and not (where == "(workflow)" and n in SHARED_MAIN_GROUPS):
                found.append(
                    f"{w(n, where)}: main's runs share the group {sorted(shared)} (a pull request can name it)"
                )
    for group, pr in pr_groups.items():
        if group in main_groups:
            found.append(f"{pr}: the group {group!r} of {main_groups[group]}")
    return found


@rule(
    "artifacts-downloaded-by-name",
    "artifacts go into the runner's temp folder; the comment reads the pull-request job's, by name",
)
def _downloads(s: Setup) -> list[str]:
    found = []
    uploads: dict[str, set[str]] = {MAIN_SET: set(), PR_SET: set()}
    main_of: dict[str, set[str]] = {}  # workflow file -> the artifacts its main jobs upload
    pr_of: dict[str, set[str]] = {}  # workflow file -> the artifacts its pull-request jobs upload
    for n, _, job, wf in all_jobs(s):
        kind = _upload_kind(job, wf)
        for st in steps(job):
            if uses(st, "actions/upload-artifact") and kind:
                uploads[kind].add(str((st.get("with") or {}).get("name")))
                of = main_of if kind == MAIN_SET else pr_of
                of.setdefault(n, set()).add(str((st.get("with") or {}).get("name")))
    for n, j, job, wf in all_jobs(s):
        for st in steps(job):
            if not uses(st, "actions/download-artifact"):
                continue
            given = st.get("with") or {}
            if not str(given.get("path", "")).startswith("${{ runner.temp }}"):
                found.append(f"{w(n, j)}: downloads into {given.get('path')!r}, over the checkout")
            if "workflow_run" not in triggers(wf) or "run-id" not in given:
                continue  # this run's own artifact (history.yml's push job reads its validate job's)
            if "name" not in given or "pattern" in given or given.get("merge-multiple"):
                found.append(f"{w(n, j)}: downloads {given.get('pattern') or 'every artifact'} of another run")
            name, terms = str(given.get("name")), conjuncts(job.get("if")) or []
            # A job for pull-request runs reads the pull-request job's artifact; one for main's
            # runs reads the main job's and excludes pull-request runs.
            if name in uploads[PR_SET] - uploads[MAIN_SET]:
                found += _pull_request_artifact(w(n, j), name, terms, pr_of, s.workflows)
            elif name in uploads[MAIN_SET] - uploads[PR_SET]:
                if RUN_NOT_PR not in terms or RUN_NOT_PULL_REQUEST not in terms:
                    found.append(f"{w(n, j)}: reads main's artifact {name!r} without excluding pull-request runs")
                found += _artifact_of_its_workflow(w(n, j), st, wf, name, main_of)
            else:
                found.append(f"{w(n, j)}: reads artifact {name!r}, which no main or pull-request job alone uploads")
    return found


def _pull_request_artifact(
    where: str, name: str, terms: list[str], pr_of: dict[str, set[str]], workflows: dict[str, dict[str, Any]]
) -> list[str]:
    """A job reading a pull-request job's artifact runs only for the pull-request runs of the one
    workflow that uploads it: its `if:` names that workflow's path and its pull-request event."""
    for term in terms:
        m = RUN_PATH.fullmatch(term)
        if m and name in pr_of.get(f"{m.group(1)}.yml", set()):
            event = (
                "pull_request_target"
                if "pull_request_target" in triggers(workflows[f"{m.group(1)}.yml"])
                else "pull_request"
            )
            if f"github.event.workflow_run.event == '{event}'" in terms:
                return []
    return [f"{where}: reads the pull-request artifact {name!r} for other runs too"]


def _upload_kind(job: dict[str, Any], wf: dict[str, Any]) -> str | None:
    """Whose results a job's upload holds: a scale set's; for a hosted job, a pull request's when it
    runs for pull requests only (benchmark-gpu's report-pr, benchmark-cpu's pull-request job), main's
    when its `if:` requires main and excludes every pull-request event its workflow has."""
    if scale_set(job):
        return scale_set(job)
    terms = conjuncts(job.get("if")) or []
    if ONLY_PR_TARGET in terms or ONLY_PULL_REQUEST in terms:
        return PR_SET
    # On pull_request_target github.ref is the base branch (main); on pull_request, refs/pull/N/merge.
    if MAIN_REF in terms and ("pull_request_target" not in triggers(wf) or NOT_PR_TARGET in terms):
        return MAIN_SET
    return None


def _artifact_of_its_workflow(
    where: str, st: dict[str, Any], wf: dict[str, Any], name: str, main_of: dict[str, set[str]]
) -> list[str]:
    """A job kept for several workflows' runs downloads each one's artifact in a step for that
    workflow alone (its `if:` names the workflow's path), and the artifact is that workflow's."""
    listed = ((wf.get("on") or {}).get("workflow_run") or {}).get("workflows") or []
    named = [m.group(1) for t in conjuncts(st.get("if")) or [] if (m := RUN_PATH.fullmatch(t))]
    if len(listed) > 1 and len(named) != 1:
        return [f"{where}: downloads {name!r} whichever of {listed} ran (no `if:` naming one workflow's path)"]
    for workflow in named or listed:
        if name not in main_of.get(f"{workflow}.yml", set()):
            return [f"{where}: reads {name!r} for {workflow}'s runs, which {workflow}.yml's main jobs do not upload"]
    return []


# The comment jobs, by the benchmark workflow whose pull-request runs each comments on: the event
# term its `if:` requires, and what its scripts/pr-comment call must carry. A benchmark-cpu run of a
# pull request ran the pull request's own copy of the workflow (`pull_request`), so its title is the
# pull request's words: the call names the run by GitHub's head commit, repository and branch instead.
COMMENT_JOBS = {
    "benchmark-gpu": {"event": RUN_IS_PR, "args": ["--run-title"], "not": ["--gate cpu", "--head-sha"]},
    "benchmark-cpu": {
        "event": "github.event.workflow_run.event == 'pull_request'",
        "args": ["--gate cpu", "--head-sha", "--head-repo", "--head-branch"],
        "not": ["--run-title", "--pr "],
    },
}
# The only workflow_run job that runs after a pull request's run (comment-workflow says what it may do).
PULL_REQUEST_RUN_READERS = {("pr-comment.yml", "comment-cpu")}
EVENT_VALUES = {  # each --head-* argument's variable, as the run's event gives it (GitHub's, not the run's)
    "--head-sha": "${{ github.event.workflow_run.head_sha }}",
    "--head-repo": "${{ github.event.workflow_run.head_repository.full_name }}",
    "--head-branch": "${{ github.event.workflow_run.head_branch }}",
}


def _comment_call(where: str, st: dict[str, Any], env: dict[str, Any], workflow: str) -> list[str]:
    """One step of a comment job: scripts/pr-comment alone, with --author, and the arguments that
    name the pull request the way `workflow`'s runs can be trusted to."""
    raw = str(st.get("run", "")).strip()
    cmd = " ".join(raw.split())
    if "\n" in raw or not re.fullmatch(r"\./scripts/pr-comment( [^;&|`$(]*| \$[A-Z_]+| \"\$[A-Z_]+\")*", cmd):
        return [f"{where}: runs `{cmd}` (a comment job runs ./scripts/pr-comment alone)"]
    found = [] if "--author" in cmd else [f"{where}: pr-comment without --author would edit anyone's marked comment"]
    want = COMMENT_JOBS[workflow]
    found += [f"{where}: pr-comment without {a} for {workflow}'s runs" for a in want["args"] if a not in cmd]
    found += [f"{where}: pr-comment with {a} for {workflow}'s runs" for a in want["not"] if a in cmd]
    for arg, value in EVENT_VALUES.items():
        m = re.search(rf"{arg} \"?\$([A-Z_]+)", cmd)
        if m and env.get(m.group(1)) != value:
            found.append(f"{where}: {arg} from {env.get(m.group(1))!r}, not the event's {value}")
    return found


@rule(
    "comment-workflow",
    "each comment job runs for one benchmark workflow's pull-request runs, names the PR as GitHub does, bot's only",
)
def _comment(s: Setup) -> list[str]:
    found = []
    for n, wf in s.workflows.items():
        comments = "scripts/pr-comment" in yaml.safe_dump(wf.get("jobs") or {})
        if "workflow_run" not in triggers(wf) or not (comments or "pull-requests" in yaml.safe_dump(wf)):
            continue
        if not isinstance(wf.get("concurrency"), dict) or "${{" not in str(wf["concurrency"].get("group", "")):
            found.append(f"{n}: no concurrency group per pull request")
        for j, job in (wf.get("jobs") or {}).items():
            terms = conjuncts(job.get("if")) or []
            named = [m.group(1) for t in terms if (m := RUN_PATH.fullmatch(t))]
            workflow = named[0] if len(named) == 1 and named[0] in COMMENT_JOBS else None
            if workflow is None or COMMENT_JOBS[workflow]["event"] not in terms:
                options = " or ".join(f"{v['event']} && its path {k}.yml" for k, v in COMMENT_JOBS.items())
                found.append(f"{w(n, j)}: if {job.get('if')!r} does not require {options}")
                continue
            found += [p for st in steps(job) if "run" in st for p in _comment_call(w(n, j), st, env_of(job), workflow)]
    return found


@rule(
    "repository-actions-settings",
    "fork runs need approval for all outside contributors; tokens read; Actions approve no PR",
)
def _actions_settings(s: Setup) -> list[str]:
    actions = s.settings.get("actions") or {}
    found = []
    if (actions.get("fork_pr_contributor_approval") or {}).get("approval_policy") != "all_external_contributors":
        found.append(f"fork approval {actions.get('fork_pr_contributor_approval')!r}")
    perms = actions.get("workflow_permissions") or {}
    if (
        perms.get("default_workflow_permissions") != "read"
        or perms.get("can_approve_pull_request_reviews") is not False
    ):
        found.append(f"workflow permissions {perms!r}")
    return found


# --- the deployment ------------------------------------------------------------------------------


def _releases(s: Setup) -> list[dict[str, Any]]:
    return s.charts.get("releases") or []


@rule("scale-sets-apart", "the two scale sets: own runner group, namespace, node pool, pre-defined credentials secret")
def _sets_apart(s: Setup) -> list[str]:
    found, sets = [], _set_values(s)
    if set(sets) != set(SCALE_SETS):
        found.append(f"scale sets {sorted(map(str, sets))}, not {list(SCALE_SETS)}")
    for name, v in sets.items():
        if v.get("runnerGroup") != name:
            found.append(f"{name}: runnerGroup {v.get('runnerGroup')!r}")
        if not isinstance(v.get("githubConfigSecret"), str):
            found.append(f"{name}: githubConfigSecret inline (name a Secret created in the namespace)")
    secrets = [str(v.get("githubConfigSecret")) for v in sets.values()]
    if len(set(secrets)) != len(secrets):
        found.append(
            f"scale sets share the ARC credentials {secrets[0]!r}: each its own App's key, in its own namespace"
        )
    spaces = {r.get("values"): r.get("namespace") for r in _releases(s)}
    by_set = {
        sets_name: spaces.get(f)
        for f, vals in s.values.items()
        for sets_name in [vals.get("runnerScaleSetName")]
        if sets_name
    }
    if len(set(by_set.values())) != len(by_set) or any(by_set[k] != k for k in by_set):
        found.append(f"scale-set namespaces {by_set!r}: each in a namespace of its own name")
    pools = [str(((v.get("template") or {}).get("spec") or {}).get("nodeSelector")) for v in sets.values()]
    if len(set(pools)) != len(pools):
        found.append(f"scale sets share a node pool {pools[0]}")
    return found


def pod_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a pod spec: init containers run in the pod too, with the same reach."""
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _pod_problems(where: str, spec: dict[str, Any], *, api_token: bool = False) -> list[str]:
    """What Pod Security's `restricted` level (and this fleet: no API token unless `api_token`)
    refuses in a pod spec, for every container, init containers included."""
    found = []
    if not api_token and spec.get("automountServiceAccountToken") is not False:
        found.append(f"{where}: mounts a Kubernetes API token")
    if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        found.append(f"{where}: shares a host namespace")
    pod_sc = spec.get("securityContext") or {}
    if pod_sc.get("runAsNonRoot") is not True or (pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        found.append(f"{where}: pod may run as root or without the runtime's seccomp profile")
    for vol in spec.get("volumes") or []:
        if "hostPath" in vol:
            found.append(f"{where}: host path {vol['hostPath']!r}")
    for c in pod_containers(spec):
        sc = c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if (
            sc.get("allowPrivilegeEscalation") is not False
            or sc.get("privileged")
            or "ALL" not in (caps.get("drop") or [])
            or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        ):
            found.append(f"{where}/{c.get('name')}: may escalate privileges or keeps capabilities")
        if sc.get("runAsNonRoot") is False or sc.get("runAsUser") == 0:
            found.append(f"{where}/{c.get('name')}: runs as root")
    return found


@rule("runner-pods-restricted", "runner pods: no root, no privilege, no API token, no host path, one GPU each, no dind")
def _runner_pods(s: Setup) -> list[str]:
    found = []
    for name, v in _set_values(s).items():
        spec = (v.get("template") or {}).get("spec") or {}
        found += _pod_problems(name, spec)
        if v.get("containerMode"):
            found.append(f"{name}: containerMode {v['containerMode']!r} (dind runs privileged)")
        runner = next((c for c in spec.get("containers") or [] if c.get("name") == "runner"), {})
        limits = (runner.get("resources") or {}).get("limits") or {}
        if str(limits.get("nvidia.com/gpu")) != "1":
            found.append(f"{name}: the runner's GPU limit is {limits.get('nvidia.com/gpu')!r}, not one whole GPU")
    return found


# ARC 0.14.2's listener pod (controllers/actions.github.com/resourcebuilder.go): one per scale set,
# in the controller's namespace (arc-systems), built by newScaleSetListenerPod with no security
# context at all, then merged with the scale set's `listenerTemplate` by
# mergeListenerPodWithTemplate: the container named `listener` takes the template's securityContext
# and resources (replaced, not merged), any other container is added as it is, and the pod takes the
# template's securityContext, initContainers, tolerations, ... (replaced; absent means none).
LISTENER = "listener"
CONTROLLER_IMAGE = "ghcr.io/actions/gha-runner-scale-set-controller"
_LISTENER_CONTAINER_APPENDS = ("env", "args", "ports", "envFrom", "volumeMounts", "volumeDevices")
_LISTENER_CONTAINER_SETS = (
    "imagePullPolicy", "workingDir", "resources", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
    "terminationMessagePath", "terminationMessagePolicy", "securityContext", "resizePolicy", "restartPolicy",
    "stdin", "stdinOnce", "tty",
)  # fmt: skip
_LISTENER_POD_SETS = (
    "initContainers", "ephemeralContainers", "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy",
    "nodeName", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "hostname",
    "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority",
    "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
    "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims",
)  # fmt: skip


def controller_image(s: Setup) -> str:
    """The controller's image as the controller chart writes it, for the manager and, through
    CONTROLLER_MANAGER_CONTAINER_IMAGE, for every listener: repository:tag (tag: the chart's
    appVersion, 0.14.2, unless set)."""
    values = next((s.values.get(r.get("values")) or {} for r in _releases(s) if _is_controller(r)), {})
    image = values.get("image") or {}
    return f"{image.get('repository') or CONTROLLER_IMAGE}:{image.get('tag') or CHART_VERSION}"


def _is_controller(release: dict[str, Any]) -> bool:
    return str(release.get("chart", "")).endswith("-controller")


def listener_pod(values: dict[str, Any], image: str) -> dict[str, Any]:
    """A scale set's listener pod as ARC 0.14.2's controller creates it from its values."""
    name = f"{values.get('runnerScaleSetName')}-listener"
    spec: dict[str, Any] = {
        "serviceAccountName": name,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [
            {
                "name": LISTENER,
                "image": image,
                "env": [{"name": "LISTENER_CONFIG_PATH", "value": "/etc/gha-listener/config.json"}],
                "command": ["/ghalistener"],
                "volumeMounts": [{"name": "listener-config", "mountPath": "/etc/gha-listener", "readOnly": True}],
            }
        ],
        "volumes": [{"name": "listener-config", "secret": {"secretName": f"{name}-config"}}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 60,
    }
    template = values.get("listenerTemplate")
    if template:
        tspec = template.get("spec") or {}
        listener = spec["containers"][0]
        for c in tspec.get("containers") or []:
            if c.get("name") != LISTENER:
                spec["containers"].append(c)
                continue
            for key in ("image", "command"):
                if c.get(key):
                    listener[key] = c[key]
            for key in _LISTENER_CONTAINER_APPENDS:
                if [*(listener.get(key) or []), *(c.get(key) or [])]:
                    listener[key] = [*(listener.get(key) or []), *(c.get(key) or [])]
            for key in _LISTENER_CONTAINER_SETS:
                listener.pop(key, None)
                if key in c:
                    listener[key] = c[key]
        for key in ("restartPolicy", "imagePullSecrets", "nodeSelector"):
            if tspec.get(key):
                spec[key] = tspec[key]
        spec["volumes"] += tspec.get("volumes") or []
        for key in _LISTENER_POD_SETS:
            spec.pop(key, None)
            if key in tspec:
                spec[key] = tspec[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "arc-systems"},
        "spec": spec,
    }


@rule(
    "listener-pods-restricted",
    "each scale set's listener pod, as ARC builds it, is one arc-systems' `restricted` level admits",
)
def _listener_pods(s: Setup) -> list[str]:
    """Without listenerTemplate ARC's listener pod has no securityContext: arc-systems enforces
    `restricted`, so the API server refuses it and the scale set never scales. The listener needs
    its service account's token (it patches the scale set's EphemeralRunnerSet)."""
    found = []
    for name, v in _set_values(s).items():
        pod = listener_pod(v, controller_image(s))
        found += _pod_problems(f"{name}'s listener", pod["spec"], api_token=True)
        listener = pod["spec"]["containers"][0]
        if (listener.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            found.append(f"{name}'s listener: its root filesystem is writable")
        resources = listener.get("resources") or {}
        if not {"cpu", "memory"} <= set(resources.get("requests") or {}) or "memory" not in (
            resources.get("limits") or {}
        ):
            found.append(f"{name}'s listener: resources {resources!r} (requests cpu and memory, a memory limit)")
    return found


@rule(
    "pr-pod-keeps-nothing",
    "the pull-request pod mounts only emptyDir volumes, and no volume of main's pod (no shared cache)",
)
def _pr_pod_volumes(s: Setup) -> list[str]:
    found, sets = [], _set_values(s)
    pr = ((sets.get(PR_SET) or {}).get("template") or {}).get("spec") or {}
    main = ((sets.get(MAIN_SET) or {}).get("template") or {}).get("spec") or {}
    for vol in pr.get("volumes") or []:
        kind = sorted(set(vol) - {"name"})
        if kind != ["emptyDir"]:
            found.append(f"{PR_SET}: volume {vol.get('name')!r} is {kind}: it outlives the job or reaches main's pods")
    shared = {yaml.safe_dump({k: v for k, v in vol.items() if k != "name"}) for vol in main.get("volumes") or []} & {
        yaml.safe_dump({k: v for k, v in vol.items() if k != "name"})
        for vol in pr.get("volumes") or []
        if "emptyDir" not in vol
    }
    if shared:
        found.append(f"{PR_SET} and {MAIN_SET} mount the same volume: {sorted(shared)}")
    return found


@rule(
    "images-by-digest",
    "the runner image, the controller and listener, the device plugin and the runner image's base: by digest",
)
def _images(s: Setup) -> list[str]:
    found = []
    # The controller chart's image, for the manager and every listener, at the chart's version.
    image = controller_image(s)
    if not DIGEST.search(image) or not image.startswith(f"{CONTROLLER_IMAGE}:{CHART_VERSION}@"):
        found.append(f"controller and listeners: image {image!r}, not {CONTROLLER_IMAGE}:{CHART_VERSION}@sha256:...")
    for name, v in _set_values(s).items():
        for c in ((v.get("listenerTemplate") or {}).get("spec") or {}).get("containers") or []:
            if c.get("image") and not DIGEST.search(str(c["image"])):
                found.append(f"{name}'s listener pod/{c.get('name')}: image {c.get('image')!r}")
    for name, v in _set_values(s).items():
        for c in pod_containers((v.get("template") or {}).get("spec") or {}):
            if not DIGEST.search(str(c.get("image"))):
                found.append(f"{name}/{c.get('name')}: image {c.get('image')!r}")
    for doc in s.k8s:
        spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in pod_containers(spec):
            if not DIGEST.search(str(c.get("image"))):
                found.append(f"{doc['kind']}/{doc['metadata']['name']}: image {c.get('image')!r}")
    for base in re.findall(r"^FROM\s+(\S+)", s.dockerfile, re.M):
        if not DIGEST.search(base):
            found.append(f"runner image: FROM {base}")
    return found


# NVIDIA's device plugin as docs/gpu-runner.md sets it up: whole GPUs, MIG off, failing loudly.
DEVICE_PLUGIN_ARGS = ["--mig-strategy=none", "--fail-on-init-error=true"]


@rule(
    "device-plugin-as-documented",
    "the device plugin runs under the runner pods' RuntimeClass, with exactly its flags: no config, no sharing, no MIG",
)
def _device_plugin(s: Setup) -> list[str]:
    """The toolkit is installed as a runtime handler `nvidia` that is not containerd's default:
    under runc the plugin finds no NVML and no GPU (NVIDIA/k8s-device-plugin#406, #1304). A config
    file (--config-file, CONFIG_FILE, a mounted ConfigMap) can turn on time-slicing or MPS, which
    hands one GPU to several pods; --mig-strategy=mixed splits it. Every flag can also be set by an
    environment variable, so the container has none."""
    found = []
    classes = {d["metadata"]["name"]: d for d in s.k8s if d.get("kind") == "RuntimeClass"}
    runners = {
        name: ((v.get("template") or {}).get("spec") or {}).get("runtimeClassName")
        for name, v in _set_values(s).items()
    }
    plugins = [d for d in s.k8s if d.get("kind") == "DaemonSet"]
    if len(plugins) != 1:
        found.append(f"{len(plugins)} DaemonSets, not the device plugin alone")
    for doc in plugins:
        where = f"DaemonSet/{doc['metadata']['name']}"
        spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        runtime = spec.get("runtimeClassName")
        if runtime is None or runtime not in classes or any(r != runtime for r in runners.values()):
            found.append(f"{where}: runtimeClassName {runtime!r}, the runner pods' {runners!r}")
        containers = pod_containers(spec)
        if len(containers) != 1:
            found.append(f"{where}: containers {[c.get('name') for c in containers]}, not the plugin alone")
        for c in containers:
            if c.get("args") != DEVICE_PLUGIN_ARGS or c.get("command"):
                found.append(f"{where}/{c.get('name')}: args {c.get('args')!r}, not {DEVICE_PLUGIN_ARGS}")
            if c.get("env") or c.get("envFrom"):
                found.append(f"{where}/{c.get('name')}: environment {c.get('env') or c.get('envFrom')!r}")
            mounts = [(m.get("name"), m.get("mountPath")) for m in c.get("volumeMounts") or []]
            if mounts != [("device-plugin", "/var/lib/kubelet/device-plugins")]:
                found.append(f"{where}/{c.get('name')}: mounts {mounts}, not the kubelet's device-plugin folder alone")
        volumes = [(v.get("name"), sorted(set(v) - {"name"})) for v in spec.get("volumes") or []]
        if volumes != [("device-plugin", ["hostPath"])]:
            found.append(f"{where}: volumes {volumes}, not the kubelet's device-plugin folder alone")
    for name, c in classes.items():
        if c.get("handler") != "nvidia":
            found.append(f"RuntimeClass/{name}: handler {c.get('handler')!r}, not the toolkit's `nvidia`")
    return found


@rule("charts-pinned", f"the ARC charts at exactly {CHART_VERSION}; values use only keys those charts read")
def _charts(s: Setup) -> list[str]:
    found = []
    for r in _releases(s):
        if str(r.get("version")) != CHART_VERSION:
            found.append(f"release {r.get('name')}: chart version {r.get('version')!r}")
        values = s.values.get(r.get("values"))
        if values is None:
            found.append(f"release {r.get('name')}: values {r.get('values')!r} missing")
            continue
        keys = CONTROLLER_KEYS if r.get("chart", "").endswith("-controller") else SCALE_SET_KEYS
        found += [f"{r.get('values')}: {k} is no key of the chart" for k in sorted(set(values) - keys)]
    if {r.get("values") for r in _releases(s)} != set(s.values):
        found.append(f"values files {sorted(s.values)} and releases {[r.get('values') for r in _releases(s)]} differ")
    return found


@rule(
    "namespaces-restricted",
    "runner and controller namespaces enforce restricted; runners reach DNS and public HTTPS only",
)
def _namespaces(s: Setup) -> list[str]:
    found = []
    spaces = {d["metadata"]["name"]: d for d in s.k8s if d.get("kind") == "Namespace"}
    for name in ["arc-systems", *SCALE_SETS]:
        lbl = ((spaces.get(name) or {}).get("metadata") or {}).get("labels") or {}
        if lbl.get("pod-security.kubernetes.io/enforce") != "restricted":
            found.append(f"namespace {name}: enforces {lbl.get('pod-security.kubernetes.io/enforce')!r}")
    # NetworkPolicies add up: a pod selected by several is allowed what any of them allows. So every
    # policy in a runner namespace is read, whatever its name, file or podSelector.
    for name in SCALE_SETS:
        policies = [d for d in s.k8s if d.get("kind") == "NetworkPolicy" and d["metadata"].get("namespace") == name]
        if not any(
            (p.get("spec") or {}).get("podSelector") == {}
            and set((p.get("spec") or {}).get("policyTypes") or []) == {"Ingress", "Egress"}
            for p in policies
        ):
            found.append(f"namespace {name}: no policy denying ingress and limiting egress for every pod")
        apiserver = sorted(
            {
                c.strip()
                for p in policies
                for c in str((p["metadata"].get("annotations") or {}).get(APISERVER_ANNOTATION, "")).split(",")
                if c.strip()
            }
        )
        if not apiserver or not all(re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}/\d{1,2}", c) for c in apiserver):
            found.append(f"namespace {name}: annotation {APISERVER_ANNOTATION} names no API server address {apiserver}")
        for policy in policies:
            found += _policy_problems(f"namespace {name}, policy {policy['metadata'].get('name')}", policy, apiserver)
    return found


def _policy_problems(where: str, policy: dict[str, Any], apiserver: list[str]) -> list[str]:
    found = []
    spec = policy.get("spec") or {}
    if spec.get("ingress"):
        found.append(f"{where}: admits ingress {spec['ingress']!r}")
    for rule_ in spec.get("egress") or []:
        ports = {p.get("port") for p in rule_.get("ports") or []}
        for port in rule_.get("ports") or []:
            if "endPort" in port:
                found.append(f"{where}: egress ports {port.get('port')} to {port['endPort']} (endPort)")
        for peer in rule_.get("to") or [{}]:
            block = peer.get("ipBlock")
            if block and not (PRIVATE_RANGES | set(apiserver)) <= set(block.get("except") or []):
                missing = sorted((PRIVATE_RANGES | set(apiserver)) - set(block.get("except") or []))
                found.append(f"{where}: egress to {block.get('cidr')} reaches {missing}")
            if not block and peer != KUBE_DNS_PEER:
                found.append(f"{where}: egress to {peer!r}, not the cluster's DNS alone")
            if not block and ports - {53}:
                found.append(f"{where}: in-cluster egress on ports {sorted(map(str, ports))}")
        if not ports or ports - {53, 443}:
            found.append(f"{where}: egress on ports {sorted(map(str, ports)) or 'all'}")
    return found


HISTORY_TERMS = [
    RUN_NOT_PR,
    RUN_NOT_PULL_REQUEST,
    "github.event.workflow_run.head_branch == 'main'",
    "github.event.workflow_run.head_repository.full_name == github.repository",
]


def workflow_run_context(
    workflow: str,
    event: str,
    *,
    branch: str = "main",
    repo: str = "OWNER/REPO",
    conclusion: str = "success",
    run_id: int = 1001,
) -> dict[str, Any]:
    """What a workflow_run job of OWNER/REPO sees after a run of `workflow` (a file name without
    .yml) started by `event` on `branch` of `repo`, which ended `conclusion`; `run_id` is this run's."""
    return {
        "github.event_name": "workflow_run",
        "github.ref": "refs/heads/main",
        "github.repository": "OWNER/REPO",
        "github.run_id": run_id,
        "github.event.workflow_run.event": event,
        "github.event.workflow_run.head_branch": branch,
        "github.event.workflow_run.head_repository.full_name": repo,
        "github.event.workflow_run.path": f".github/workflows/{workflow}.yml",
        "github.event.workflow_run.conclusion": conclusion,
    }


def _path_problem(terms: list[str], listed: list[str]) -> str | None:
    """Why the job's terms do not require the run to be one of the kept benchmark workflows: one
    term, the path of one such workflow or a parenthesised `||` of such paths, each both listed
    under `workflow_run` and in KEPT_WORKFLOWS; None when they do."""
    for t in terms:
        inner = t[1:-1] if t.startswith("(") and t.endswith(")") else t
        found = [RUN_PATH.fullmatch(alt.strip()) for alt in inner.split("||")]
        if not all(found):
            continue
        stray = sorted({m.group(1) for m in found if m} - (set(KEPT_WORKFLOWS) & set(listed)))
        return f"keeps {stray} runs too, not a kept benchmark workflow's" if stray else None
    return "no term names the kept workflows' paths (startsWith(github.event.workflow_run.path, ...))"


def _step_credentials(st: dict[str, Any]) -> list[str]:
    return [
        str(k)
        for k, v in (st.get("env") or {}).items()
        if CREDENTIAL_NAME.search(str(k)) or CREDENTIAL_TEXT.search(str(v))
    ]


@rule(
    "history-keeps-main-runs-only",
    "the data branch gets main's benchmark runs only (GPU and CPU), validated, pushed by a job that installs nothing",
)
def _history(s: Setup) -> list[str]:
    found = []
    for n, wf in s.workflows.items():
        text = yaml.safe_dump(wf.get("jobs") or {})
        if "workflow_run" not in triggers(wf) or (HISTORY_SCRIPT not in text and HISTORY_PUSH not in text):
            continue
        if not isinstance(wf.get("concurrency"), dict) or wf["concurrency"].get("cancel-in-progress") is not False:
            found.append(f"{n}: two writers of the data branch could run at once, or one be cancelled mid-push")
        listed = ((wf.get("on") or {}).get("workflow_run") or {}).get("workflows") or []
        for j, job in (wf.get("jobs") or {}).items():
            terms = conjuncts(job.get("if"))
            if terms is None or any(t not in terms for t in HISTORY_TERMS):
                found.append(f"{w(n, j)}: if {job.get('if')!r} does not require {' && '.join(HISTORY_TERMS)}")
            elif why := _path_problem(terms, listed):
                found.append(f"{w(n, j)}: if {job.get('if')!r}: {why}")
            # benchmark-gpu by hand measures what its inputs say (a subset, or an A/B without
            # results.json): not main's pull-request tier, which history.yml would label it. Each
            # job's own `if:` (the push job's as if validate had kept the run), as for the terms.
            by_hand = {
                **workflow_run_context("benchmark-gpu", "workflow_dispatch"),
                "needs.validate.outputs.kept": "true",
            }
            try:
                if evaluate(job.get("if"), by_hand):
                    found.append(f"{w(n, j)}: keeps a run of benchmark-gpu by hand (workflow_dispatch) as tier pr")
            except ExpressionError as exc:
                found.append(f"{w(n, j)}: {exc}")
            runs = [str(st.get("run", "")) for st in steps(job) if "run" in st]
            if any("git push" in r or "git commit" in r for r in runs):
                found.append(f"{w(n, j)}: commits other than through {HISTORY_SCRIPT} (which validates first)")
            if any(HISTORY_SCRIPT in r and "--push" in r for r in runs):
                found.append(f"{w(n, j)}: {HISTORY_SCRIPT} --push: the token would share the job with pip")
            # The job that can push installs nothing, and only its push step holds a credential.
            holds = (
                re.search(r"secrets|create-github-app-token", yaml.safe_dump(steps(job)))
                or "write" in (job.get("permissions") or {}).values()
            )
            if holds and any(INSTALLING.search(r) for r in runs):
                found.append(
                    f"{w(n, j)}: holds a credential and installs ({', '.join(INSTALLING.findall(' '.join(runs)))})"
                )
            for st in steps(job):
                if "run" in st and _step_credentials(st) and HISTORY_PUSH not in str(st["run"]):
                    found.append(f"{w(n, j)}: {sorted(_step_credentials(st))} in the environment of `{st['run']}`")
    return found


def completions(workflows: Sequence[str]) -> list[dict[str, Any]]:
    """Every kind of completed run of these workflows (file names without .yml), as a workflow_run
    job of OWNER/REPO sees it: each event, on main, on a branch, from a fork's main, each conclusion."""
    return [
        workflow_run_context(workflow, event, branch=branch, repo=repo, conclusion=conclusion)
        for workflow in workflows
        for event in ("push", "schedule", "workflow_dispatch", "pull_request", "pull_request_target", "workflow_run")
        for branch, repo in (("main", "OWNER/REPO"), ("feature", "OWNER/REPO"), ("main", "mallory/REPO"))
        for conclusion in ("success", "failure", "cancelled", "skipped")
    ]


HISTORY_RUNS = completions((*KEPT_WORKFLOWS, "tests"))


@rule(
    "history-queue-kept-runs",
    "the runs history.yml keeps wait in one queue (queue: max), none cancelled (the others: skipped-runs-apart)",
)
def _history_queue(s: Setup) -> list[str]:
    """GitHub keeps one running and one pending run per concurrency group, and cancels the pending
    one when another arrives, unless `queue: max` (up to 100 wait, in order; not with
    cancel-in-progress). Every completion of a benchmark workflow starts a history run, a pull
    request's too (its jobs skip; skipped-runs-apart keeps those out of the queue). So every run the
    job that validates and commits keeps is in the one shared group."""
    found = []
    for n, wf in s.workflows.items():
        writers = [j for j, job in (wf.get("jobs") or {}).items() if HISTORY_SCRIPT in yaml.safe_dump(steps(job))]
        if "workflow_run" not in triggers(wf) or not writers:
            continue
        block = wf.get("concurrency")
        if not isinstance(block, dict) or block.get("queue") != "max" or block.get("cancel-in-progress") is not False:
            given = {k: v for k, v in (block or {}).items() if k != "group"} if isinstance(block, dict) else block
            found.append(f"{n}: concurrency {given!r}, not queue: max: a kept run waiting there can be replaced")
            continue
        kept: list[set[str]] = []  # the groups of each run it keeps, under two run ids
        for ctx in HISTORY_RUNS:
            try:
                if any(_job_runs(wf, j, ctx) for j in writers):
                    kept.append(_run_groups(block.get("group"), ctx))
            except ExpressionError as exc:
                return [*found, f"{n}: {exc}"]
        shared = set().union(*kept)
        if len(shared) != 1:
            found.append(f"{n}: the runs it keeps are in {len(shared)} groups {sorted(shared)[:3]}, not one queue")
    return found


def _workflow_group(wf: dict[str, Any]) -> Any:
    """The workflow-level concurrency group (a string, maybe with expressions), or None."""
    block = wf.get("concurrency")
    return block.get("group") if isinstance(block, dict) else block


def _run_groups(group: Any, ctx: dict[str, Any]) -> set[str]:
    """The group a run with these values takes, under two run ids: one member when every such run
    shares it, two when each run has its own."""
    return {interpolate(group, {**ctx, "github.run_id": run_id}) for run_id in (1001, 1002)}


def _watched_runs(wf: dict[str, Any]) -> list[dict[str, Any]]:
    """Every completion of a workflow this one watches (`on.workflow_run.workflows`), as its jobs see it."""
    return completions(((wf.get("on") or {}).get("workflow_run") or {}).get("workflows") or [])


@rule(
    "skipped-runs-apart",
    "a workflow_run run whose jobs all skip takes a concurrency group of its own",
)
def _skipped_apart(s: Setup) -> list[str]:
    """GitHub claims a run's concurrency group before it reads any job's `if:`, and every completion
    of a watched workflow starts a run, each pull request's too (its jobs skip): in a shared group
    that run replaces the one waiting there, and with cancel-in-progress cancels the one running
    (history.yml's kept run, pages' build or deployment). So a run in which no job runs must take a
    group that no other run can have."""
    found = []
    for n, wf in s.workflows.items():
        group = _workflow_group(wf)
        if "workflow_run" not in triggers(wf) or not group:
            continue
        watched = _watched_runs(wf)
        if not watched:
            found.append(f"{n}: on.workflow_run names no workflow to watch")
            continue
        working, idle = set(), []
        for ctx in watched:
            try:
                runs = any(_job_runs(wf, j, ctx) for j in wf.get("jobs") or {})
                groups = _run_groups(group, ctx)
            except ExpressionError as exc:
                found.append(f"{n}: {exc}")
                break
            if runs:
                working |= groups
            else:
                idle.append((ctx, groups))
        for ctx, groups in idle:
            if len(groups) != 2 or groups & working:
                found.append(
                    f"{n}: a run whose jobs all skip (after {ctx['github.event.workflow_run.path']}"
                    f" {ctx['github.event.workflow_run.event']} on {ctx['github.event.workflow_run.head_branch']}"
                    f" of {ctx['github.event.workflow_run.head_repository.full_name']},"
                    f" {ctx['github.event.workflow_run.conclusion']}) joins the group {sorted(groups)[0]!r}"
                )
                break
    return found


@rule(
    "working-runs-grouped",
    "a run whose jobs run has one group whatever its run id, runs doing different jobs never share one,"
    " and a shared main group holds all of main's working runs",
)
def _working_grouped(s: Setup) -> list[str]:
    """For workflow_run workflows and those in SHARED_MAIN_GROUPS, what a concurrency group is for
    where the runs do work: a group per run id queues nothing (two pages deployments at once); two
    gates' comment runs in one group replace each other's waiting comment; a pages build by push in
    another group than the builds after history overlaps them (SHARED_MAIN_GROUPS says why those
    share one)."""
    found = []
    for n, wf in s.workflows.items():
        group = _workflow_group(wf)
        if not group:
            continue
        # Main's own runs elsewhere are per run id on purpose (concurrency-groups-apart).
        contexts = _watched_runs(wf) if "workflow_run" in triggers(wf) else []
        if n in SHARED_MAIN_GROUPS:
            contexts += [c for kind, c in _group_contexts(n, wf) if kind == "main" and c["github.run_id"] == 1001]
        by_group: dict[str, set[tuple[str, ...]]] = {}
        for ctx in contexts:
            try:
                jobs = tuple(j for j in wf.get("jobs") or {} if _job_runs(wf, j, ctx))
                groups = _run_groups(group, ctx)
            except ExpressionError as exc:
                found.append(f"{n}: {exc}")
                break
            if not jobs:
                continue
            if len(groups) != 1:
                found.append(f"{n}: a run of {jobs} for {ctx['github.event_name']} takes a group per run id")
                break
            by_group.setdefault(groups.pop(), set()).add(jobs)
        for name, job_sets in by_group.items():
            if len(job_sets) > 1:
                found.append(f"{n}: runs of {sorted(job_sets)} share the group {name!r}")
        if n in SHARED_MAIN_GROUPS and len(by_group) > 1:
            found.append(f"{n}: main's working runs are in {len(by_group)} groups {sorted(by_group)[:3]}, not one")
    return found


@rule(
    "deployments-not-cancelled",
    "a workflow that deploys Pages never cancels a run in progress",
)
def _deployments_whole(s: Setup) -> list[str]:
    """A deployment stopped part-way can leave Pages in error until the next one (GitHub's own Pages
    workflows set cancel-in-progress: false); a newer build still replaces an older one waiting."""
    found = []
    for n, wf in s.workflows.items():
        if not any(uses(st, "actions/deploy-pages") for job in (wf.get("jobs") or {}).values() for st in steps(job)):
            continue
        for where, block in [("(workflow)", wf.get("concurrency"))] + [
            (j, job.get("concurrency")) for j, job in (wf.get("jobs") or {}).items()
        ]:
            cancel = block.get("cancel-in-progress") if isinstance(block, dict) else None
            if cancel not in (None, False):
                found.append(f"{w(n, where)}: cancel-in-progress {cancel!r} can stop a deployment part-way")
    return found


@rule(
    "history-downloads-allow-failed-runs",
    "history.yml's downloads may find no artifact after a failed run, never after a successful one",
)
def _history_downloads(s: Setup) -> list[str]:
    """A benchmark run that failed early (its install, say) uploaded nothing: the download would fail
    the history run, where the store step says "nothing kept". After a run that succeeded the
    artifact exists, and a download that fails there must fail the job rather than keep nothing."""
    found = []
    for n, j, job, wf in all_jobs(s):
        if "workflow_run" not in triggers(wf) or HISTORY_SCRIPT not in yaml.safe_dump(steps(job)):
            continue
        for i, st in enumerate(steps(job)):
            if not uses(st, "actions/download-artifact"):
                continue
            given = st.get("continue-on-error", False)
            for conclusion, tolerated in (("failure", True), ("success", False)):
                ctx = workflow_run_context(KEPT_WORKFLOWS[0], "push", conclusion=conclusion)
                try:
                    allows = _truthy(given) if isinstance(given, bool) else evaluate(given, ctx)
                except ExpressionError as exc:
                    found.append(f"{w(n, j)} step {i}: {exc}")
                    break
                if allows != tolerated:
                    found.append(
                        f"{w(n, j)} step {i}: continue-on-error {given!r} after a {conclusion} run:"
                        + (" no artifact fails the job" if tolerated else " a lost artifact keeps nothing, green")
                    )
    return found


@rule(
    "history-branch-ruleset",
    "a ruleset on perfgate-history lets only the history App push, create or delete it",
)
def _history_ruleset(s: Setup) -> list[str]:
    r = s.settings.get("history_ruleset") or {}
    app = (s.settings.get("history_app") or {}).get("name")
    found = []
    if r.get("target") != "branch" or r.get("include") != [HISTORY_BRANCH] or r.get("enforcement") != "active":
        found.append(f"no active branch ruleset on exactly {HISTORY_BRANCH}: {r or 'none'}")
    kinds = {x.get("type") for x in r.get("rules") or []}
    if not {"creation", "update", "deletion", "non_fast_forward"} <= kinds:
        found.append(
            f"ruleset on {HISTORY_BRANCH}: rules {sorted(map(str, kinds))} leave creation, update or deletion open"
        )
    actors = r.get("bypass_actors") or []
    if actors != [{"actor_type": "Integration", "actor": app, "bypass_mode": "always"}]:
        found.append(f"ruleset on {HISTORY_BRANCH}: bypass actors {actors!r}, not the App {app!r} alone")
    perms = (s.settings.get("history_app") or {}).get("repository_permissions") or {}
    if perms != {"contents": "write"}:
        found.append(f"history App {app!r}: permissions {perms!r}, not contents: write alone")
    env = (s.settings.get("environments") or {}).get(HISTORY_ENVIRONMENT) or {}
    if env.get("secrets") != ["PERFGATE_HISTORY_APP_PRIVATE_KEY"]:
        found.append(
            f"environment {HISTORY_ENVIRONMENT}: secrets {env.get('secrets')!r}, not the history App's key alone"
        )
    return found


def _job_runs(wf: dict[str, Any], job_id: str, ctx: dict[str, Any]) -> bool:
    """Whether the job runs for these values: the jobs it needs ran (a skipped one makes success()
    false), then its `if:`."""
    job = wf["jobs"][job_id]
    needs = job.get("needs") or []
    needs = [needs] if isinstance(needs, str) else needs
    ran = all(_job_runs(wf, need, ctx) for need in needs)
    return evaluate(job.get("if"), ctx, {"success": ran})


# A run a pull request started, as a workflow_run job sees it: from a fork, or from a branch of this
# repository, of a workflow the pull request added or changed (named like any workflow here).
def _pull_request_runs(wf: dict[str, Any]) -> list[dict[str, Any]]:
    names = ((wf.get("on") or {}).get("workflow_run") or {}).get("workflows") or []
    paths = [f".github/workflows/{x}.yml" for x in names] + [f".github/workflows/{x}" for x in names]
    return [
        {
            "github.event_name": "workflow_run",
            "github.ref": "refs/heads/main",
            "github.repository": "OWNER/REPO",
            "github.event.workflow_run.event": "pull_request",
            "github.event.workflow_run.head_branch": branch,
            "github.event.workflow_run.head_repository.full_name": repo,
            "github.event.workflow_run.path": path,
            "github.event.workflow_run.conclusion": "success",
        }
        for path in paths
        for repo, branch in (("mallory/REPO", "main"), ("OWNER/REPO", "feature"))
    ]


@rule(
    "workflow-run-ignores-pull-request-runs",
    "no workflow_run job runs for a run a pull request started (a workflow of the same name it added)"
    " but the CPU gate's comment",
)
def _workflow_run(s: Setup) -> list[str]:
    found = []
    for n, j, _, wf in all_jobs(s):
        if "workflow_run" not in triggers(wf) or (n, j) in PULL_REQUEST_RUN_READERS:
            continue
        for ctx in _pull_request_runs(wf):
            try:
                runs = _job_runs(wf, j, ctx)
            except ExpressionError as exc:
                found.append(f"{w(n, j)}: {exc}")
                break
            if runs:
                found.append(
                    f"{w(n, j)}: runs after {ctx['github.event.workflow_run.path']} of"
                    f" {ctx['github.event.workflow_run.head_repository.full_name']} (a pull request's run)"
                )
                break
    return found
