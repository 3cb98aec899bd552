"""Issue 8, item 3 (RBAC): the in-cluster kubernetes worker may list pods
cluster-wide and create/get/delete them only in the proxies' namespace; the
cluster-scoped objects of two installations never share a name, so a second
`fleet render --namespace other | kubectl apply -f -` rebinds nothing of the
first; and a create the RBAC refuses (a 403 from the API) is a classified
provider error, a refused list a Forbidden verdict, never a crash."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.render import INSTALLATION_LABEL, render
from fleet.config import load
from fleet.testing.kubeapi import status_body
from providers import base
from providers.base import CreateRequest, Deadline
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.provider import KubernetesProvider, new
from tests.deploy import cluster
from tests.deploy.test_manifests import validate

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition"}
KUBE = """\
providers:
  - name: cluster
    type: kubernetes
    kubernetes: {namespace: proxies}
  - name: demo
    type: fake
    fake: {}
"""


def rendered(tmp_path: Path, text: str = KUBE, **kw: Any) -> list[dict[str, Any]]:
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    return render(load(str(path)), text, **kw)


def worker(ns: str = "fleet-system") -> tuple[str, str]:
    return (ns, "fleet-worker-cluster")


# --- one installation: least privilege ---------------------------------------------


def test_the_kubernetes_worker_creates_pods_only_in_the_proxies_namespace(tmp_path):
    objs = rendered(tmp_path)
    validate(objs)
    sa = worker()
    assert cluster.can(objs, sa, "list", "pods", None)  # the check and GC: cluster-wide
    for verb in ("create", "get", "delete"):
        assert cluster.can(objs, sa, verb, "pods", "proxies"), verb
        assert not cluster.can(objs, sa, verb, "pods", "kube-system"), verb
        assert not cluster.can(objs, sa, verb, "pods", "fleet-system"), verb
        assert not cluster.can(objs, sa, verb, "pods", None), verb
    assert not cluster.can(objs, sa, "create", "secrets", "proxies")
    assert not cluster.can(objs, sa, "watch", "pods", None)
    # nobody else gets pod rights; the controller only ProviderHealth
    for account in [("fleet-system", "fleet-controller"), ("fleet-system", "fleet-beat"), ("fleet-system", "fleet-worker-demo")]:
        assert not cluster.can(objs, account, "create", "pods", "proxies"), account
        assert not cluster.can(objs, account, "list", "pods", None), account
    controller = ("fleet-system", "fleet-controller")
    assert cluster.can(objs, controller, "patch", "providerhealths/status", None, group="crawl.example.com")
    assert not cluster.can(objs, controller, "update", "providerhealths", None, group="crawl.example.com")


def test_without_namespace_the_role_is_in_the_workers_own(tmp_path):
    objs = rendered(tmp_path, KUBE.replace("{namespace: proxies}", "{}"), namespace="crawl")
    assert cluster.can(objs, worker("crawl"), "create", "pods", "crawl")
    assert not cluster.can(objs, worker("crawl"), "create", "pods", "proxies")


def test_the_evaluator_is_not_vacuous(tmp_path):
    objs = rendered(tmp_path)
    # one ClusterRole with every verb, as before the issue: create anywhere
    wide = [
        {**o, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get", "list"]}]}
        if o["kind"] == "ClusterRole" and "worker" in o["metadata"]["name"] else o
        for o in objs
    ]
    assert cluster.can(wide, worker(), "create", "pods", "kube-system")
    # a RoleBinding in another namespace grants nothing in this one
    moved = [{**o, "metadata": {**o["metadata"], "namespace": "kube-system"}} if o["kind"] == "RoleBinding" else o for o in objs]
    assert not cluster.can(moved, worker(), "create", "pods", "proxies")


# --- the Proxy controller (issue 12) ------------------------------------------------


CONTROLLER = ("fleet-system", "fleet-controller")
PROXY_GROUP = "crawl.example.com"


def test_by_default_the_controller_serves_the_proxies_of_its_own_namespace_only(tmp_path):
    objs = rendered(tmp_path)
    validate(objs)
    for verb in ("get", "list", "watch", "patch", "update"):
        assert cluster.can(objs, CONTROLLER, verb, "proxies", "fleet-system", group=PROXY_GROUP), verb
        for ns in (None, "crawl-team", "kube-system"):
            assert not cluster.can(objs, CONTROLLER, verb, "proxies", ns, group=PROXY_GROUP), (verb, ns)
    for verb in ("get", "patch", "update"):
        assert cluster.can(objs, CONTROLLER, verb, "proxies/status", "fleet-system", group=PROXY_GROUP), verb
        assert not cluster.can(objs, CONTROLLER, verb, "proxies/status", "crawl-team", group=PROXY_GROUP), verb
    # a ProxyPool's members: the controller creates and deletes them one by one, in its namespaces only
    for verb in ("create", "delete"):
        assert cluster.can(objs, CONTROLLER, verb, "proxies", "fleet-system", group=PROXY_GROUP), verb
        assert not cluster.can(objs, CONTROLLER, verb, "proxies", "crawl-team", group=PROXY_GROUP), verb
    assert not cluster.can(objs, CONTROLLER, "deletecollection", "proxies", "fleet-system", group=PROXY_GROUP)
    # ProxyPools: read, spec.replicas by patch, the status; never created, deleted or scaled through /scale
    for verb in ("get", "list", "watch", "patch"):
        assert cluster.can(objs, CONTROLLER, verb, "proxypools", "fleet-system", group=PROXY_GROUP), verb
        assert not cluster.can(objs, CONTROLLER, verb, "proxypools", "crawl-team", group=PROXY_GROUP), verb
    for verb in ("get", "patch"):
        assert cluster.can(objs, CONTROLLER, verb, "proxypools/status", "fleet-system", group=PROXY_GROUP), verb
    for verb in ("create", "delete", "update"):
        assert not cluster.can(objs, CONTROLLER, verb, "proxypools", "fleet-system", group=PROXY_GROUP), verb
    assert not cluster.can(objs, CONTROLLER, "patch", "proxypools/scale", "fleet-system", group=PROXY_GROUP)
    # ProviderHealth is cluster-scoped: a ClusterRole whatever the scope, and stays unwatched
    assert cluster.can(objs, CONTROLLER, "patch", "providerhealths/status", None, group=PROXY_GROUP)
    assert not cluster.can(objs, CONTROLLER, "watch", "providerhealths", None, group=PROXY_GROUP)
    (env,) = [c["env"] for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "fleet-controller"
              for c in o["spec"]["template"]["spec"]["containers"]]
    assert {"name": "FLEET_PROXY_NAMESPACES", "value": "fleet-system"} in env


def test_listed_namespaces_get_a_role_each_and_nothing_elsewhere(tmp_path):
    objs = rendered(tmp_path, proxy_namespaces=("crawl-team", "crawl-b"))
    validate(objs)
    roles = sorted((o["kind"], o["metadata"].get("namespace")) for o in objs
                   if o["kind"] in ("Role", "RoleBinding") and "controller" in o["metadata"]["name"])
    assert roles == [("Role", "crawl-b"), ("Role", "crawl-team"), ("RoleBinding", "crawl-b"), ("RoleBinding", "crawl-team")]
    for ns in ("crawl-team", "crawl-b"):
        assert cluster.can(objs, CONTROLLER, "watch", "proxies", ns, group=PROXY_GROUP)
        assert cluster.can(objs, CONTROLLER, "get", "secrets", ns)
    for ns in (None, "fleet-system", "kube-system", "other"):
        assert not cluster.can(objs, CONTROLLER, "watch", "proxies", ns, group=PROXY_GROUP), ns
        assert not cluster.can(objs, CONTROLLER, "get", "secrets", ns), ns


def test_the_namespace_claim_is_one_named_lease(tmp_path):
    objs = rendered(tmp_path, proxy_namespaces=("crawl-team",))
    lease = ("coordination.k8s.io", "leases")
    assert cluster.can(objs, CONTROLLER, "create", lease[1], "crawl-team", group=lease[0])
    for verb in ("get", "patch"):
        assert cluster.can(objs, CONTROLLER, verb, lease[1], "crawl-team", group=lease[0], name="fleet-proxies"), verb
        assert not cluster.can(objs, CONTROLLER, verb, lease[1], "crawl-team", group=lease[0], name="kube-scheduler"), verb
    for verb in ("list", "watch", "delete", "update"):
        assert not cluster.can(objs, CONTROLLER, verb, lease[1], "crawl-team", group=lease[0], name="fleet-proxies"), verb
    assert not cluster.can(objs, CONTROLLER, "create", lease[1], "kube-system", group=lease[0])
    wide = rendered(tmp_path, proxy_namespaces=("*",))
    assert cluster.can(wide, CONTROLLER, "list", lease[1], None, group=lease[0])  # `*` looks for others' claims at start
    assert not cluster.can(wide, CONTROLLER, "patch", lease[1], "kube-system", group=lease[0], name="kube-scheduler")


def test_the_controller_may_only_get_secrets_and_nobody_else_read_them(tmp_path):
    objs = rendered(tmp_path, KUBE + "  - name: gce\n    type: gcp\n    gcp: {project: egress-proxies}\n",
                    proxy_namespaces=("crawl-team",))
    assert cluster.can(objs, CONTROLLER, "get", "secrets", "crawl-team")  # a Proxy's cloudInit.secretRef
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not cluster.can(objs, CONTROLLER, verb, "secrets", "crawl-team"), verb
        assert not cluster.can(objs, CONTROLLER, verb, "secrets", None), verb
    # provider workers (their credentials come mounted) and beat cannot read any Secret
    for account in (worker(), ("fleet-system", "fleet-worker-demo"), ("fleet-system", "fleet-worker-gce"),
                    ("fleet-system", "fleet-beat")):
        for ns in ("proxies", "crawl-team", "fleet-system", None):
            assert not cluster.can(objs, account, "get", "secrets", ns), (account, ns)
            assert not cluster.can(objs, account, "list", "secrets", ns), (account, ns)
        assert not cluster.can(objs, account, "patch", "proxies/status", "crawl-team", group=PROXY_GROUP), account


def test_no_cluster_wide_secret_read_unless_every_namespace_is_asked_for(tmp_path):
    """Issue 18: `can-i get secrets -n kube-system` is no for every rendered
    ServiceAccount by default; `*` is the widest grant and says so."""
    objs = rendered(tmp_path)
    accounts = {("fleet-system", o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"}
    assert CONTROLLER in accounts and len(accounts) >= 6
    for account in accounts:
        assert not cluster.can(objs, account, "get", "secrets", "kube-system"), account
    assert not any(o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith(":secrets") for o in objs)
    wide = rendered(tmp_path, proxy_namespaces=("*",))
    for ns in (None, "kube-system", "crawl-team"):
        assert cluster.can(wide, CONTROLLER, "get", "secrets", ns), ns
        assert cluster.can(wide, CONTROLLER, "watch", "proxies", ns, group=PROXY_GROUP), ns
    assert not cluster.can(wide, CONTROLLER, "list", "secrets", None)


ALICE = ("crawl-team", "alice")


def bound(role: dict[str, Any], ns: str = "crawl-team") -> list[dict[str, Any]]:
    """`role` and a RoleBinding of it in `ns` to ServiceAccount crawl-team/alice."""
    return [role, {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": ns},
                   "roleRef": {"kind": "ClusterRole", "name": role["metadata"]["name"]},
                   "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "crawl-team"}]}]


def peoples_roles(objs: list[dict[str, Any]], kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `kind`-editor-role and `kind`-viewer-role ClusterRoles."""
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    return roles[f"{kind}-editor-role"], roles[f"{kind}-viewer-role"]


