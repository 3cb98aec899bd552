"""The RBAC `fleet render` writes, judged by a real API server's authorizer:
applied to the server, then a SubjectAccessReview (what `kubectl auth
can-i VERB RESOURCE -n NS --as system:serviceaccount:NS:NAME` asks) for
every ServiceAccount it renders. With the default settings no rendered
account may read a Secret in kube-system; only the controller reads Secrets,
only in the namespaces whose Proxies it serves, and only `*` widens that to
every namespace (issue 18, items 2 and 7). The pure evaluator in
tests/deploy/cluster.py answers the same for the fast tests."""

from __future__ import annotations

import uuid

import pytest

from fleet.testing.kubeserver import render_installation

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

PROVIDERS = """\
providers:
  - name: cluster
    type: kubernetes
    kubernetes: {namespace: PODS}
  - name: demo
    type: fake
    fake: {}
  - name: gce
    type: gcp
    gcp: {project: egress-proxies}
"""
GROUP = "crawl.example.com"


def accounts(objects: list[dict]) -> list[tuple[str, str]]:
    return sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "ServiceAccount")


def user(account: tuple[str, str]) -> str:
    return f"system:serviceaccount:{account[0]}:{account[1]}"


@pytest.fixture
def names():
    tag = uuid.uuid4().hex[:6]
    return f"fleet-{tag}", f"pods-{tag}", f"crawl-{tag}"


def test_with_the_default_settings_no_rendered_account_reads_secrets_in_kube_system(kube_server, names, tmp_path,
                                                                                    capsys):
    ns, pods, _ = names
    objects = render_installation(kube_server, PROVIDERS.replace("PODS", pods), ns, workdir=tmp_path)
    rendered = accounts(objects)
    assert (ns, "fleet-controller") in rendered and len(rendered) == 8  # controller, beat, prober, api, gateway, 3 workers
    table = []
    for account in rendered:
        in_kube_system, why = kube_server.can(user(account), "get", "secrets", "kube-system")
        in_own, _ = kube_server.can(user(account), "get", "secrets", ns)
        anywhere, _ = kube_server.can(user(account), "get", "secrets")
        table.append((f"{account[0]}/{account[1]}", in_kube_system, in_own, anywhere))
        assert not in_kube_system, (account, why)
        assert not anywhere, account
        assert in_own == (account[1] == "fleet-controller"), account  # the controller: its Proxies' cloudInit.secretRef
    with capsys.disabled():
        print("\nSubjectAccessReview, default settings (get secrets): account | kube-system | proxy namespace | cluster-wide")
        for row in table:
            print(" | ".join(str(x) for x in row))


def test_the_controller_can_do_what_it_needs_in_its_namespaces_and_nothing_elsewhere(kube_server, names, tmp_path):
    ns, pods, crawl = names
    render_installation(kube_server, PROVIDERS.replace("PODS", pods), ns, proxy_namespaces=(crawl, ns), workdir=tmp_path)
    me = user((ns, "fleet-controller"))
    for where in (crawl, ns):
        for verb in ("get", "list", "watch", "patch", "update"):
            assert kube_server.can(me, verb, "proxies", where, GROUP)[0], (verb, where)
        for verb in ("get", "patch"):
            assert kube_server.can(me, verb, "proxies/status", where, GROUP)[0], (verb, where)
            assert not kube_server.can(me, verb, "leases", where, "coordination.k8s.io")[0]  # unnamed: refused
        assert kube_server.can(me, "create", "leases", where, "coordination.k8s.io")[0]
        assert kube_server.can(me, "get", "secrets", where)[0]
        for verb in ("list", "watch"):
            assert not kube_server.can(me, verb, "secrets", where)[0], verb
        for verb in ("create", "delete"):  # a ProxyPool's members
            assert kube_server.can(me, verb, "proxies", where, GROUP)[0], (verb, where)
        assert not kube_server.can(me, "deletecollection", "proxies", where, GROUP)[0]
        for verb in ("get", "list", "watch", "patch"):
            assert kube_server.can(me, verb, "proxypools", where, GROUP)[0], (verb, where)
        for verb in ("get", "patch"):
            assert kube_server.can(me, verb, "proxypools/status", where, GROUP)[0], (verb, where)
        for verb in ("create", "delete"):
            assert not kube_server.can(me, verb, "proxypools", where, GROUP)[0], (verb, where)
        assert not kube_server.can(me, "patch", "proxypools/scale", where, GROUP)[0]
    for where in ("kube-system", "default", pods):
        assert not kube_server.can(me, "watch", "proxies", where, GROUP)[0], where
        assert not kube_server.can(me, "create", "proxies", where, GROUP)[0], where
        assert not kube_server.can(me, "list", "proxypools", where, GROUP)[0], where
        assert not kube_server.can(me, "get", "secrets", where)[0], where
        assert not kube_server.can(me, "create", "leases", where, "coordination.k8s.io")[0], where
    assert not kube_server.can(me, "list", "proxies", "", GROUP)[0]  # no cluster-wide list
    # ProviderHealth is cluster-scoped
    assert kube_server.can(me, "create", "providerhealths", "", GROUP)[0]
    assert kube_server.can(me, "patch", "providerhealths/status", "", GROUP)[0]
    assert not kube_server.can(me, "watch", "providerhealths", "", GROUP)[0]


