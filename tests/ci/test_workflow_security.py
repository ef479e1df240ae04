"""The boundary between pull requests' code and the repository's own GPU runs, write tokens and
secrets (docs/gpu-runner.md): every rule of tests/ci/rules.py holds on the real workflow files and
deployment, and each realistic mistake below, made to a copy of them, is caught by the rule named
beside it. A rule no mistake trips would be a rule that cannot fail: test_no_rule_is_dead.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.ci import rules
from tests.ci.helpers import ROOT, WORKFLOWS, tool
from tests.ci.rules import MAIN_SET, PR_SET, Setup

REAL = rules.load_setup(ROOT)


def failing(setup: Setup) -> dict[str, list[str]]:
    return {r.id: p for r in rules.RULES if (p := r.check(setup))}


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.id)
def test_the_real_setup_keeps_the_rule(rule: rules.Rule) -> None:
    assert rule.check(REAL) == [], rule.summary


def test_the_rules_see_every_workflow_and_both_scale_sets() -> None:
    assert set(REAL.workflows) == {
        "benchmark-gpu.yml",
        "benchmark-cpu.yml",
        "pr-comment.yml",
        "record-baselines.yml",
        "tests.yml",
        "history.yml",
        "pages.yml",
        "tests-matrix.yml",
    }
    on_sets = {(n, j): rules.scale_set(job) for n, j, job, _ in rules.all_jobs(REAL) if not rules.hosted(job)}
    assert on_sets == {
        ("benchmark-gpu.yml", "benchmark"): MAIN_SET,
        ("benchmark-gpu.yml", "benchmark-pr"): PR_SET,
        ("record-baselines.yml", "record"): MAIN_SET,
    }


def test_the_sharded_example_keeps_the_rules_once_copied_in() -> None:
    """docs/examples/benchmark-sharded.yml, copied into .github/workflows/ as its comment says."""
    setup = copy.deepcopy(REAL)
    setup.workflows["benchmark-sharded.yml"] = rules.load_workflow(
        (ROOT / "docs" / "examples" / "benchmark-sharded.yml").read_text()
    )
    assert set(failing(setup)) == {"runner-group-admits-job"}  # not admitted yet
    main_group = next(g for g in setup.settings["runner_groups"] if g["name"] == MAIN_SET)
    main_group["selected_workflows"].append("OWNER/REPO/.github/workflows/benchmark-sharded.yml@refs/heads/main")
    assert failing(setup) == {}


# --- the mistakes --------------------------------------------------------------------------------


def job(s: Setup, workflow: str, job_id: str) -> dict[str, Any]:
    return s.workflows[workflow]["jobs"][job_id]


def step(s: Setup, workflow: str, job_id: str, action: str) -> dict[str, Any]:
    return next(st for st in job(s, workflow, job_id)["steps"] if rules.uses(st, action))


def run_step(s: Setup, workflow: str, job_id: str) -> dict[str, Any]:
    return next(st for st in job(s, workflow, job_id)["steps"] if "run" in st)


def fork_workflow(runs_on: Any, on: Any = "pull_request") -> Callable[[Setup], None]:
    """A pull request adds a workflow of its own that asks for the GPU runners."""

    def add(s: Setup) -> None:
        s.workflows["gpu-fork.yml"] = rules.load_workflow(
            yaml.safe_dump(
                {
                    "name": "gpu-fork",
                    "on": on,
                    "permissions": {},
                    "jobs": {
                        "mine": {
                            "runs-on": runs_on,
                            "permissions": {"contents": "read"},
                            "steps": [
                                {
                                    "run": "./scripts/ci-benchmark",
                                    "env": {"PERFGATE_REQUIREMENTS": "requirements/gpu.txt"},
                                }
                            ],
                        }
                    },
                }
            )  # fmt: skip
        )

    return add


def set_(path: str, value: Any) -> Callable[[Setup], None]:
    """Set (or with value None delete) one key of a workflow, job, step or setting: WORKFLOW:JOB:KEY[.KEY]."""

    def apply(s: Setup) -> None:
        workflow, job_id, keys = path.split(":")
        target: Any = job(s, workflow, job_id) if job_id else s.workflows[workflow]
        *parents, last = keys.split(".")
        for k in parents:
            target = target[int(k)] if isinstance(target, list) else target.setdefault(k, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value

    return apply


def _env(workflow: str, job_id: str, **env: str) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        run_step(s, workflow, job_id).setdefault("env", {}).update(env)

    return apply


def _group(name: str) -> Callable[[dict], dict]:
    return lambda s: next(g for g in s.settings["runner_groups"] if g["name"] == name)


def _values(name: str) -> Callable[[Setup], dict]:
    return lambda s: s.values[f"scale-set-{name}.yaml"]


def _runner(s: Setup, name: str) -> dict:
    return _values(name)(s)["template"]["spec"]["containers"][0]


def _policy(s: Setup, ns: str) -> dict:
    return next(d for d in s.k8s if d["kind"] == "NetworkPolicy" and d["metadata"]["namespace"] == ns)


OLD_QUEUE = {"group": "perfgate-gpu-gpu", "cancel-in-progress": False, "queue": "max"}
UNHASHED_LOCK = "torch==2.13.0\n    # via perfgate\n"

# mistake id -> (the rule that must catch it, the change)
MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    # A fork's own workflow reaching for the GPUs.
    "fork-workflow-on-pr-scale-set": ("runner-group-admits-job", fork_workflow(PR_SET)),
    "fork-workflow-on-gpu-labels": ("gpu-jobs-on-scale-sets", fork_workflow(["linux", "gpu"])),
    "fork-workflow-self-hosted-labels": ("no-gpu-in-pr-editable-workflow", fork_workflow(["self-hosted", "gpu"])),
    "new-pr-target-workflow-on-pr-set": (
        "pr-jobs-need-approval",
        fork_workflow(PR_SET, on={"pull_request_target": {}}),
    ),
    "benchmark-workflow-on-pull-request": (
        "no-gpu-in-pr-editable-workflow",
        lambda s: s.workflows["benchmark-gpu.yml"]["on"].update(pull_request={}),
    ),
    # The approval.
    "pr-job-without-approval": ("pr-jobs-need-approval", set_("benchmark-gpu.yml:benchmark-pr:needs", None)),
    "approval-without-environment": ("pr-jobs-need-approval", set_("benchmark-gpu.yml:approve:environment", None)),
    "approval-waits-on-a-gpu": ("pr-jobs-need-approval", set_("benchmark-gpu.yml:approve:runs-on", PR_SET)),
    "approval-job-checks-out": (
        "pr-jobs-need-approval",
        lambda s: job(s, "benchmark-gpu.yml", "approve")["steps"].insert(
            0, copy.deepcopy(step(s, "benchmark-gpu.yml", "benchmark", "actions/checkout"))
        ),
    ),
    "pr-job-for-every-event": ("pr-jobs-need-approval", set_("benchmark-gpu.yml:benchmark-pr:if", None)),
    "pr-job-checks-out-the-merge-ref": (
        "pr-job-runs-no-action",
        set_(
            "benchmark-gpu.yml:benchmark-pr:steps.0.env.HEAD", "refs/pull/${{ github.event.pull_request.number }}/merge"
        ),
    ),
    # Trusted jobs.
    "trusted-job-without-main-condition": (
        "trusted-jobs-main-only",
        set_("benchmark-gpu.yml:benchmark:if", "github.event_name != 'pull_request_target'"),
    ),
    "trusted-job-condition-or-pr": (
        "trusted-jobs-main-only",
        set_(
            "benchmark-gpu.yml:benchmark:if",
            "github.ref == 'refs/heads/main' && github.event_name != 'pull_request_target'"
            " || github.event_name == 'pull_request_target'",
        ),
    ),
    "record-from-any-branch": ("trusted-jobs-main-only", set_("record-baselines.yml:record:if", None)),
    "pr-job-on-trusted-set": ("trusted-jobs-main-only", set_("benchmark-gpu.yml:benchmark-pr:runs-on", MAIN_SET)),
    "trusted-job-checks-out-pr-head": (
        "unsafe-checkout-only-in-pr-job",
        set_("benchmark-gpu.yml:benchmark:steps.0.with.ref", "${{ github.event.pull_request.head.sha }}"),
    ),
    # Pins and permissions.
    "action-by-tag": ("actions-pinned", set_("tests.yml:test:steps.0.uses", "actions/checkout@v6")),
    "action-by-short-sha": (
        "actions-pinned",
        set_("benchmark-gpu.yml:benchmark-pr:steps.0.uses", "actions/checkout@d23441a"),
    ),
    "workflow-token-write-all": ("top-permissions-none", set_("tests.yml::permissions", "write-all")),
    "job-permissions-read-all": ("job-permissions-minimal", set_("tests.yml:test:permissions", "read-all")),
    "gpu-job-may-write-pull-requests": (
        "job-permissions-minimal",
        set_("benchmark-gpu.yml:benchmark-pr:permissions.pull-requests", "write"),
    ),
    "gpu-job-may-write-contents": (
        "write-tokens-hosted-at-own-revision",
        set_("record-baselines.yml:record:permissions.contents", "write"),
    ),
    # Credentials near the runner.
    "workflow-token-env-on-runner": (
        "no-credentials-on-gpu",
        _env("record-baselines.yml", "record", GH_TOKEN="${{ github.token }}"),
    ),
    "secret-by-index-on-runner": (
        "no-credentials-on-gpu",
        _env("benchmark-gpu.yml", "benchmark", PAT="${{ secrets['PERFGATE_PR_TOKEN'] }}"),
    ),
    "all-secrets-on-runner": (
        "no-credentials-on-gpu",
        _env("benchmark-gpu.yml", "benchmark-pr", ALL="${{ toJSON(secrets) }}"),
    ),
    "environment-on-gpu-job": (
        "no-credentials-on-gpu",
        set_("record-baselines.yml:record:environment", "perfgate-baselines"),
    ),
    "open-pr-on-the-gpu-runner": ("no-credentials-on-gpu", set_("record-baselines.yml:open-pr:runs-on", MAIN_SET)),
    "app-key-outside-environment": (
        "secrets-only-in-protected-environments",
        set_("record-baselines.yml:open-pr:environment", None),
    ),
    "app-token-from-any-branch": (
        "secrets-only-in-protected-environments",
        set_("record-baselines.yml:open-pr:if", None),
    ),
    "pat-beside-the-app": (
        "secrets-only-in-protected-environments",
        _env("record-baselines.yml", "open-pr", GH_TOKEN="${{ secrets.PERFGATE_PR_TOKEN || github.token }}"),
    ),
    "environment-without-reviewers": (
        "environments-protected",
        lambda s: s.settings["environments"]["perfgate-baselines"].update(reviewers=[]),
    ),
    "environment-admins-bypass": (
        "environments-protected",
        lambda s: s.settings["environments"]["gpu-pull-request"].update(can_admins_bypass=True),
    ),
    "environment-any-branch": (
        "environments-protected",
        lambda s: s.settings["environments"]["perfgate-baselines"].update(deployment_branches=["main", "*"]),
    ),
    "secret-in-approval-environment": (
        "environments-protected",
        lambda s: s.settings["environments"]["gpu-pull-request"].update(secrets=["HF_TOKEN"]),
    ),
    "checkout-keeps-the-token": (
        "checkout-persists-no-credentials",
        set_("tests.yml:test:steps.0.with.persist-credentials", None),
    ),
    "title-in-a-run-line": (
        "no-expression-in-run",
        set_(
            "benchmark-gpu.yml:benchmark-pr:steps.1.run",
            "./scripts/ci-benchmark '${{ github.event.pull_request.title }}'",
        ),
    ),
    # Caches and installs.
    "cache-of-the-venv": (
        "no-actions-cache",
        lambda s: _insert_step("tests.yml", "test", 1, {**CACHE_STEP, "with": {"path": ".venv", "key": "venv"}})(s),
    ),
    "setup-python-pip-cache-on-pr-job": (
        "no-actions-cache",
        lambda s: job(s, "benchmark-gpu.yml", "benchmark-pr")["steps"].insert(
            1,
            {
                "uses": "actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065",
                "with": {"python-version": "3.12", "cache": "pip"},
            },
        ),
    ),
    "actions-cache-on-the-runner": (
        "no-actions-cache",
        lambda s: job(s, "benchmark-gpu.yml", "benchmark")["steps"].insert(1, copy.deepcopy(CACHE_STEP)),
    ),
    "container-by-tag": ("containers-by-digest", set_("tests.yml:test:container", "python:3.11-bookworm")),
    "install-without-lock": ("installs-from-hashed-locks", set_("tests.yml:test:env.PERFGATE_REQUIREMENTS", None)),
    "matrix-entry-names-no-lock": (
        "installs-from-hashed-locks",
        set_("tests-matrix.yml:test:strategy.matrix.include.1.lock", "requirements/newest.in"),
    ),
    "matrix-entry-without-its-lock": (
        "installs-from-hashed-locks",
        lambda s: job(s, "tests-matrix.yml", "test")["strategy"]["matrix"]["include"][0].pop("lock"),
    ),
    "gpu-install-without-lock": (
        "installs-from-hashed-locks",
        set_("benchmark-gpu.yml:benchmark:steps.1.env.PERFGATE_REQUIREMENTS", None),
    ),
    "lock-entry-without-hash": (
        "installs-from-hashed-locks",
        lambda s: s.locks.update({"requirements/gpu.txt": UNHASHED_LOCK}),
    ),
    "image-pip-without-hashes": (
        "installs-from-hashed-locks",
        lambda s: setattr(
            s, "dockerfile", s.dockerfile.replace("--require-hashes -r /tmp/perfgate-lock/gpu.txt", "torch==2.13.0")
        ),
    ),
    # Sharing machines and artifacts.
    "queue-max-on-gpu-jobs": ("no-shared-gpu-queue", set_("benchmark-gpu.yml:benchmark-pr:concurrency", OLD_QUEUE)),
    "comment-merges-every-artifact": (
        "artifacts-downloaded-by-name",
        set_("pr-comment.yml:comment:steps.1.with", {"pattern": "perfgate-*", "merge-multiple": True}),
    ),
    "comment-reads-main-artifact": (
        "artifacts-downloaded-by-name",
        set_("pr-comment.yml:comment:steps.1.with.name", "perfgate-main"),
    ),
    "comment-for-pull-request-runs": (
        "comment-workflow",
        set_(
            "pr-comment.yml:comment:if",
            "github.event.workflow_run.event == 'pull_request_target'"
            " && startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-gpu.yml')"
            " || github.event.workflow_run.event == 'pull_request'",
        ),
    ),
    "comment-without-author": (
        "comment-workflow",
        lambda s: run_step(s, "pr-comment.yml", "comment").update(
            run=run_step(s, "pr-comment.yml", "comment")["run"].replace('--author "github-actions[bot]" ', "")
        ),
    ),
    "comment-without-concurrency": ("comment-workflow", set_("pr-comment.yml::concurrency", None)),
    # The history store and its dashboard (history.yml, pages.yml).
    "history-for-pull-request-runs": (
        "history-keeps-main-runs-only",
        set_(
            "history.yml:validate:if",
            "github.event.workflow_run.head_branch == 'main'"
            " && github.event.workflow_run.head_repository.full_name == github.repository"
            " && startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-gpu.yml')",
        ),
    ),
    "history-from-a-fork-branch-named-main": (
        "history-keeps-main-runs-only",
        set_(
            "history.yml:validate:if",
            "github.event.workflow_run.event != 'pull_request_target'"
            " && github.event.workflow_run.head_branch == 'main'"
            " && startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-gpu.yml')",
        ),
    ),
    "history-or-any-run": (
        "history-keeps-main-runs-only",
        lambda s: job(s, "history.yml", "validate").update(
            {"if": job(s, "history.yml", "validate")["if"] + " || github.event.workflow_run.event == 'push'"}
        ),
    ),
    "history-commits-without-validating": (
        "history-keeps-main-runs-only",
        lambda s: run_step(s, "history.yml", "validate").update(
            run='cp -r "$ARTIFACT" store/ && git add -A && git commit -qm run && git push origin HEAD:perfgate-history'
        ),
    ),
    "history-writers-cancel-each-other": (
        "history-keeps-main-runs-only",
        set_("history.yml::concurrency", {"group": "perfgate-history", "cancel-in-progress": True}),
    ),
    "history-token-writes-pull-requests": (
        "job-permissions-minimal",
        set_("history.yml:validate:permissions.pull-requests", "write"),
    ),
    "history-job-on-the-gpu-runner": (
        "write-tokens-hosted-at-own-revision",
        set_("history.yml:push:runs-on", MAIN_SET),
    ),
    "history-job-checks-out-the-run-head": (
        "write-tokens-hosted-at-own-revision",
        set_("history.yml:push:steps.0.with.ref", "${{ github.event.workflow_run.head_sha }}"),
    ),
    "history-checkout-keeps-the-token": (
        "checkout-persists-no-credentials",
        set_("history.yml:validate:steps.0.with.persist-credentials", True),
    ),
    "history-reads-the-pr-artifact": (
        "artifacts-downloaded-by-name",
        set_("history.yml:validate:steps.1.with.name", "perfgate-pr"),
    ),
    "history-installs-without-lock": (
        "installs-from-hashed-locks",
        lambda s: run_step(s, "history.yml", "validate")["env"].pop("PERFGATE_REQUIREMENTS"),
    ),
    "history-token-in-the-gpu-job": (
        "no-credentials-on-gpu",
        _env("benchmark-gpu.yml", "benchmark", GH_TOKEN="${{ github.token }}"),
    ),
    "pages-action-by-tag": ("actions-pinned", set_("pages.yml:deploy:steps.0.uses", "actions/deploy-pages@v5")),
    "pages-build-may-write": ("job-permissions-minimal", set_("pages.yml:build:permissions.contents", "write")),
    "pages-deploy-runs-a-script": (
        "environments-protected",
        lambda s: job(s, "pages.yml", "deploy")["steps"].insert(0, {"run": "./scripts/history-site site"}),
    ),
    "pages-environment-any-branch": (
        "environments-protected",
        lambda s: s.settings["environments"]["github-pages"].update(deployment_branches=["main", "*"]),
    ),
    # GitHub settings.
    "runner-group-any-workflow": (
        "runner-groups-closed",
        lambda s: _group(PR_SET)(s).update(restricted_to_workflows=False),
    ),
    "runner-group-admits-any-ref": (
        "runner-groups-closed",
        lambda s: _group(PR_SET)(s)["selected_workflows"].append(
            "OWNER/REPO/.github/workflows/benchmark-gpu.yml@refs/pull/*"
        ),
    ),
    "pr-group-admits-recording": (
        "runner-groups-closed",
        lambda s: _group(PR_SET)(s)["selected_workflows"].append(
            "OWNER/REPO/.github/workflows/record-baselines.yml@refs/heads/main"
        ),
    ),
    "runner-group-public-repositories": (
        "runner-groups-closed",
        lambda s: _group(MAIN_SET)(s).update(allows_public_repositories=True),
    ),
    "fork-approval-first-timers-only": (
        "repository-actions-settings",
        lambda s: s.settings["actions"]["fork_pr_contributor_approval"].update(
            approval_policy="first_time_contributors"
        ),
    ),
    "actions-may-approve-prs": (
        "repository-actions-settings",
        lambda s: s.settings["actions"]["workflow_permissions"].update(can_approve_pull_request_reviews=True),
    ),
    # The deployment.
    "pr-set-in-main-group": ("scale-sets-apart", lambda s: _values("pr")(s).update(runnerGroup=MAIN_SET)),
    "pr-set-in-main-namespace": (
        "scale-sets-apart",
        lambda s: next(r for r in s.charts["releases"] if r["name"] == PR_SET).update(namespace=MAIN_SET),
    ),
    "one-node-pool-for-both": (
        "scale-sets-apart",
        lambda s: _values("pr")(s)["template"]["spec"].update(nodeSelector={"perfgate.dev/gpu-pool": "main"}),
    ),
    "inline-github-token": (
        "scale-sets-apart",
        lambda s: _values("main")(s).update(githubConfigSecret={"github_token": "ghp_x"}),
    ),
    "privileged-runner": (
        "runner-pods-restricted",
        lambda s: _runner(s, "pr")["securityContext"].update(privileged=True, allowPrivilegeEscalation=True),
    ),
    "runner-with-api-token": (
        "runner-pods-restricted",
        lambda s: _values("pr")(s)["template"]["spec"].update(automountServiceAccountToken=True),
    ),
    "runner-as-root": (
        "runner-pods-restricted",
        lambda s: _values("main")(s)["template"]["spec"]["securityContext"].update(runAsNonRoot=False),
    ),
    "dind-container-mode": (
        "runner-pods-restricted",
        lambda s: _values("pr")(s).update(containerMode={"type": "dind"}),
    ),
    "runner-without-gpu-limit": (
        "runner-pods-restricted",
        lambda s: _runner(s, "main")["resources"]["limits"].pop("nvidia.com/gpu"),
    ),
    "runner-image-by-tag": (
        "images-by-digest",
        lambda s: _runner(s, "pr").update(image="ghcr.io/OWNER/perfgate-gpu-runner:latest"),
    ),
    "device-plugin-by-tag": (
        "images-by-digest",
        lambda s: next(d for d in s.k8s if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][
            0
        ].update(image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    ),
    "image-base-by-tag": (
        "images-by-digest",
        lambda s: setattr(s, "dockerfile", re.sub(r"@sha256:[0-9a-f]+", "", s.dockerfile)),
    ),
    "chart-version-range": ("charts-pinned", lambda s: s.charts["releases"][1].update(version="0.14.*")),
    "misspelt-values-key": (
        "charts-pinned",
        lambda s: _values("pr")(s).update(maxRunner=_values("pr")(s).pop("maxRunners")),
    ),
    "namespace-baseline-only": (
        "namespaces-restricted",
        lambda s: next(d for d in s.k8s if d["kind"] == "Namespace" and d["metadata"]["name"] == PR_SET)["metadata"][
            "labels"
        ].update({"pod-security.kubernetes.io/enforce": "baseline"}),
    ),
    "egress-to-metadata-endpoint": (
        "namespaces-restricted",
        lambda s: _policy(s, PR_SET)["spec"]["egress"][1]["to"][0]["ipBlock"].pop("except"),
    ),
    "no-network-policy-for-pr": ("namespaces-restricted", lambda s: s.k8s.remove(_policy(s, PR_SET))),
}


# --- issue 37: the mistakes the review found uncaught -------------------------------------------
CACHE_STEP = {
    "uses": "actions/cache@27d5ce7f107fe9357f9df03efb73ab90386fccae",
    "with": {"path": "~/.cache/pip", "key": "pip-${{ runner.os }}-${{ hashFiles('requirements/ci-cpu.txt') }}"},
}
UPLOAD_STEP = {
    "name": "Upload results",
    "if": "always()",
    "uses": "actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f",
    "with": {"name": "perfgate-pr", "path": ".perfgate/ci"},
}
CHECKOUT_HEAD = {
    "uses": "actions/checkout@d23441a48e516b6c34aea4fa41551a30e30af803",
    "with": {"ref": "${{ github.event.pull_request.head.sha }}", "persist-credentials": False},
}


def _insert_step(workflow: str, job_id: str, at: int, new: dict) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        steps = job(s, workflow, job_id)["steps"]
        steps.insert(at if at >= 0 else len(steps), copy.deepcopy(new))

    return apply


def _history_writer(s: Setup) -> dict:
    """The history job that runs scripts/history-store (validates and commits)."""
    return next(
        j for j in s.workflows["history.yml"]["jobs"].values() if "history-store" in yaml.safe_dump(j.get("steps"))
    )


def _egress_block(s: Setup, ns: str) -> dict:
    return next(p["ipBlock"] for r in _policy(s, ns)["spec"]["egress"] for p in r.get("to") or [] if "ipBlock" in p)


def _drop_except(cidr: Callable[[Setup], str]) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        block, drop = _egress_block(s, PR_SET), cidr(s)
        block["except"] = [c for c in block["except"] if c != drop]

    return apply


def _apiserver(s: Setup) -> str:
    return (_policy(s, PR_SET)["metadata"].get("annotations") or {}).get("perfgate.dev/kube-apiserver", "none")


def _shared_inductor_cache(s: Setup) -> None:
    for name in ("main", "pr"):
        spec = _values(name)(s)["template"]["spec"]
        spec["volumes"].append({"name": "inductor", "persistentVolumeClaim": {"claimName": "perfgate-inductor"}})
        spec["containers"][0]["volumeMounts"].append({"name": "inductor", "mountPath": "/home/runner/.cache/inductor"})


def _issue_comment_benchmark(s: Setup) -> None:
    """`/benchmark` in a comment starts the trusted job: on issue_comment, github.ref is main."""
    s.workflows["benchmark-gpu.yml"]["on"]["issue_comment"] = {"types": ["created"]}
    job(s, "benchmark-gpu.yml", "benchmark")["if"] += " && contains(github.event.comment.body, '/benchmark')"


def _ruleset(s: Setup) -> dict:
    return s.settings.setdefault("history_ruleset", {"bypass_actors": []})


def _history_token_beside_install(s: Setup) -> None:
    """GH_TOKEN (a token that can push) in the environment of the step that pip-installs and parses."""
    step_ = next(st for st in _history_writer(s)["steps"] if "history-store" in str(st.get("run", "")))
    step_.setdefault("env", {})["GH_TOKEN"] = "${{ github.token }}"


ISSUE_37_MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    # The approval, bypassed by a status function or continue-on-error.
    "pr-job-runs-always": (
        "pr-jobs-need-approval",
        set_("benchmark-gpu.yml:benchmark-pr:if", "always() && github.event_name == 'pull_request_target'"),
    ),
    "pr-job-runs-unless-cancelled": (
        "pr-jobs-need-approval",
        set_("benchmark-gpu.yml:benchmark-pr:if", "!cancelled() && github.event_name == 'pull_request_target'"),
    ),
    "pr-job-runs-on-failure": (
        "pr-jobs-need-approval",
        set_("benchmark-gpu.yml:benchmark-pr:if", "${{ failure() && github.event_name == 'pull_request_target' }}"),
    ),
    "approval-continue-on-error": ("pr-jobs-need-approval", set_("benchmark-gpu.yml:approve:continue-on-error", True)),
    "approval-continue-on-error-expression": (
        "pr-jobs-need-approval",
        set_("benchmark-gpu.yml:approve:continue-on-error", "${{ github.event_name == 'pull_request_target' }}"),
    ),
    # The Actions cache, which a pull_request_target job can write in main's scope.
    "pip-cache-in-history": (
        "no-actions-cache",
        lambda s: _history_writer(s)["steps"].insert(1, copy.deepcopy(CACHE_STEP)),
    ),
    "pip-cache-in-tests-on-main": ("no-actions-cache", _insert_step("tests.yml", "test", 1, CACHE_STEP)),
    "setup-python-cache-in-tests-matrix": (
        "no-actions-cache",
        set_("tests-matrix.yml:test:steps.1.with.cache", "pip"),
    ),
    # An action running after the pull request's code, from a folder that code can change.
    "upload-action-after-pr-code": (
        "pr-job-runs-no-action",
        _insert_step("benchmark-gpu.yml", "benchmark-pr", -1, UPLOAD_STEP),
    ),
    "checkout-action-in-pr-job": (
        "pr-job-runs-no-action",
        _insert_step("benchmark-gpu.yml", "benchmark-pr", 0, CHECKOUT_HEAD),
    ),
    # The trusted scale set started by anyone's comment.
    "issue-comment-benchmark-on-main-set": ("trusted-jobs-main-only", _issue_comment_benchmark),
    # The data branch and the dashboard's trigger.
    "history-branch-without-ruleset": ("history-branch-ruleset", lambda s: s.settings.pop("history_ruleset", None)),
    "history-ruleset-admins-bypass": (
        "history-branch-ruleset",
        lambda s: _ruleset(s)["bypass_actors"].append(
            {"actor_type": "RepositoryRole", "actor": "admin", "bypass_mode": "always"}
        ),
    ),
    "history-token-beside-the-install": ("history-keeps-main-runs-only", _history_token_beside_install),
    "pages-after-any-history-workflow": (
        "workflow-run-ignores-pull-request-runs",
        set_("pages.yml:build:if", "github.ref == 'refs/heads/main'"),
    ),
    # The fleet.
    "pr-egress-to-every-namespace": (
        "namespaces-restricted",
        lambda s: _policy(s, PR_SET)["spec"]["egress"].append(
            {"to": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 443}]}
        ),
    ),
    "pr-egress-reaches-cgnat": ("namespaces-restricted", _drop_except(lambda s: "100.64.0.0/10")),
    "pr-egress-reaches-public-apiserver": ("namespaces-restricted", _drop_except(_apiserver)),
    "shared-inductor-cache-volume": ("pr-pod-keeps-nothing", _shared_inductor_cache),
    "one-arc-key-for-both-sets": (
        "scale-sets-apart",
        lambda s: _values("pr")(s).update(githubConfigSecret=_values("main")(s)["githubConfigSecret"]),
    ),
}

MISTAKES.update(ISSUE_37_MISTAKES)


def _history_if(job_id: str, old: str, new: str) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        condition = job(s, "history.yml", job_id)["if"]
        assert old in condition, old
        job(s, "history.yml", job_id)["if"] = condition.replace(old, new)

    return apply


def _download_for(s: Setup, workflow: str) -> dict[str, Any]:
    """history.yml's download step of `workflow`'s artifact."""
    return next(
        st
        for st in job(s, "history.yml", "validate")["steps"]
        if rules.uses(st, "actions/download-artifact") and workflow in str(st.get("if"))
    )


CPU_PATH = "startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-cpu.yml')"
# Issue 39: the CPU counts kept (benchmark-cpu.yml on main, history.yml) and the pull request's CPU gate.
ISSUE_39_MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    "benchmark-cpu-writes-contents": (
        "job-permissions-minimal",
        set_("benchmark-cpu.yml:main:permissions.contents", "write"),
    ),
    "benchmark-cpu-on-pull-request-target": (
        "pull-request-workflows-hold-nothing",
        lambda s: s.workflows["benchmark-cpu.yml"]["on"].update(pull_request_target={}),
    ),
    "benchmark-cpu-pull-request-holds-the-token": (
        "pull-request-workflows-hold-nothing",
        _env("benchmark-cpu.yml", "pull-request", GH_TOKEN="${{ github.token }}"),
    ),
    "benchmark-cpu-reads-a-secret": (
        "secrets-only-in-protected-environments",
        _env(
            "benchmark-cpu.yml", "pull-request", PERFGATE_HISTORY_KEY="${{ secrets.PERFGATE_HISTORY_APP_PRIVATE_KEY }}"
        ),
    ),
    "benchmark-cpu-upload-by-tag": (
        "actions-pinned",
        lambda s: step(s, "benchmark-cpu.yml", "main", "actions/upload-artifact").update(
            uses="actions/upload-artifact@v6"
        ),
    ),
    "benchmark-cpu-checkout-keeps-the-token": (
        "checkout-persists-no-credentials",
        set_("benchmark-cpu.yml:pull-request:steps.0.with.persist-credentials", True),
    ),
    "benchmark-cpu-container-by-tag": ("containers-by-digest", set_("benchmark-cpu.yml:main:container", "python:3.11")),
    "benchmark-cpu-installs-without-lock": (
        "installs-from-hashed-locks",
        set_("benchmark-cpu.yml:pull-request:env.PERFGATE_REQUIREMENTS", None),
    ),
    "benchmark-cpu-pull-request-uploads-mains-artifact": (
        "artifacts-downloaded-by-name",
        lambda s: step(s, "benchmark-cpu.yml", "pull-request", "actions/upload-artifact")["with"].update(
            name="perfgate-main-cpu"
        ),
    ),
    "history-cpu-guard-without-head-repository": (
        "history-keeps-main-runs-only",
        _history_if("validate", "&& github.event.workflow_run.head_repository.full_name == github.repository", ""),
    ),
    "history-keeps-cpu-pull-request-runs": (
        "history-keeps-main-runs-only",
        _history_if("push", "&& github.event.workflow_run.event != 'pull_request' ", ""),
    ),
    "history-any-workflows-path": (
        "history-keeps-main-runs-only",
        _history_if("validate", CPU_PATH, "startsWith(github.event.workflow_run.path, '.github/workflows/')"),
    ),
    "history-keeps-the-tests-runs": (
        "history-keeps-main-runs-only",
        _history_if(
            "validate",
            CPU_PATH,
            CPU_PATH + " || startsWith(github.event.workflow_run.path, '.github/workflows/tests.yml')",
        ),
    ),
    "history-artifact-crossed": (
        "artifacts-downloaded-by-name",
        lambda s: _download_for(s, "benchmark-cpu")["with"].update(name="perfgate-main"),
    ),
    "history-cpu-download-for-every-run": (
        "artifacts-downloaded-by-name",
        lambda s: _download_for(s, "benchmark-cpu").pop("if"),
    ),
}
MISTAKES.update(ISSUE_39_MISTAKES)


def _cpu_comment_run(old: str, new: str) -> Callable[[Setup], None]:
    def apply(s: Setup) -> None:
        st = run_step(s, "pr-comment.yml", "comment-cpu")
        assert old in st["run"], old
        st["run"] = st["run"].replace(old, new)

    return apply


# The CPU gate's comment (pr-comment.yml's comment-cpu): it runs after a pull request's own run of
# benchmark-cpu, whose title, artifact and workflow file are the pull request's.
CPU_COMMENT_MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    # The pull request named by the run's title, which the pull request's copy of the workflow set.
    "cpu-comment-pr-from-run-title": (
        "comment-workflow",
        lambda s: (
            _cpu_comment_run('--head-sha "$HEAD_SHA"', '--run-title "$RUN_TITLE" --head-sha "$HEAD_SHA"')(s),
            _env("pr-comment.yml", "comment-cpu", RUN_TITLE="${{ github.event.workflow_run.display_title }}")(s),
        ),
    ),
    "cpu-comment-head-from-artifact": (
        "comment-workflow",
        _env("pr-comment.yml", "comment-cpu", HEAD_SHA="${{ steps.artifact.outputs.head_sha }}"),
    ),
    "cpu-comment-branch-from-title": (
        "comment-workflow",
        _env("pr-comment.yml", "comment-cpu", HEAD_BRANCH="${{ github.event.workflow_run.display_title }}"),
    ),
    # Without --gate cpu the CPU run would overwrite the GPU gate's comment.
    "cpu-comment-without-gate": ("comment-workflow", _cpu_comment_run("--gate cpu ", "")),
    "cpu-comment-runs-more-than-the-comment": (
        "comment-workflow",
        _cpu_comment_run("./scripts/pr-comment", "pip install -r requirements/ci-cpu.txt && ./scripts/pr-comment"),
    ),
    "cpu-comment-runs-a-second-line": (
        "comment-workflow",
        _cpu_comment_run('"$SUMMARY"', '"$SUMMARY"\n./scripts/ci-counts'),
    ),
    "cpu-comment-for-every-pull-request-run": (
        "comment-workflow",
        set_("pr-comment.yml:comment-cpu:if", "github.event.workflow_run.event == 'pull_request'"),
    ),
    "cpu-comment-reads-the-gpu-artifact": (
        "artifacts-downloaded-by-name",
        set_("pr-comment.yml:comment-cpu:steps.1.with.name", "perfgate-pr"),
    ),
    "gpu-comment-reads-the-cpu-artifact": (
        "artifacts-downloaded-by-name",
        set_("pr-comment.yml:comment:steps.1.with.name", "perfgate-pr-cpu"),
    ),
    # The GPU comment after a pull request's own run of a workflow named benchmark-gpu (its title forged).
    "gpu-comment-for-pull-request-runs": (
        "comment-workflow",
        lambda s: job(s, "pr-comment.yml", "comment").update(
            {"if": job(s, "pr-comment.yml", "comment")["if"].replace("'pull_request_target'", "'pull_request'")}
        ),
    ),
    # --gate cpu copied into the GPU job: its runs would overwrite the CPU gate's comment.
    "gpu-comment-with-the-cpu-gate": (
        "comment-workflow",
        lambda s: run_step(s, "pr-comment.yml", "comment").update(
            run=run_step(s, "pr-comment.yml", "comment")["run"].replace("--author", "--gate cpu --author")
        ),
    ),
    "cpu-comment-writes-contents": (
        "job-permissions-minimal",
        set_("pr-comment.yml:comment-cpu:permissions.contents", "write"),
    ),
}
MISTAKES.update(CPU_COMMENT_MISTAKES)

# The review of the workflows that never ran on GitHub (history.yml, pages.yml, benchmark-cpu.yml).
GPU_BY_HAND = (
    "(github.event.workflow_run.event != 'workflow_dispatch'"
    " || startsWith(github.event.workflow_run.path, '.github/workflows/benchmark-cpu.yml')) && "
)


def _in_group(workflow: str, old: str, new: str) -> Callable[[Setup], None]:
    """Replace `old` with `new` in the workflow's concurrency group."""

    def apply(s: Setup) -> None:
        block = s.workflows[workflow]["concurrency"]
        assert old in block["group"], old
        block["group"] = block["group"].replace(old, new)

    return apply