@pytest.mark.parametrize(("kind", "resource"), [("proxy", "proxies"), ("proxypool", "proxypools")])
def test_the_peoples_editor_writes_in_its_namespace_the_viewer_reads_and_neither_touches_status_or_secrets(
        rendered, kind, resource):
    editor, viewer = peoples_roles(rendered, kind)
    for verb in ("create", "delete", "get", "list", "patch", "update", "watch"):
        assert cluster.can(bound(editor), ALICE, verb, resource, "crawl-team", group=PROXY_GROUP), verb
        assert not cluster.can(bound(editor), ALICE, verb, resource, "other", group=PROXY_GROUP), verb
    for role in (editor, viewer):
        assert not cluster.can(bound(role), ALICE, "patch", f"{resource}/status", "crawl-team", group=PROXY_GROUP)
        assert not cluster.can(bound(role), ALICE, "get", "secrets", "crawl-team")
        assert not any(lbl.startswith("rbac.authorization.k8s.io/aggregate") for lbl in role["metadata"].get("labels", {}))
    for verb in ("get", "list", "watch"):
        assert cluster.can(bound(viewer), ALICE, verb, resource, "crawl-team", group=PROXY_GROUP), verb
    for verb in ("create", "delete", "patch", "update"):
        assert not cluster.can(bound(viewer), ALICE, verb, resource, "crawl-team", group=PROXY_GROUP), verb


