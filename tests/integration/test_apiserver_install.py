"""`kubectl apply -k deploy/overlays/example` on a real kube-apiserver: every
object of the overlay's rendering (tests/deploy/kustomize.py, no kubectl) is
accepted; a pod of every Deployment and of the Job, and a proxy pod of the
kubernetes provider, is admitted in the namespace (Pod Security
"restricted" enforced, each ServiceAccount present); every ServiceAccount
may do what its process needs and not what it does not (the authorizer's
SubjectAccessReview, `kubectl auth can-i --as`); and `fleet secrets ensure`,
run as the Job's ServiceAccount, creates the Secrets, keeps what exists and
prints no value. The pure checks of the same install are in
tests/deploy/test_overlay.py."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest

from fleet.cli import secrets as secrets_cli
from fleet.cli import subcommands
from fleet.testing.kubeserver import KubeServer, apply_all, collection_path
from providers.base import CreateRequest
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.pod import build_pod
from tests.deploy import kustomize
from tests.deploy.conftest import DEPLOY

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

NS = "fleet-system"
GROUP = "crawl.example.com"


@pytest.fixture(scope="module")
def installed(kube_server: KubeServer) -> list[dict[str, Any]]:
    objects = kustomize.render(DEPLOY / "overlays" / "example")
    apply_all(kube_server, objects)
    return objects


def user(account: str) -> str:
    return f"system:serviceaccount:{NS}:{account}"


def test_every_object_of_the_overlay_is_accepted(kube_server, installed):
    for obj in installed:
        path = f"{collection_path(obj)}/{obj['metadata']['name']}"
        got = kube_server.json("GET", path)
        assert got["metadata"]["name"] == obj["metadata"]["name"], path
    ns = kube_server.json("GET", f"/api/v1/namespaces/{NS}")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def pod_of(workload: dict[str, Any], suffix: str = "admitted") -> dict[str, Any]:
    template = workload["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload['metadata']['name']}-{suffix}", "namespace": NS,
                         "labels": template["metadata"]["labels"]},
            "spec": template["spec"]}


def test_every_pod_is_admitted_under_the_restricted_pod_security_standard(kube_server, installed):
    workloads = [o for o in installed if o["kind"] in ("Deployment", "Job")]
    assert len(workloads) == 9  # controller, beat, worker, prober, api, gateway, flower, redis; the secrets Job
    for w in workloads:
        status, raw = kube_server.request("POST", f"/api/v1/namespaces/{NS}/pods", pod_of(w))
        assert status == 201, (w["metadata"]["name"], raw[:1000])
    # the kubernetes provider's proxy pods run in this namespace too, as its `default` ServiceAccount (no token),
    # which a cluster's controller-manager makes in every namespace and this bare API server does not
    kube_server.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NS}})
    proxy = build_pod(CreateRequest(name="px-admitted", uid="u-1", installation=NS), KubernetesConfig(), NS)
    status, raw = kube_server.request("POST", f"/api/v1/namespaces/{NS}/pods", proxy)
    assert status == 201, raw[:1000]


def test_the_namespace_refuses_a_pod_outside_the_standard(kube_server, installed):
    (ctl,) = [o for o in installed if o["kind"] == "Deployment" and o["metadata"]["name"] == "fleet-controller"]
    bad = json.loads(json.dumps(pod_of(ctl, "privileged")))
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    status, raw = kube_server.request("POST", f"/api/v1/namespaces/{NS}/pods", bad)
    assert status == 403 and b"restricted" in raw, raw[:500]
    missing = json.loads(json.dumps(pod_of(ctl, "no-account")))
    missing["spec"]["serviceAccountName"] = "nobody"
    status, raw = kube_server.request("POST", f"/api/v1/namespaces/{NS}/pods", missing)
    assert status >= 400, raw[:500]


# (account, verb, resource, namespace, group, allowed): what `kubectl auth can-i VERB RESOURCE -n NS --as SA` answers.
CAN_I = [
    # the controller: fleet's kinds, one Secret read by name, its claim; no pods, no Secret list
    ("fleet-controller", "patch", "proxies/status", NS, GROUP, True),
    ("fleet-controller", "watch", "proxies", NS, GROUP, True),
    ("fleet-controller", "patch", "providerhealths/status", "", GROUP, True),
    ("fleet-controller", "get", "secrets", NS, "", True),  # a Proxy's cloudInit.secretRef
    ("fleet-controller", "list", "secrets", NS, "", False),
    ("fleet-controller", "create", "secrets", NS, "", False),
    ("fleet-controller", "get", "secrets", "kube-system", "", False),
    ("fleet-controller", "create", "pods", NS, "", False),
    ("fleet-controller", "watch", "proxies", "kube-system", GROUP, False),
    # the secrets Job: create Secrets here, nothing else
    ("fleet-secrets", "create", "secrets", NS, "", True),
    ("fleet-secrets", "get", "secrets", NS, "", False),
    ("fleet-secrets", "list", "secrets", NS, "", False),
    ("fleet-secrets", "update", "secrets", NS, "", False),
    ("fleet-secrets", "patch", "secrets", NS, "", False),
    ("fleet-secrets", "delete", "secrets", NS, "", False),
    ("fleet-secrets", "create", "secrets", "kube-system", "", False),
    ("fleet-secrets", "delete", "pods", NS, "", False),
    ("fleet-secrets", "create", "pods", NS, "", False),
    # the in-cluster kubernetes provider's worker: proxy pods in its namespace, the list cluster-wide
    ("fleet-worker-cluster", "create", "pods", NS, "", True),
    ("fleet-worker-cluster", "delete", "pods", NS, "", True),
    ("fleet-worker-cluster", "list", "pods", "", "", True),
    ("fleet-worker-cluster", "create", "pods", "kube-system", "", False),
    ("fleet-worker-cluster", "get", "secrets", NS, "", False),
    ("fleet-worker-cluster", "patch", "proxies/status", NS, GROUP, False),
]
# Processes that never call the Kubernetes API: no right at all.
NO_RIGHTS = ["fleet-beat", "fleet-prober", "fleet-api", "fleet-gateway", "fleet-flower", "fleet-redis"]


@pytest.mark.parametrize(("account", "verb", "resource", "namespace", "group", "want"), CAN_I)
def test_each_service_account_can_do_what_its_process_needs(kube_server, installed, account, verb, resource, namespace, group,
                                                            want):
    assert {o["metadata"]["name"] for o in installed if o["kind"] == "ServiceAccount"} >= {account}
    got, why = kube_server.can(user(account), verb, resource, namespace, group)
    assert got is want, (account, verb, resource, namespace, why)


@pytest.mark.parametrize("account", NO_RIGHTS)
def test_the_processes_that_need_no_api_have_no_right(kube_server, installed, account):
    for verb, resource, namespace, group in (("get", "secrets", NS, ""), ("list", "pods", "", ""), ("get", "configmaps", NS, ""),
                                             ("list", "proxies", NS, GROUP), ("create", "secrets", NS, "")):
        assert not kube_server.can(user(account), verb, resource, namespace, group)[0], (account, verb, resource)
    accounts = {o["metadata"]["name"]: o for o in installed if o["kind"] == "ServiceAccount"}
    assert accounts[account]["automountServiceAccountToken"] is False


def read_secret(kube_server: KubeServer, name: str) -> dict[str, str]:
    got = kube_server.json("GET", f"/api/v1/namespaces/{NS}/secrets/{name}")
    return {k: base64.b64decode(v).decode() for k, v in got["data"].items()}


def test_the_job_makes_the_secrets_once_keeps_what_exists_and_prints_no_value(kube_server, installed, tmp_path, capsys,
                                                                              caplog):
    caplog.set_level(logging.DEBUG)
    kept = "an-operator-chosen-token-0123456789"
    kube_server.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-api-token", "namespace": NS},
                       "stringData": {"token": kept}})
    as_job = kube_server.kubeconfig_for(NS, "fleet-secrets", str(tmp_path / "job.kubeconfig"))
    argv = ["secrets", "ensure", "-n", NS, "--kubeconfig", as_job]

    assert subcommands.main(argv) == 0
    first = capsys.readouterr()
    assert first.out.splitlines() == ["secret/fleet-broker created", "secret/fleet-api-token kept (exists)",
                                      "secret/fleet-gateway-clients created", "secret/fleet-flower created"]
    values = {name: read_secret(kube_server, name) for name in secrets_cli.NAMES}
    assert values["fleet-api-token"] == {"token": kept}
    assert set(values["fleet-broker"]) == {"url", "redis-password"}
    assert values["fleet-broker"]["redis-password"] in values["fleet-broker"]["url"]

    assert subcommands.main(argv) == 0  # again: nothing changes
    second = capsys.readouterr()
    assert second.out.splitlines() == [f"secret/{n} kept (exists)" for n in secrets_cli.NAMES]
    assert {name: read_secret(kube_server, name) for name in secrets_cli.NAMES} == values

    said = first.out + first.err + second.out + second.err + caplog.text
    for secret in values.values():
        for value in secret.values():
            for line in value.splitlines():
                assert len(line) < 8 or line.strip() not in said, "a Secret value was printed or logged"
    for value in (values["fleet-broker"]["redis-password"], kept):
        assert value not in said


def test_without_the_role_the_job_says_what_is_missing(kube_server, installed, tmp_path, capsys):
    as_beat = kube_server.kubeconfig_for(NS, "fleet-beat", str(tmp_path / "beat.kubeconfig"))
    assert subcommands.main(["secrets", "ensure", "-n", NS, "--kubeconfig", as_beat]) == 3
    err = capsys.readouterr().err
    assert "forbidden (403)" in err and "'create' on resource 'secrets'" in err and "fleet-secrets" in err