WORKFLOW_REVIEW_MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    # A run of benchmark-gpu by hand (a subset, or an A/B with no results.json) kept as tier pr.
    "history-keeps-gpu-runs-by-hand": ("history-keeps-main-runs-only", _history_if("validate", GPU_BY_HAND, "")),
    "history-pushes-gpu-runs-by-hand": ("history-keeps-main-runs-only", _history_if("push", GPU_BY_HAND, "")),
    # Main's runs waiting for the data branch replaced by a pull request's skipped run, or a third.
    "history-one-group-for-every-run": (
        "skipped-runs-apart",
        set_("history.yml::concurrency", {"group": "perfgate-history", "cancel-in-progress": False, "queue": "max"}),
    ),
    "history-one-pending-run": ("history-queue-kept-runs", set_("history.yml::concurrency.queue", None)),
    "history-group-keeps-gpu-runs-by-hand": ("skipped-runs-apart", _in_group("history.yml", GPU_BY_HAND, "")),
    "history-group-keeps-skipped-runs": (
        "skipped-runs-apart",
        _in_group("history.yml", "&& github.event.workflow_run.conclusion != 'skipped' ", ""),
    ),
    "history-group-per-run-for-kept-runs": (
        "history-queue-kept-runs",
        _in_group("history.yml", "&& 'perfgate-history'", "&& format('perfgate-history-{0}', github.run_id)"),
    ),
    # Pages: a pull request's skipped history run (its pages run builds nothing) in the shared group
    # replaces a kept run's build waiting there; cancel-in-progress stops a deployment part-way.
    "pages-one-group-for-every-run": (
        "skipped-runs-apart",
        set_("pages.yml::concurrency", {"group": "pages", "cancel-in-progress": False}),
    ),
    "pages-group-keeps-failed-history-runs": (
        "skipped-runs-apart",
        _in_group("pages.yml", "&& github.event.workflow_run.conclusion == 'success' ", ""),
    ),
    "pages-cancels-in-progress": ("deployments-not-cancelled", set_("pages.yml::concurrency.cancel-in-progress", True)),
    "pages-deploy-job-cancels": (
        "deployments-not-cancelled",
        set_("pages.yml:deploy:concurrency", {"group": "deploy-${{ github.run_id }}", "cancel-in-progress": True}),
    ),
    # The comment's group by the run's name and branch alone: main's runs, cancelled ones and a fork's
    # own workflow named benchmark-gpu (each skips both jobs) would replace a comment waiting there.
    "comment-group-for-every-run": (
        "skipped-runs-apart",
        set_(
            "pr-comment.yml::concurrency.group",
            "perfgate-comment-${{ github.event.workflow_run.name }}-"
            "${{ github.event.workflow_run.head_repository.full_name }}-${{ github.event.workflow_run.head_branch }}",
        ),
    ),
    # The groups of runs that do work: pages deployments at once, a push's build beside one after
    # history, a comment per run id, the two gates' comments replacing each other's; and a watcher
    # that watches nothing, which no group rule would look at.
    "pages-group-per-run": (
        "working-runs-grouped",
        _in_group("pages.yml", "&& 'pages'", "&& format('pages-{0}', github.run_id)"),
    ),
    "pages-push-builds-apart": (
        "working-runs-grouped",
        _in_group("pages.yml", "github.event_name != 'workflow_run' ||", "false ||"),
    ),
    "comment-group-per-run": (
        "working-runs-grouped",
        _in_group(
            "pr-comment.yml",
            "format('perfgate-comment-gpu-{0}-{1}', github.event.workflow_run.head_repository.full_name",
            "format('perfgate-comment-gpu-{0}-{1}', github.run_id",
        ),
    ),
    "comment-gates-share-a-group": (
        "working-runs-grouped",
        _in_group("pr-comment.yml", "perfgate-comment-cpu-", "perfgate-comment-gpu-"),
    ),
    "pages-watches-nothing": ("skipped-runs-apart", set_("pages.yml::on.workflow_run.workflows", [])),
    # history.yml after a benchmark run that failed before it uploaded: red; or after one that
    # succeeded, a lost artifact read as "nothing kept".
    "history-download-fails-without-artifact": (
        "history-downloads-allow-failed-runs",
        set_("history.yml:validate:steps.1.continue-on-error", None),
    ),
    "history-download-always-tolerated": (
        "history-downloads-allow-failed-runs",
        set_("history.yml:validate:steps.2.continue-on-error", True),
    ),
    # The queue on the GPU jobs' workflow: pull requests' runs would line up with main's.
    "queue-max-on-the-gpu-workflow": ("no-shared-gpu-queue", set_("benchmark-gpu.yml::concurrency.queue", "max")),
}
MISTAKES.update(WORKFLOW_REVIEW_MISTAKES)