def test_the_peoples_proxypool_roles_scale_and_read_the_members(rendered):
    editor, viewer = peoples_roles(rendered, "proxypool")
    for verb in ("get", "patch", "update"):  # kubectl scale, an HPA
        assert cluster.can(bound(editor), ALICE, verb, "proxypools/scale", "crawl-team", group=PROXY_GROUP), verb
        assert not cluster.can(bound(viewer), ALICE, verb if verb != "get" else "patch", "proxypools/scale",
                               "crawl-team", group=PROXY_GROUP), verb
    for role in (editor, viewer):
        for verb in ("get", "list", "watch"):  # the members and the status, read-only
            for resource in ("proxies", "proxypools/status"):
                assert cluster.can(bound(role), ALICE, verb, resource, "crawl-team", group=PROXY_GROUP), (verb, resource)
        for verb in ("create", "delete", "patch", "update"):
            assert not cluster.can(bound(role), ALICE, verb, "proxies", "crawl-team", group=PROXY_GROUP), verb


# --- two installations ------------------------------------------------------------------


def test_two_installations_share_no_cluster_scoped_name_and_rebind_nothing(tmp_path):
    first = rendered(tmp_path, namespace="fleet-a")
    second = rendered(tmp_path, namespace="fleet-b")  # both create proxies in `proxies`

    def names(objs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            for o in objs if o["kind"] in CLUSTER_SCOPED or o["metadata"].get("namespace") not in ("fleet-a", "fleet-b")
        }

    assert names(first) and names(first).isdisjoint(names(second))
    for objs, installation in ((first, "fleet-a"), (second, "fleet-b")):
        assert {o["metadata"]["labels"][INSTALLATION_LABEL] for o in objs} == {installation}
    # applied one after the other, each installation keeps all its rights
    both = cluster.merged(first, second)
    for ns in ("fleet-a", "fleet-b"):
        assert cluster.can(both, worker(ns), "create", "pods", "proxies"), ns
        assert cluster.can(both, worker(ns), "list", "pods", None), ns
        assert cluster.can(both, (ns, "fleet-controller"), "create", "providerhealths", None, group="crawl.example.com"), ns


