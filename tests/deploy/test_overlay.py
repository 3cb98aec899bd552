"""`kubectl apply -k deploy/overlays/example` installs the whole of fleet with no
Python on the operator's machine: every process (the rendering committed and
fresh), the Secrets they read made in the cluster by the fleet-secrets Job,
the prober with a target, the image and namespace the overlay sets, and
NetworkPolicies that let in what each part needs and nothing else. The same
checks on a real API server are in tests/integration/test_apiserver_install.py."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.cli import render
from fleet.cli import secrets as secrets_cli
from fleet.gateway.clients import parse_clients
from fleet.settings import broker_problem
from tests.deploy import kustomize
from tests.deploy.conftest import DEPLOY, by_kind, component, pod
from tests.deploy.test_manifests import validate

OVERLAY = DEPLOY / "overlays" / "example"
IMAGE = "ghcr.io/example/fleet:0.1.0"  # what the example overlay's `images:` sets
NS = "fleet-system"


@pytest.fixture(scope="module")
def overlay() -> list[dict[str, Any]]:
    return kustomize.render(OVERLAY)


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("fleet_overlay_generate", OVERLAY / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- what comes up -------------------------------------------------------------------------------


def test_the_committed_rendering_is_fresh():
    assert (OVERLAY / "rendered.yaml").read_text() == generator().text(), \
        "rendered.yaml is stale: run python deploy/overlays/example/generate.py"


def test_every_process_comes_up_in_one_namespace_with_the_overlays_image(overlay):
    validate(overlay)
    assert len(overlay) == len({kustomize.key(o) for o in overlay}), "duplicate objects"
    deployments = by_kind(overlay, "Deployment")
    assert sorted(component(d) for d in deployments.values()) == sorted(
        ["controller", "beat", "worker", "prober", "api", "gateway", "flower", "redis"])
    assert by_kind(overlay, "Job").keys() == {"fleet-secrets"}
    assert {"fleet-api", "fleet-gateway", "fleet-prober", "fleet-controller-metrics", "fleet-redis"} <= by_kind(overlay, "Service").keys()
    assert by_kind(overlay, "Namespace").keys() == {NS}
    assert {o["metadata"].get("namespace") for o in overlay
            if o["kind"] not in kustomize.CLUSTER_SCOPED} == {NS}
    workloads = [*deployments.values(), *by_kind(overlay, "Job").values()]
    images = {c["image"] for w in workloads for c in pod(w)["containers"] if component(w) != "redis"}
    assert images == {IMAGE}
    (worker,) = [d for d in deployments.values() if component(d) == "worker"]
    assert worker["metadata"]["labels"][render.PROVIDER_LABEL] == "cluster"
    assert pod(worker)["automountServiceAccountToken"] is True  # in-cluster: proxies as pods in its own namespace
    redis = pod(deployments["fleet-redis"])["containers"][0]
    assert "--appendonly" in redis["command"] and redis["command"][redis["command"].index("--appendonly") + 1] == "yes"


def test_the_prober_has_a_target(overlay):
    (c,) = pod(by_kind(overlay, "Deployment")[render.PROBER])["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLEET_PROBE_TARGET"] == generator().PROBE_TARGET


def test_render_writes_only_the_prober_settings_given(three_path):
    from fleet.config import load
    from fleet.settings import Settings

    def prober_env(settings: Settings | None) -> dict[str, Any]:
        objs = render.render(load(str(three_path)), three_path.read_text(), settings=settings)
        (c,) = pod(by_kind(objs, "Deployment")[render.PROBER])["containers"]
        return {e["name"]: e.get("value") for e in c["env"] if e["name"].startswith("FLEET_PROBE")}

    assert prober_env(None) == prober_env(Settings()) == {"FLEET_PROBER_METRICS_BIND_ADDRESS": ":8081"}
    given = Settings.from_values({"probe_target": "http://echo.internal:8080/ip", "probe_interval": "5s"})
    assert prober_env(given) == {"FLEET_PROBER_METRICS_BIND_ADDRESS": ":8081", "FLEET_PROBE_TARGET": "http://echo.internal:8080/ip",
                                 "FLEET_PROBE_INTERVAL": "5s"}


# --- the Secrets: every one a pod reads is one the Job makes --------------------------------------------


def secret_refs(overlay: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(Secret, key) of every required reference of every pod (optional ones may be absent)."""
    out = set()
    for w in [*by_kind(overlay, "Deployment").values(), *by_kind(overlay, "Job").values()]:
        spec = pod(w)
        for c in spec["containers"]:
            for e in c.get("env", ()):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    out.add((ref["name"], ref["key"]))
        for v in spec.get("volumes", ()):
            if "secret" in v and not v["secret"].get("optional"):
                out |= {(v["secret"]["secretName"], i["key"]) for i in v["secret"]["items"]}
    return out