# The review of the fleet against ARC's source (gha-runner-scale-set-0.14.2): what ARC builds from
# the values, the device plugin, the network policies as Kubernetes adds them up, the concurrency
# groups a pull request's own workflow could name.
def _daemonset(s: Setup) -> dict:
    return next(d for d in s.k8s if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]


def _init_container(image: str, **security: Any) -> Callable[[Setup], None]:
    """An init container added to the pull-request runner pod (a cache warmer, a permissions fix)."""

    def apply(s: Setup) -> None:
        sc = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, **security}
        _values("pr")(s)["template"]["spec"]["initContainers"] = [
            {"name": "warm", "image": image, "command": ["true"], "securityContext": sc}
        ]

    return apply


def _time_slicing(s: Setup) -> None:
    """The device plugin's documented way to share a GPU: a ConfigMap mounted as its config file."""
    spec = _daemonset(s)
    spec["volumes"].append({"name": "config", "configMap": {"name": "time-slicing-config"}})
    spec["containers"][0]["volumeMounts"].append({"name": "config", "mountPath": "/config"})


def _extra_policy(namespace: str, name: str, spec: dict) -> dict:
    """A second NetworkPolicy in a runner namespace, as a new file under deploy/k8s/ would add it:
    one named before network-policies.yaml (allow-egress.yaml) is read first."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, **spec},
    }


def _listener(s: Setup, name: str) -> dict:
    return _values(name)(s)["listenerTemplate"]["spec"]["containers"][0]


RUNNER_IMAGE = "ghcr.io/OWNER/perfgate-gpu-runner@sha256:" + "0" * 64
FLEET_REVIEW_MISTAKES: dict[str, tuple[str, Callable[[Setup], None]]] = {
    # Init containers are containers of the pod: the same rules.
    "privileged-init-container": (
        "runner-pods-restricted",
        _init_container(RUNNER_IMAGE, privileged=True, allowPrivilegeEscalation=True),
    ),
    "root-init-container": ("runner-pods-restricted", _init_container(RUNNER_IMAGE, runAsUser=0)),
    "init-container-by-tag": ("images-by-digest", _init_container("busybox:1.36")),
    "device-plugin-init-container-by-tag": (
        "images-by-digest",
        lambda s: _daemonset(s).update(initContainers=[{"name": "init", "image": "busybox:1.36"}]),
    ),
    # The listener pod (in arc-systems, restricted): ARC sets no security context of its own.
    "listener-without-template": ("listener-pods-restricted", lambda s: _values("pr")(s).pop("listenerTemplate")),
    "listener-keeps-capabilities": (
        "listener-pods-restricted",
        lambda s: _listener(s, "main")["securityContext"].pop("capabilities"),
    ),
    "listener-template-misnamed": (
        "listener-pods-restricted",
        lambda s: _listener(s, "pr").update(name="ghalistener"),  # added beside the listener, not merged
    ),
    "listener-root-filesystem-writable": (
        "listener-pods-restricted",
        lambda s: _listener(s, "pr")["securityContext"].pop("readOnlyRootFilesystem"),
    ),
    "listener-without-resources": ("listener-pods-restricted", lambda s: _listener(s, "main").pop("resources")),
    # The device plugin: NVML under the toolkit's runtime; whole GPUs only.
    "device-plugin-under-runc": ("device-plugin-as-documented", lambda s: _daemonset(s).pop("runtimeClassName")),
    "device-plugin-config-file": (
        "device-plugin-as-documented",
        lambda s: _daemonset(s)["containers"][0]["args"].append("--config-file=/config/config.yaml"),
    ),
    "device-plugin-time-slicing-config-map": ("device-plugin-as-documented", _time_slicing),
    "device-plugin-config-by-environment": (
        "device-plugin-as-documented",
        lambda s: _daemonset(s)["containers"][0].update(env=[{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]),
    ),
    "device-plugin-mig-mixed": (
        "device-plugin-as-documented",
        lambda s: _daemonset(s)["containers"][0].update(args=["--mig-strategy=mixed", "--fail-on-init-error=true"]),
    ),
    # The controller's image, which every listener runs too.
    "controller-image-by-tag": (
        "images-by-digest",
        lambda s: s.values["controller.yaml"]["image"].update(tag="0.14.2"),
    ),
    "controller-image-chart-default": ("images-by-digest", lambda s: s.values["controller.yaml"].pop("image")),
    "controller-image-other-version": (
        "images-by-digest",
        lambda s: s.values["controller.yaml"]["image"].update(
            tag=s.values["controller.yaml"]["image"]["tag"].replace("0.14.2", "0.13.1")
        ),
    ),
    "listener-side-car-by-tag": (
        "images-by-digest",
        lambda s: _values("pr")(s)["listenerTemplate"]["spec"]["containers"].append(
            {"name": "side-car", "image": "example/sidecar:1"}
        ),
    ),
    # Network policies add up: each one in a runner namespace counts, whatever its file or name.
    "pr-extra-policy-allows-all-egress": (
        "namespaces-restricted",
        lambda s: s.k8s.insert(0, _extra_policy(PR_SET, "allow-egress", {"policyTypes": ["Egress"], "egress": [{}]})),
    ),
    "main-extra-policy-ingress-from-all-namespaces": (
        "namespaces-restricted",
        lambda s: s.k8s.insert(
            0,
            _extra_policy(
                MAIN_SET,
                "allow-metrics",
                {"policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {}}]}]},
            ),
        ),
    ),
    "pr-egress-port-range": (
        "namespaces-restricted",
        lambda s: _policy(s, PR_SET)["spec"]["egress"][1]["ports"][0].update(endPort=65535),
    ),
    # Concurrency groups: a pull request's run in main's group, and main's groups a pull request can name.
    "gpu-group-by-ref": (
        "concurrency-groups-apart",
        set_("benchmark-gpu.yml::concurrency.group", "${{ github.workflow }}-${{ github.ref }}"),
    ),
    "gpu-group-by-head-ref": (
        "concurrency-groups-apart",
        set_("benchmark-gpu.yml::concurrency.group", "${{ github.workflow }}-${{ github.head_ref || github.ref }}"),
    ),
    "gpu-group-per-ref-on-main": (  # the file before: benchmark-gpu-refs/heads/main, nameable
        "concurrency-groups-apart",
        set_(
            "benchmark-gpu.yml::concurrency.group",
            "${{ github.workflow }}-${{ github.event.pull_request.number || github.ref }}",
        ),
    ),
    "cpu-group-per-ref-on-main": (
        "concurrency-groups-apart",
        set_(
            "benchmark-cpu.yml::concurrency.group",
            "${{ github.workflow }}-${{ github.event.pull_request.number || github.ref }}",
        ),
    ),
    "approval-job-group-by-ref": (
        "concurrency-groups-apart",
        set_(
            "benchmark-gpu.yml:approve:concurrency",
            {"group": "${{ github.workflow }}-${{ github.ref }}", "cancel-in-progress": True},
        ),
    ),
    "record-group-shared-with-benchmark": (  # a serialising group may be fixed only where named
        "concurrency-groups-apart",
        set_("benchmark-gpu.yml::concurrency.group", "record-baselines"),
    ),
}
MISTAKES.update(FLEET_REVIEW_MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_realistic_mistake_is_caught(mistake: str) -> None:
    expected, change = MISTAKES[mistake]
    assert expected in {r.id for r in rules.RULES}, expected
    mutated = copy.deepcopy(REAL)
    change(mutated)
    found = failing(mutated)
    assert expected in found, f"{mistake}: not caught by {expected}; failing rules: {found}"


def test_no_rule_is_dead() -> None:
    """Every rule is the catcher of at least one mistake above (and each did catch it there)."""
    assert {r.id for r in rules.RULES} <= {expected for expected, _ in MISTAKES.values()}


def test_every_uses_line_names_its_release() -> None:
    """A pin is reviewable: the release it stands for in a comment (Dependabot updates both)."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(- )?uses:", line):
                assert re.search(r"uses: [\w-]+/[\w-]+@[0-9a-f]{40}  # v\d+\.\d+\.\d+", line), f"{path.name}: {line}"
    dependabot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    ecosystems = {(u["package-ecosystem"], u["directory"]) for u in dependabot["updates"]}
    assert {("github-actions", "/"), ("docker", "/deploy/runner-image")} <= ecosystems