def test_an_explicit_installation_names_the_rbac(tmp_path):
    objs = rendered(tmp_path, namespace="fleet-a", installation="eu-1")
    rbac = {o["metadata"]["name"] for o in objs if o["apiVersion"].startswith("rbac.")}
    assert rbac == {"fleet:eu-1:controller", "fleet:eu-1:worker:cluster"}  # the Role in fleet-a shares the ClusterRole's name


def test_the_cluster_model_sees_a_rebinding():
    # what fleet did before: the same ClusterRoleBinding name from both installations
    def install(ns: str) -> list[dict[str, Any]]:
        role = {"kind": "ClusterRole", "metadata": {"name": "fleet-worker-cluster"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
        binding = {"kind": "ClusterRoleBinding", "metadata": {"name": "fleet-worker-cluster"},
                   "roleRef": {"kind": "ClusterRole", "name": "fleet-worker-cluster"},
                   "subjects": [{"kind": "ServiceAccount", "name": "fleet-worker-cluster", "namespace": ns}]}
        return [role, binding]

    both = cluster.merged(install("fleet-a"), install("fleet-b"))
    assert not cluster.can(both, worker("fleet-a"), "list", "pods", None)


# --- the provider against an API server enforcing the rendered RBAC ------------------------


PODS = re.compile(r"^/api/v1/(?:namespaces/(?P<ns>[^/]+)/)?pods(?:/(?P<name>[^/]+))?$")
VERBS = {("POST", False): "create", ("GET", True): "get", ("DELETE", True): "delete", ("GET", False): "list"}


def enforce(kubeapi: Any, objects: list[dict[str, Any]], account: tuple[str, str]) -> None:
    """Answer 403, as the API server would, to every pod request `account` may not make."""

    def check(req: Any) -> tuple[int, Any] | None:
        m = PODS.match(req.path)
        if not m:
            return None
        verb, ns = VERBS[(req.method, m.group("name") is not None)], m.group("ns")
        if cluster.can(objects, account, verb, "pods", ns):
            return None  # the fake's own answer
        return 403, status_body(403, "Forbidden", cluster.forbidden(account, verb, "pods", ns))

    for method in ("GET", "POST", "DELETE"):
        kubeapi.script(method, r"/pods", check)


def provider(kubeapi: Any, namespace: str) -> KubernetesProvider:
    return new("cluster", KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path, namespace=namespace))


def request(name: str) -> CreateRequest:
    return CreateRequest(name=name, uid="u-" + name, namespace="crawl-team")


def test_create_where_the_role_grants_it_and_a_clear_error_elsewhere(kubeapi, tmp_path):
    enforce(kubeapi, rendered(tmp_path), worker())
    pid = provider(kubeapi, "proxies").create(request("p1"), Deadline.after(5))
    assert pid == "proxies/p1" and [p["metadata"]["namespace"] for p in kubeapi.pods] == ["proxies"]
    assert provider(kubeapi, "proxies").get(pid, Deadline.after(5)).id == pid

    with pytest.raises(base.Permanent) as err:  # a namespace the RBAC does not cover
        provider(kubeapi, "kube-system").create(request("p2"), Deadline.after(5))
    assert (err.value.op, err.value.provider, err.value.id) == ("create", "cluster", "kube-system/p2")
    msg = str(err.value)
    assert "(403)" in msg and "Forbidden" in msg and "cannot create resource" in msg and "kube-system" in msg
    assert len(kubeapi.pods) == 1


def test_a_missing_cluster_role_is_a_forbidden_verdict_not_a_crash(kubeapi, tmp_path):
    objs = [o for o in rendered(tmp_path) if o["kind"] not in ("ClusterRole", "ClusterRoleBinding")]
    enforce(kubeapi, objs, worker())
    (target,) = provider(kubeapi, "proxies").check(Deadline.after(5))
    assert (target.ready, target.reason) == (False, base.REASON_FORBIDDEN)
    assert "cannot list resource" in target.message
    with pytest.raises(base.Permanent):
        provider(kubeapi, "proxies").list_by_tag(Deadline.after(5))


def test_with_the_rendered_rbac_the_check_passes(kubeapi, tmp_path):
    enforce(kubeapi, rendered(tmp_path), worker())
    (target,) = provider(kubeapi, "proxies").check(Deadline.after(5))
    assert (target.ready, target.reason) == (True, base.REASON_REACHABLE)


# --- where the provider creates pods ----------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "in_cluster", "pod_namespace", "want"),
    [
        ({"namespace": "proxies"}, True, "fleet-system", "proxies"),  # explicit wins
        ({}, True, "fleet-system", "fleet-system"),  # in-cluster: the worker's own, where its Role is
        ({"kubeconfig": "/etc/fleet/k/kubeconfig"}, True, "fleet-system", "crawl-team"),  # another cluster: the Proxy's
        ({}, False, "", "crawl-team"),  # outside a cluster: the Proxy's
    ],
)
def test_the_pods_namespace(monkeypatch, cfg, in_cluster, pod_namespace, want):
    import providers.kubernetes.provider as module

    monkeypatch.setattr(module, "in_cluster", lambda: in_cluster)
    monkeypatch.setattr(module, "SERVICE_ACCOUNT_NAMESPACE", "/nonexistent")
    monkeypatch.setenv("POD_NAMESPACE", pod_namespace)
    assert new("k", KubernetesConfig(**cfg)).namespace(request("x")) == want
