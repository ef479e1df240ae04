"""The GPU fleet's deployment files (deploy/) against Kubernetes' own schemas, offline: every manifest
and both runner pod templates of the ARC scale sets, validated strictly (an unknown or misspelt field
fails) by kubernetes-validate, which bundles the schemas. The rules about what they say are in
tests/ci/rules.py; Helm's rendering of the charts is not run here (no helm, no network)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from tests.ci import rules
from tests.ci.helpers import DEPLOY
from tests.ci.rules import SCALE_SETS, controller_image, listener_pod, load_setup

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed: pip install -e '.[dev]'")

KUBERNETES = "1.33.0"  # the oldest Kubernetes ARC 0.14 and the manifests are meant for
SETUP = load_setup(DEPLOY.parent)


def schema_errors(doc: dict[str, Any]) -> str | None:
    try:
        kv.validate(doc, KUBERNETES, strict=True)
    except kv.ValidationError as exc:
        return str(exc)
    return None


def runner_pod(values: dict[str, Any]) -> dict[str, Any]:
    """A scale set's runner pod as the controller creates it from `template` (a PodTemplateSpec)."""
    template = values["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runner", **template.get("metadata", {})},
        "spec": template["spec"],
    }


def documents() -> dict[str, dict[str, Any]]:
    docs = {f"{d['kind']}/{d['metadata']['name']}@{d['metadata'].get('namespace', '-')}": d for d in SETUP.k8s}
    for v in SETUP.values.values():
        if "template" in v:
            docs[f"runner pod of {v['runnerScaleSetName']}"] = runner_pod(v)
            docs[f"listener pod of {v['runnerScaleSetName']}"] = listener_pod(v, controller_image(SETUP))
    return docs


def test_every_manifest_and_runner_pod_is_what_kubernetes_accepts() -> None:
    docs = documents()
    assert {name for name in docs if name.startswith("runner pod")} == {f"runner pod of {s}" for s in SCALE_SETS}
    assert {name for name in docs if name.startswith("listener pod")} == {f"listener pod of {s}" for s in SCALE_SETS}
    assert {d["kind"] for d in docs.values()} == {"Namespace", "NetworkPolicy", "RuntimeClass", "DaemonSet", "Pod"}
    for name, doc in docs.items():
        assert schema_errors(doc) is None, f"{name}: {schema_errors(doc)}"


@pytest.mark.parametrize(
    "mistake",
    [
        lambda pod: pod["spec"]["securityContext"].update(
            runAsNonRooot=True
        ),  # misspelt: silently ignored by a lax check
        lambda pod: pod["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": {"count": 1}}),
        lambda pod: pod["spec"]["containers"][0].update(securityContext={"capabilities": {"drop": "ALL"}}),
        lambda pod: pod["spec"]["containers"][0].update(ports=[{"containerPort": "http"}]),
    ],
    ids=["misspelt-field", "gpu-limit-not-a-quantity", "drop-not-a-list", "port-not-a-number"],
)
def test_the_schema_check_catches_a_broken_runner_pod(mistake) -> None:
    pod = copy.deepcopy(runner_pod(SETUP.values["scale-set-pr.yaml"]))
    mistake(pod)
    assert schema_errors(pod) is not None


def _spec(v: dict[str, Any]) -> dict[str, Any]:
    return v["template"]["spec"]


def test_the_scale_sets_differ_only_where_they_must() -> None:
    """One template for both, but for what must differ: the name, group and node pool; the GitHub
    credentials (each set its own App's key: the pull requests' namespace never holds main's); the
    volumes (a cache main keeps must never be one the pull-request pod can write: the pull request's
    pod has emptyDir only); the egress (the pull request's may be narrower, never wider). Anything
    else that differs is a hardening made to one set and forgotten in the other."""
    main, pr = (copy.deepcopy(SETUP.values[f"scale-set-{n}.yaml"]) for n in ("main", "pr"))
    for v, name in ((main, "main"), (pr, "pr")):
        assert v.pop("runnerGroup") == v.pop("runnerScaleSetName") == f"perfgate-gpu-{name}"
        assert _spec(v).pop("nodeSelector") == {"perfgate.dev/gpu-pool": name}
        # Secrets: each its own, named for its set.
        assert v.pop("githubConfigSecret") == f"perfgate-arc-{name}"
    # Caches: the pull-request pod's volumes are emptyDir only; main may add one of its own.
    pr_volumes = _spec(pr).pop("volumes")
    assert all(set(vol) == {"name", "emptyDir"} for vol in pr_volumes)
    main_volumes = {vol["name"]: vol for vol in _spec(main).pop("volumes")}
    assert all(main_volumes.get(vol["name"]) == vol for vol in pr_volumes)  # the scratch disks alike
    pr_mounts = {m["name"] for m in _spec(pr)["containers"][0].pop("volumeMounts")}
    main_mounts = {m["name"] for m in _spec(main)["containers"][0].pop("volumeMounts")}
    assert pr_mounts <= main_mounts and pr_mounts == {vol["name"] for vol in pr_volumes}
    assert main == pr
    # Egress: every peer and port the pull request's pods reach, main's reach too. Policies add up:
    # every policy of the namespace counts, not the last one read.
    egress = {
        ns: [r for d in SETUP.k8s if d["kind"] == "NetworkPolicy" and d["metadata"]["namespace"] == ns
             for r in d["spec"].get("egress") or []]
        for ns in ("perfgate-gpu-main", "perfgate-gpu-pr")
    }  # fmt: skip
    assert all(r in egress["perfgate-gpu-main"] for r in egress["perfgate-gpu-pr"])