def test_the_claim_lease_is_the_only_one_it_may_read_or_change(kube_server, names, tmp_path):
    ns, pods, _ = names
    render_installation(kube_server, PROVIDERS.replace("PODS", pods), ns, workdir=tmp_path)
    me = user((ns, "fleet-controller"))
    for verb in ("get", "patch"):
        assert kube_server.can(me, verb, "leases", ns, "coordination.k8s.io", name="fleet-proxies")[0], verb
        assert not kube_server.can(me, verb, "leases", ns, "coordination.k8s.io", name="kube-scheduler")[0], verb
    assert not kube_server.can(me, "delete", "leases", ns, "coordination.k8s.io", name="fleet-proxies")[0]


def test_every_namespace_is_the_widest_grant(kube_server, names, tmp_path):
    ns, pods, _ = names
    render_installation(kube_server, PROVIDERS.replace("PODS", pods), ns, proxy_namespaces=("*",), workdir=tmp_path)
    me = user((ns, "fleet-controller"))
    assert kube_server.can(me, "get", "secrets", "kube-system")[0]  # documented: `*` reads every namespace's Secrets
    assert kube_server.can(me, "watch", "proxies", "", GROUP)[0]
    assert kube_server.can(me, "list", "leases", "", "coordination.k8s.io")[0]
    assert not kube_server.can(me, "list", "secrets", "kube-system")[0]
    for account in accounts(render_installation(kube_server, PROVIDERS.replace("PODS", pods), ns, proxy_namespaces=("*",),
                                                workdir=tmp_path)):
        if account[1] != "fleet-controller":
            assert not kube_server.can(user(account), "get", "secrets", "kube-system")[0], account


def test_the_peoples_proxypool_roles_on_the_real_authorizer(kube_server):
    """deploy/rbac's ProxyPool editor and viewer, bound in one namespace: the editor scales through the scale
    subresource (kubectl scale, an HPA) and reads the members; neither writes a member or the status."""
    from pathlib import Path

    import yaml

    rbac = Path(__file__).resolve().parents[2] / "deploy" / "rbac"
    ns = kube_server.namespace("pools")
    tag = ns.rsplit("-", 1)[1]
    for role in ("proxypool-editor-role", "proxypool-viewer-role"):
        kube_server.apply(yaml.safe_load((rbac / f"{role.replace('-role', '_role').replace('-', '_')}.yaml").read_text()))
    people = {"editor": f"alice-{tag}", "viewer": f"bob-{tag}"}
    for kind, person in people.items():
        kube_server.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                           "metadata": {"name": f"pools-{kind}", "namespace": ns},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                       "name": f"proxypool-{kind}-role"},
                           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": person}]})
    alice, bob = people["editor"], people["viewer"]
    for verb in ("create", "delete", "get", "list", "patch", "update", "watch"):
        assert kube_server.can(alice, verb, "proxypools", ns, GROUP)[0], verb
        assert not kube_server.can(alice, verb, "proxypools", "default", GROUP)[0], verb
    for verb in ("get", "patch", "update"):
        assert kube_server.can(alice, verb, "proxypools/scale", ns, GROUP)[0], verb
    assert kube_server.can(bob, "get", "proxypools/scale", ns, GROUP)[0]
    for person in (alice, bob):
        for verb in ("get", "list", "watch"):
            assert kube_server.can(person, verb, "proxies", ns, GROUP)[0], (person, verb)
            assert kube_server.can(person, verb, "proxypools/status", ns, GROUP)[0], (person, verb)
        for verb in ("create", "delete", "patch"):
            assert not kube_server.can(person, verb, "proxies", ns, GROUP)[0], (person, verb)
        assert not kube_server.can(person, "patch", "proxypools/status", ns, GROUP)[0], person
        assert not kube_server.can(person, "get", "secrets", ns)[0], person
    for verb in ("create", "delete", "patch", "update"):
        assert not kube_server.can(bob, verb, "proxypools", ns, GROUP)[0], verb
        if verb != "create" and verb != "delete":
            assert not kube_server.can(bob, verb, "proxypools/scale", ns, GROUP)[0], verb