def test_every_secret_a_pod_needs_is_one_the_job_creates(overlay):
    made = {(s["metadata"]["name"], k) for s in secrets_cli.wanted(NS, NS) for k in s["stringData"]}
    assert secret_refs(overlay) == made
    assert secret_refs(overlay) >= {(render.BROKER_SECRET, render.BROKER_KEY), (render.API_TOKEN_SECRET, render.API_TOKEN_KEY),
                                    (render.GATEWAY_CLIENTS_SECRET, render.GATEWAY_CLIENTS_KEY)}
    (job,) = by_kind(overlay, "Job").values()
    assert pod(job)["containers"][0]["command"] == ["fleet", "secrets", "ensure"]
    assert pod(job)["serviceAccountName"] == "fleet-secrets"


def test_the_secrets_are_random_and_each_what_its_reader_accepts():
    one, two = (secrets_cli.wanted(NS, NS) for _ in range(2))
    values = [v for s in one for v in s["stringData"].values()]
    assert not {v for s in two for v in s["stringData"].values()} & set(values)
    data = {s["metadata"]["name"]: s["stringData"] for s in one}
    broker = data[secrets_cli.BROKER_SECRET]
    assert broker_problem(broker["url"]) is None
    assert broker["url"] == f"redis://:{broker['redis-password']}@fleet-redis:6379/0"
    clients = parse_clients(data[secrets_cli.GATEWAY_CLIENTS_SECRET]["clients.yaml"])
    assert list(clients) == ["crawler"] and clients["crawler"].namespaces is None
    assert len(data[secrets_cli.API_TOKEN_SECRET]["token"]) >= 32
    user, _, password = data[secrets_cli.FLOWER_SECRET]["basic-auth"].partition(":")
    assert user == "admin" and len(password) >= 32


def test_secrets_ensure_needs_a_namespace_and_a_cluster(monkeypatch, tmp_path, capsys):
    from fleet.cli import subcommands

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr("fleet.settings.NAMESPACE_FILE", str(tmp_path / "none"))
    assert subcommands.main(["secrets", "ensure"]) == 2
    assert "-n/--namespace is required" in capsys.readouterr().err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert subcommands.main(["secrets", "ensure", "-n", "fleet-system"]) == 2
    assert "no cluster" in capsys.readouterr().err


# --- NetworkPolicies: a small evaluator of the rules deploy/network uses ----------------------------------


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    ok = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
    for e in selector.get("matchExpressions") or ():
        assert e["operator"] == "In", e  # the only operator deploy/network uses
        ok = ok and labels.get(e["key"]) in e["values"]
    return ok