def test_the_scale_set_test_refuses_a_shared_cache_and_a_shared_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above fails on the mistakes it exists for: one inductor-cache volume in both sets,
    one ARC key for both."""
    cache = {"name": "inductor", "persistentVolumeClaim": {"claimName": "perfgate-inductor"}}
    for mistake in ("cache", "key"):
        values = copy.deepcopy(SETUP.values)
        for name in ("main", "pr"):
            spec = values[f"scale-set-{name}.yaml"]["template"]["spec"]
            if mistake == "cache":
                spec["volumes"].append(copy.deepcopy(cache))
                spec["containers"][0]["volumeMounts"].append({"name": "inductor", "mountPath": "/cache"})
            else:
                values[f"scale-set-{name}.yaml"]["githubConfigSecret"] = "perfgate-arc-github-app"
        monkeypatch.setattr(SETUP, "values", values)
        with pytest.raises(AssertionError):
            test_the_scale_sets_differ_only_where_they_must()
        monkeypatch.undo()


def test_the_scale_set_test_refuses_wider_pull_request_egress_in_a_second_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Policies add up: a second policy in perfgate-gpu-pr (a file read before
    network-policies.yaml) that lets its pods reach SSH anywhere widens its egress beyond main's."""
    wider = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow-ssh", "namespace": "perfgate-gpu-pr"},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 22}]}],
        },
    }
    monkeypatch.setattr(SETUP, "k8s", [wider, *SETUP.k8s])
    with pytest.raises(AssertionError):
        test_the_scale_sets_differ_only_where_they_must()


def test_the_runner_image_ends_as_the_runner_user_and_installs_the_lock_only() -> None:
    dockerfile = SETUP.dockerfile
    assert re.findall(r"^USER\s+(\S+)", dockerfile, re.M)[-1] == "runner"
    installs = re.findall(r"pip install[^\n]*", dockerfile)
    assert installs == [
        "pip install --no-cache-dir --disable-pip-version-check --require-hashes -r /tmp/perfgate-lock/gpu.txt \\"
    ]
    assert "COPY requirements/gpu.txt" in dockerfile
    for values in SETUP.values.values():
        for c in values.get("template", {}).get("spec", {}).get("containers", []):
            assert c["name"] == "runner" and c["command"] == ["/home/runner/run.sh"]  # what ARC's controller expects
    # The workflows use the environment where the image put it.
    for wf in SETUP.workflows.values():
        for job in wf["jobs"].values():
            for st in job.get("steps", []):
                if "PERFGATE_VENV" in st.get("env", {}):
                    assert st["env"]["PERFGATE_VENV"] == "/opt/perfgate/venv" and "/opt/perfgate/venv" in dockerfile


def test_the_chart_releases_read_as_helm_commands() -> None:
    charts = yaml.safe_load((DEPLOY / "arc" / "charts.yaml").read_text())
    for r in charts["releases"]:
        assert r["chart"].startswith("oci://ghcr.io/actions/actions-runner-controller-charts/gha-runner-scale-set")
        assert (DEPLOY / "arc" / r["values"]).is_file()


def test_each_listener_pod_as_arc_builds_it_is_one_restricted_admits() -> None:
    """ARC's listener pod, its defaults merged with listenerTemplate as the controller merges them,
    passes the checks the runner pods pass (but for the API token the listener needs); without the
    template (the files before it) or with a template that keeps the capabilities, it does not."""
    assert rules._listener_pods(SETUP) == []
    for mistake in ("no template", "no drop ALL"):
        setup = copy.deepcopy(SETUP)
        for name in ("main", "pr"):
            values = setup.values[f"scale-set-{name}.yaml"]
            if mistake == "no template":
                values.pop("listenerTemplate")
            else:
                values["listenerTemplate"]["spec"]["containers"][0]["securityContext"].pop("capabilities")
        assert any("may escalate privileges or keeps capabilities" in p for p in rules._listener_pods(setup)), mistake


def test_the_listener_pod_is_merged_as_arc_merges_it() -> None:
    """resourcebuilder.go's mergeListenerPodWithTemplate: the container named `listener` takes the
    template's securityContext and resources; any other is added beside it; the pod's security
    context and tolerations are the template's, or none."""
    values = {
        "runnerScaleSetName": "x",
        "listenerTemplate": {
            "spec": {
                "containers": [
                    {"name": "listener", "env": [{"name": "A", "value": "1"}], "securityContext": {"runAsUser": 1}},
                    {"name": "side-car", "image": "example"},
                ]
            }
        },
    }
    pod = listener_pod(values, "img:1")["spec"]
    listener, side = pod["containers"]
    assert listener["image"] == "img:1" and listener["command"] == ["/ghalistener"]
    assert [e["name"] for e in listener["env"]] == ["LISTENER_CONFIG_PATH", "A"]
    assert listener["securityContext"] == {"runAsUser": 1} and "resources" not in listener
    assert side == {"name": "side-car", "image": "example"}
    assert "securityContext" not in pod and "terminationGracePeriodSeconds" not in pod
    assert pod["volumes"][0]["secret"]["secretName"] == "x-listener-config"
    bare = listener_pod({"runnerScaleSetName": "x"}, "img:1")["spec"]
    assert "securityContext" not in bare and "securityContext" not in bare["containers"][0]