def zizmor_findings(persona: str) -> list[dict[str, Any]]:
    zizmor = tool("zizmor")
    if zizmor is None and os.environ.get("CI"):
        pytest.fail("zizmor is not installed, and in CI ($CI set) the audit must run: pip install -e '.[dev]'")
    if zizmor is None:
        pytest.skip("zizmor is not installed: pip install -e '.[dev]'")
    r = subprocess.run(
        [zizmor, "--offline", "--no-progress", f"--persona={persona}", "--format=json", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode in (0, 10, 11, 12, 13, 14), r.stderr  # 1x: findings of that severity
    return json.loads(r.stdout or "[]")


def test_zizmor_is_a_failure_not_a_skip_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without zizmor, CI fails the audit instead of skipping it."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(sys.modules[__name__], "tool", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="zizmor is not installed"):
        zizmor_findings("auditor")


def test_zizmor_auditor_finds_nothing() -> None:
    """zizmor in its most suspicious persona, offline: this machine cannot reach GitHub's API, so
    the online audits (known-vulnerable actions, impostor commits, ref confusion) are not run."""
    assert [f["ident"] for f in zizmor_findings("auditor")] == []


def test_the_docs_name_every_setting_a_maintainer_clicks() -> None:
    """docs/gpu-runner.md tells an admin what to set: every runner group, environment, secret and
    variable of deploy/github-settings.yml, and the fork-approval option, by the name GitHub shows."""
    docs = " ".join((ROOT / "docs" / "gpu-runner.md").read_text().split())
    names = [g["name"] for g in REAL.settings["runner_groups"]]
    for env_name, env in REAL.settings["environments"].items():
        names += [env_name, *env["secrets"], *env["variables"]]
    names += [REAL.settings["github_app"]["name"], REAL.settings["history_app"]["name"]]
    names += [v["githubConfigSecret"] for v in REAL.values.values() if "githubConfigSecret" in v]
    names += ["Require approval for all external contributors"]
    missing = [n for n in names if n not in docs]
    assert missing == []


def test_the_threat_model_links_each_control_to_a_mistake_it_catches() -> None:
    """docs/gpu-runner.md's threat-model table names, for each control, `rule`: `mistake`, ...: each
    mistake is in the table above and caught by that rule (so the link is to a test that fails
    without the control), and each test named by file::name exists."""
    docs = (ROOT / "docs" / "gpu-runner.md").read_text()
    table = docs[docs.index("### Threat model") : docs.index("### Checklist")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| attacker")]
    assert len(rows) >= 15
    rule_ids = {r.id for r in rules.RULES}
    linked = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        tests_cell = cells[-1]
        for group in re.split(r";\s*", tests_cell):
            names = re.findall(r"`([^`]+)`", group)
            if names and names[0] in rule_ids:
                for mistake in names[1:]:
                    assert MISTAKES.get(mistake, ("", None))[0] == names[0], f"{mistake} is not caught by {names[0]}"
                    linked += 1
        for path, test in re.findall(r"`(tests/[\w/]+\.py|test_\w+\.py)::(\w+)`", tests_cell):
            file = path if path.startswith("tests/") else f"tests/ci/{path}"
            assert f"def {test}(" in (ROOT / file).read_text(), f"{file}::{test}"
    assert linked >= 30


@pytest.mark.parametrize(
    ("condition", "status", "runs"),
    [
        ("github.event_name == 'pull_request_target'", "success", True),
        ("github.event_name == 'PULL_REQUEST_TARGET'", "success", True),  # GitHub compares case-insensitively
        ("github.event_name == 'pull_request_target'", "failure", False),  # no status function: success() &&
        ("${{ always() && github.event_name == 'pull_request_target' }}", "failure", True),
        ("!cancelled() && github.event_name == 'pull_request_target'", "failure", True),
        ("!cancelled() && github.event_name == 'pull_request_target'", "cancelled", False),
        ("failure()", "failure", True),
        ("success() || github.event_name == 'push'", "failure", False),
        ("github.event_name == 'push' || startsWith(github.ref, 'refs/heads/')", "success", True),
        ("!(github.event_name == 'pull_request_target')", "success", False),
        ("contains(github.event.comment.body, '/benchmark')", "success", False),  # null: ''
        (None, "failure", False),
        (True, "success", True),
    ],
)
def test_the_rules_read_a_condition_as_github_does(condition: Any, status: str, runs: bool) -> None:
    statuses = {
        "success": {},
        "failure": {"success": False, "failure": True},
        "cancelled": {"success": False, "cancelled": True},
    }
    context = {"github.event_name": "pull_request_target", "github.ref": "refs/heads/main"}
    assert rules.evaluate(condition, context, statuses[status]) is runs


def test_a_condition_the_rules_cannot_read_is_an_error_not_a_pass() -> None:
    with pytest.raises(rules.ExpressionError):
        rules.evaluate("fromJSON(github.event.x)", {})
    with pytest.raises(rules.ExpressionError):
        rules.evaluate("secrets['X'] == 'y'", {})


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("perfgate-history", "perfgate-history"),
        ("${{ github.event_name == 'push' && 'pr' || 'all' }}", "all"),
        ("run-${{ github.run_id }}", "run-1001"),
        ("${{ format('skip-{0}-{{x}}', github.run_id) }}", "skip-1001-{x}"),
        ("${{ github.event.missing }}", ""),
        ("${{ github.event_name == 'pull_request_target' }}", "true"),
    ],
)
def test_the_rules_write_a_value_as_github_does(value: str, written: str) -> None:
    context = {"github.event_name": "pull_request_target", "github.run_id": 1001}
    assert rules.interpolate(value, context) == written


def test_a_pull_request_run_in_mains_group_is_caught_where_main_may_share_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 4a mistakes are caught by the comparison of groups itself, not only because main's group
    would be fixed: even were benchmark-gpu allowed a shared group, its pull requests' runs may not
    join it."""
    monkeypatch.setitem(rules.SHARED_MAIN_GROUPS, "benchmark-gpu.yml", "a test")
    for mistake in ("gpu-group-by-ref", "gpu-group-by-head-ref"):
        mutated = copy.deepcopy(REAL)
        MISTAKES[mistake][1](mutated)
        problems = rules._groups_apart(mutated)
        assert problems and all("for pull_request_target: the group" in p for p in problems), (mistake, problems)


def test_the_docs_name_every_shared_concurrency_group() -> None:
    """Each workflow whose main runs may share a fixed group is in docs/gpu-runner.md's table, with
    what an operator does when a pull request's workflow cancels one."""
    docs = (ROOT / "docs" / "gpu-runner.md").read_text()
    table = docs[docs.index("### Concurrency groups") : docs.index("### Threat model")]
    for name in [*rules.SHARED_MAIN_GROUPS, "history.yml"]:
        assert re.search(rf"^\| `{re.escape(name)}` \|.*\|.*\|$", table, re.M), name