def peer_allows(peer: dict[str, Any], src: Peer, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        return False  # none in deploy/network
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    ns_ok = matches(ns_sel, src.ns_labels) if ns_sel is not None else src.ns == policy_ns
    return ns_ok and (pod_sel is None or matches(pod_sel, src.labels))


class Peer:
    """A pod: its namespace, labels, its namespace's labels and its containers' named ports (a policy's port given
    by name matches the port of that name on the pod it selects, none when the pod declares no such name)."""

    def __init__(self, ns: str, labels: dict[str, str], ns_labels: dict[str, str] | None = None,
                 ports: dict[str, int] | None = None) -> None:
        self.ns, self.labels, self.ports = ns, labels, ports or {}
        self.ns_labels = {"kubernetes.io/metadata.name": ns, **(ns_labels or {})}


def port_matches(x: dict[str, Any], subject: Peer, port: int, protocol: str) -> bool:
    named = x["port"] if isinstance(x["port"], str) else None
    return x.get("protocol", "TCP") == protocol and (subject.ports.get(named) == port if named else x["port"] == port)


def allowed(policies: list[dict[str, Any]], direction: str, subject: Peer, other: Peer, port: int, protocol: str = "TCP") -> bool:
    """NetworkPolicy's answer for traffic `direction` ("Ingress" into `subject` from `other`, "Egress" from `subject`
    to `other`) on `port`: allowed unless a policy selects `subject` for that direction; then any rule of one of them."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == subject.ns and matches(p["spec"]["podSelector"], subject.labels)
                 and direction in p["spec"]["policyTypes"]]
    if not selecting:
        return True
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for p in selecting:
        for rule in p["spec"].get(key) or ():
            port_ok = "ports" not in rule or any(port_matches(x, subject, port, protocol) for x in rule["ports"])
            peer_ok = peers not in rule or any(peer_allows(peer, other, p["metadata"]["namespace"]) for peer in rule[peers])
            if port_ok and peer_ok:
                return True
    return False


def fleet(name: str) -> Peer:
    return Peer(NS, {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/component": name})


CRAWLER = Peer("crawl-team", {"app": "scrapy"})
MONITORING = Peer("monitoring", {"app.kubernetes.io/name": "prometheus"}, {"fleet.crawl.example.com/monitoring": "true"})
PROXY_POD = Peer(NS, {"proxy-operator-managed": "true", "proxy-operator-uid": "u1"})
API_SERVER = Peer("default", {})  # an address outside every pod selector; matched by port


def test_crawlers_reach_the_gateway_and_the_api_and_nothing_else(overlay):
    nps = list(by_kind(overlay, "NetworkPolicy").values())
    assert allowed(nps, "Ingress", fleet("api"), CRAWLER, 8090)
    assert allowed(nps, "Ingress", fleet("gateway"), CRAWLER, 8888)
    for target, port in ((fleet("redis"), 6379), (fleet("controller"), 8080), (fleet("prober"), 8081), (fleet("gateway"), 8083),
                         (fleet("flower"), 5555), (fleet("worker"), 9090), (PROXY_POD, 3128), (fleet("api"), 9999)):
        assert not allowed(nps, "Ingress", target, CRAWLER, port), (target.labels, port)


def gateway_pod(objs: list[dict[str, Any]]) -> Peer:
    """The gateway's pod as a rendering makes it: its labels and its named container ports."""
    d = by_kind(objs, "Deployment")[render.GATEWAY]
    (c,) = pod(d)["containers"]
    return Peer(NS, d["spec"]["template"]["metadata"]["labels"], ports={p["name"]: p["containerPort"] for p in c["ports"]})


@pytest.mark.parametrize(("socks", "tls"), [("", ""), (":1080", ""), ("", ":8443"), (":1080", ":8443"), (":9050", ":443")])
def test_the_gateways_socks5_and_tls_listeners_are_admitted_when_rendered_and_only_then(three_path, socks, tls):
    """deploy/network names the optional listeners' ports: a rendering with a listener opens it to crawlers, one
    without opens nothing more (the same policy, whatever port the flags chose)."""
    from fleet.config import load
    from fleet.settings import Settings

    objs = render.render(load(str(three_path)), three_path.read_text(),
                         settings=Settings(gateway_socks_bind_address=socks, gateway_tls_bind_address=tls))
    nps = list(by_kind(kustomize.render(DEPLOY / "network"), "NetworkPolicy").values())
    gw = gateway_pod(objs)
    asked = {render.GATEWAY_SOCKS_PORT_NAME: socks, render.GATEWAY_TLS_PORT_NAME: tls}
    assert {n for n, address in asked.items() if address} == gw.ports.keys() - {"proxy", "metrics"}
    assert allowed(nps, "Ingress", gw, CRAWLER, render.GATEWAY_PORT)
    assert not allowed(nps, "Ingress", gw, CRAWLER, render.GATEWAY_METRICS_PORT)
    for address in (socks, tls):
        if address:
            port = int(address.lstrip(":"))
            assert allowed(nps, "Ingress", gw, CRAWLER, port), address
            assert not allowed(nps, "Ingress", Peer(NS, gw.labels), CRAWLER, port)  # a pod without the named port
    for port in {1080, 8443, 9050, 443} - {int(a.lstrip(":")) for a in (socks, tls) if a}:
        assert not allowed(nps, "Ingress", gw, CRAWLER, port), port


def test_redis_takes_fleets_pods_only(overlay):
    nps = list(by_kind(overlay, "NetworkPolicy").values())
    for name in ("controller", "beat", "worker", "prober", "api", "gateway", "flower"):
        assert allowed(nps, "Ingress", fleet("redis"), fleet(name), 6379), name
    assert not allowed(nps, "Ingress", fleet("redis"), PROXY_POD, 6379)
    assert not allowed(nps, "Ingress", fleet("redis"), Peer("other", fleet("api").labels), 6379)  # fleet's labels elsewhere


def test_the_proxies_take_the_gateway_and_the_prober(overlay):
    nps = list(by_kind(overlay, "NetworkPolicy").values())
    for name, ok in (("gateway", True), ("prober", True), ("api", False), ("controller", False)):
        assert allowed(nps, "Ingress", PROXY_POD, fleet(name), 3128) is ok, name


def test_the_controller_egresses_to_the_api_server_dns_and_redis_only(overlay):
    nps = list(by_kind(overlay, "NetworkPolicy").values())
    ctl = fleet("controller")
    assert allowed(nps, "Egress", ctl, fleet("redis"), 6379)
    assert allowed(nps, "Egress", ctl, API_SERVER, 443) and allowed(nps, "Egress", ctl, API_SERVER, 6443)
    assert allowed(nps, "Egress", ctl, Peer("kube-system", {"k8s-app": "kube-dns"}), 53, "UDP")
    for other, port in ((fleet("api"), 8090), (PROXY_POD, 3128), (fleet("worker"), 9090), (Peer("x", {}), 80)):
        assert not allowed(nps, "Egress", ctl, other, port), (other.labels, port)
    assert allowed(nps, "Egress", fleet("worker"), Peer("x", {}), 22)  # workers reach their backends: not restricted


def test_metrics_answer_the_monitoring_namespace(overlay):
    nps = list(by_kind(overlay, "NetworkPolicy").values())
    for name, port in (("controller", 8080), ("prober", 8081), ("gateway", 8083), ("worker", 9090), ("api", 8090)):
        assert allowed(nps, "Ingress", fleet(name), MONITORING, port), name
        assert not allowed(nps, "Ingress", fleet(name), Peer("monitoring", MONITORING.labels), port) or name == "api", name


def test_every_metrics_port_of_the_rendering_is_opened(overlay):
    """A new /metrics port in `fleet render` must reach deploy/network."""
    (metrics,) = [p for p in by_kind(overlay, "NetworkPolicy").values() if p["metadata"]["name"] == "fleet-metrics"]
    opened = {p["port"] for r in metrics["spec"]["ingress"] for p in r["ports"]}
    assert opened == {render.METRICS_PORT, render.PROBER_PORT, render.GATEWAY_METRICS_PORT, render.WORKER_METRICS_PORT}


# --- the renderer's kustomize subset, against kubectl ------------------------------------------------


def tmp_overlay(tmp_path: Path, images: list[dict[str, str]], namespace: str = "crawl-fleet") -> Path:
    d = tmp_path / "overlay"
    d.mkdir()
    (d / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [os.path.relpath(DEPLOY / "base", d)], "namespace": namespace,
                                                          "images": images}))
    (d / "extra.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b", "namespace": "x"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
         "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "x"},
                      {"kind": "ServiceAccount", "name": "other", "namespace": "x"}]},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"initContainers": [{"name": "i", "image": "ghcr.io/example/fleet"}],
                  "containers": [{"name": "c", "image": "ghcr.io/example/fleet@sha256:" + "0" * 64},
                                 {"name": "d", "image": "ghcr.io/example/fleet-other:1"}]}},
    ]))
    spec = yaml.safe_load((d / "kustomization.yaml").read_text())
    spec["resources"].append("extra.yaml")
    (d / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    return d


IMAGE_CASES = [
    [{"name": "ghcr.io/example/fleet", "newName": "registry.example.net/fleet", "newTag": "1.2"}],
    [{"name": "ghcr.io/example/fleet", "newTag": "2.0"}],
    [{"name": "ghcr.io/example/fleet", "digest": "sha256:" + "a" * 64}, {"name": "redis", "newName": "mirror.example.net/redis"}],
]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the Python rendering stands alone")
@pytest.mark.parametrize("images", IMAGE_CASES)
def test_namespace_and_images_render_as_kubectl_does(tmp_path, images):
    d = tmp_overlay(tmp_path, images)
    out = subprocess.run(["kubectl", "kustomize", str(d)], capture_output=True, text=True, timeout=60, check=True).stdout
    theirs = {kustomize.key(o): o for o in yaml.safe_load_all(out) if o}
    ours = {kustomize.key(o): o for o in kustomize.render(d)}
    assert theirs == ours


def test_namespace_and_images_without_kubectl(tmp_path):
    objs = kustomize.render(tmp_overlay(tmp_path, IMAGE_CASES[0]))
    assert by_kind(objs, "Namespace").keys() == {"crawl-fleet"}
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] not in kustomize.CLUSTER_SCOPED} == {"crawl-fleet"}
    assert [s["namespace"] for s in by_kind(objs, "RoleBinding")["b"]["subjects"]] == ["crawl-fleet", "x"]
    p = pod({"spec": {"template": {"spec": by_kind(objs, "Pod")["p"]["spec"]}}})
    assert [c["image"] for c in p["initContainers"] + p["containers"]] == [
        "registry.example.net/fleet:1.2", "registry.example.net/fleet:1.2", "ghcr.io/example/fleet-other:1"]


@pytest.mark.parametrize("spec", [
    {"resources": [], "patches": []},
    {"resources": [], "images": [{"name": "x", "newTag": "1", "tagSuffix": "y"}]},
    {"resources": [], "commonLabels": {"a": "b"}},
])
def test_the_renderer_refuses_what_it_does_not_implement(tmp_path, spec):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ValueError, match="not supported"):
        kustomize.render(tmp_path)


# --- the docs page --------------------------------------------------------------------------------


def test_the_install_page_shows_the_commands_and_every_secrets_rotation():
    from tests.deploy.conftest import ROOT

    page = (ROOT / "docs" / "install-kubernetes.md").read_text()
    assert "kubectl apply -k deploy/overlays/example" in page
    assert "fleet render -c /config/providers.yaml" in page and "docker run" in page  # the image renders (no ENTRYPOINT)
    rotation = page[page.index("### Rotating them"):page.index("## NetworkPolicies")]
    for name in secrets_cli.NAMES:
        assert f"**`{name}`**" in rotation, name
    for policy in by_kind(kustomize.render(DEPLOY / "network"), "NetworkPolicy"):
        assert f"`{policy}`" in page, policy
