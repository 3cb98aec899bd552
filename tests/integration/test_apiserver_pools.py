"""The ProxyPool CRD on a real kube-apiserver (fleet/testing/kubeserver.py): accepted
as generated, defaults filled, the scale subresource answering as
`kubectl scale` uses it (GET and a merge PATCH of /scale), the status
subresource apart from the spec, and bad specs refused by the schema and
its CEL rules (which the fake API does not run)."""

from __future__ import annotations

import json

import pytest
import redis
import yaml

from fleet.store import keys
from fleet.testing.procs import wait_for
from tests.integration.test_apiserver_proxies import installations, proxies  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

GROUP = "/apis/crawl.example.com/v1alpha1"
MERGE = "application/merge-patch+json"


def pools(ns: str, name: str = "") -> str:
    return f"{GROUP}/namespaces/{ns}/proxypools" + (f"/{name}" if name else "")


def pool(name: str, **spec) -> dict:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool", "metadata": {"name": name},
            "spec": {"providers": [{"provider": "squid-a", "weight": 3}, {"provider": "squid-b"}], **spec}}


def test_a_pool_is_accepted_and_defaulted(kube_server, kube_ns):
    got = kube_server.json("POST", pools(kube_ns), pool("web", replicas=10))
    spec = got["spec"]
    assert spec["replicas"] == 10
    assert [p["weight"] for p in spec["providers"]] == [3, 1]  # the default weight
    assert spec["strategy"] == {"maxSurge": "25%", "maxUnavailable": 0}
    assert spec["remediation"] == {"maxUnhealthy": "40%", "unhealthyAfterSeconds": 300}
    assert (spec["minReadySeconds"], spec["progressDeadlineSeconds"], spec["maxAgeJitterSeconds"]) == (0, 600, 0)
    # the printer columns are served as generated
    crd = kube_server.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/proxypools.crawl.example.com")
    names = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert names == ["Desired", "Ready", "Available", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["pxp"]


def test_the_scale_subresource_answers_kubectl_scale(kube_server, kube_ns):
    kube_server.json("POST", pools(kube_ns), pool("web", replicas=10))
    kube_server.json("PATCH", pools(kube_ns, "web") + "/status",
                     {"status": {"replicas": 7, "selector": "crawl.example.com/pool=web"}}, content_type=MERGE)
    scale = kube_server.json("GET", pools(kube_ns, "web") + "/scale")
    assert scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 10}
    assert scale["status"] == {"replicas": 7, "selector": "crawl.example.com/pool=web"}
    # kubectl scale --replicas=20: a merge patch of /scale
    out = kube_server.json("PATCH", pools(kube_ns, "web") + "/scale", {"spec": {"replicas": 20}}, content_type=MERGE)
    assert out["spec"]["replicas"] == 20
    got = kube_server.json("GET", pools(kube_ns, "web"))
    assert got["spec"]["replicas"] == 20 and got["metadata"]["generation"] == 2
    assert got["status"]["replicas"] == 7  # the status is untouched
    # past the schema's maximum: refused through /scale too
    status, body = kube_server.request("PATCH", pools(kube_ns, "web") + "/scale", {"spec": {"replicas": 10_001}}, MERGE)
    assert status == 422, body


def test_the_status_subresource_keeps_spec_and_status_apart(kube_server, kube_ns):
    kube_server.json("POST", pools(kube_ns), pool("web", replicas=3))
    out = kube_server.json("PATCH", pools(kube_ns, "web") + "/status",
                           {"spec": {"replicas": 9}, "status": {"readyReplicas": 2}}, content_type=MERGE)
    assert out["spec"]["replicas"] == 3 and out["status"]["readyReplicas"] == 2


@pytest.mark.parametrize(("why", "spec", "words"), [
    ("no providers", {"providers": []}, b"spec.providers"),
    ("a provider twice", {"providers": [{"provider": "a"}, {"provider": "a"}]}, b"Duplicate value"),
    ("a zero weight", {"providers": [{"provider": "a", "weight": 0}]}, b"spec.providers[0].weight"),
    ("negative replicas", {"replicas": -1}, b"spec.replicas"),
    ("surge and unavailable both 0", {"strategy": {"maxSurge": 0, "maxUnavailable": "0%"}},
     b"maxSurge and maxUnavailable cannot both be 0"),
    ("a percent above 100", {"strategy": {"maxSurge": "150%"}}, b"percent from 0% to 100%"),
    ("a word for a percent", {"remediation": {"maxUnhealthy": "many"}}, b"percent from 0% to 100%"),
    ("a negative int", {"strategy": {"maxUnavailable": -1}}, b"non-negative integer"),
    ("autoscale min above max", {"autoscale": {"min": 5, "max": 2}}, b"autoscale.min must not exceed autoscale.max"),
    ("a maxAge below a minute", {"maxAgeSeconds": 5}, b"spec.maxAgeSeconds"),
])
def test_bad_specs_are_refused(kube_server, kube_ns, why, spec, words):
    body = pool("bad")
    body["spec"].update(spec)
    status, raw = kube_server.request("POST", pools(kube_ns), body)
    assert status == 422, (why, raw)
    assert words in raw, (why, raw)


def test_a_name_too_long_for_its_members_is_refused(kube_server, kube_ns):
    status, raw = kube_server.request("POST", pools(kube_ns), pool("p" * 58))
    assert status == 422 and b"at most 57 characters" in raw, raw
    kube_server.json("POST", pools(kube_ns), pool("p" * 57))


def test_a_pool_on_a_real_controller_reaches_its_replicas_scales_and_is_deleted(kube_server, installations,  # noqa: F811
                                                                                kube_ns):
    """The pool loop as the controller role starts it: a real controller and fake-provider worker authenticated as
    the rendered ServiceAccount (so the rendered RBAC is enough for members and pools), real Redis. The members go
    Running with their pool in the endpoint the lease script filters by; `kubectl scale` (a merge patch of /scale)
    shrinks the pool; a deleted pool's members are deleted (no garbage collector here: the controller's orphan rule)."""
    stack = installations.start(f"fleet-{kube_ns}", "edge", kube_ns)
    stack.wait_ready("worker:edge", "controller")
    kube_server.json("POST", pools(kube_ns), {**pool("web", replicas=3), "spec": {
        "replicas": 3, "providers": [{"provider": "edge"}], "template": {"port": 3128}}})

    def listed() -> list[dict]:
        return yaml.safe_load(kube_server.request("GET", proxies(kube_ns))[1])["items"]

    def running() -> int:
        return sum(1 for o in listed() if (o.get("status") or {}).get("phase") == "Running")

    log = lambda: stack.log("controller")[-3000:]  # noqa: E731
    wait_for(lambda: running() == 3, 90, f"3 members Running:\n{log()}")
    wait_for(lambda: (kube_server.json("GET", pools(kube_ns, "web")).get("status") or {}).get("readyReplicas") == 3, 30,
             f"readyReplicas 3:\n{log()}")
    r = redis.Redis.from_url(stack.broker)  # the installation's own database
    names = {o["metadata"]["name"] for o in listed()}
    assert all(n.startswith("web-") for n in names)
    eps = {k.decode(): json.loads(v) for k, v in r.hgetall(keys.PX_ENDPOINTS).items()}
    assert {k.split("/", 1)[1] for k in eps} == names and {e["pool"] for e in eps.values()} == {"web"}

    kube_server.json("PATCH", pools(kube_ns, "web") + "/scale", {"spec": {"replicas": 1}}, content_type=MERGE)
    wait_for(lambda: len(listed()) == 1, 60, f"scaled to 1:\n{log()}")
    kube_server.json("DELETE", pools(kube_ns, "web"))
    wait_for(lambda: listed() == [], 60, f"the members deleted:\n{log()}")
    assert "forbidden" not in stack.log("controller").lower(), log()
    r.close()


def test_fleet_scale_pool_and_get_pools_against_the_real_api_server(kube_server, kube_ns, capsys):
    """The CLI's scale subresource PATCH and list, as a real API server answers them (the SDK's *_scale call)."""
    from fleet.cli.subcommands import main

    kube_server.json("POST", pools(kube_ns), pool("web", replicas=3, autoscale={"min": 1, "max": 8}))
    cfg = ["--kubeconfig", kube_server.kubeconfig]
    assert main(["scale", "pool", "web", "--replicas", "6", "-n", kube_ns, *cfg]) == 0
    assert kube_server.json("GET", pools(kube_ns, "web"))["spec"]["replicas"] == 6
    assert main(["scale", "pool", "web", "--replicas", "9", "-n", kube_ns, *cfg]) == 2  # past autoscale.max
    assert main(["scale", "pool", "nope", "--replicas", "2", "-n", kube_ns, *cfg]) == 1
    capsys.readouterr()
    assert main(["get", "pools", "-n", kube_ns, *cfg]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["NAME", "DESIRED", "READY"] and out[1].split()[:3] == ["web", "6", "0"]


def test_fleet_get_pools_habits_against_the_real_api_server(kube_server, kube_ns, capsys):
    """kubectl's habits on what a real API server lists: -A (a NAMESPACE column), -o name|wide|json|yaml, and
    --watch printing the pool again when its replicas change."""
    import os
    import subprocess
    import sys
    import threading

    from fleet.cli.subcommands import main

    kube_server.json("POST", pools(kube_ns), pool("web", replicas=2))
    kube_server.json("POST", pools(kube_ns), pool("api", replicas=1))
    cfg = ["--kubeconfig", kube_server.kubeconfig]

    def get(*argv: str) -> str:
        capsys.readouterr()
        assert main(["get", "pools", *argv, *cfg]) == 0
        return capsys.readouterr().out

    table = get("-A").splitlines()
    assert table[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert {tuple(row.split()[:3]) for row in table[1:] if row.split()[0] == kube_ns} == {
        (kube_ns, "web", "2"), (kube_ns, "api", "1")}
    assert get("-n", kube_ns, "-o", "name").split() == ["proxypool.crawl.example.com/api", "proxypool.crawl.example.com/web"]
    assert len(get("-n", kube_ns, "-o", "wide").splitlines()[0].split()) > len(get("-n", kube_ns).splitlines()[0].split())
    assert json.loads(get("web", "-n", kube_ns, "-o", "json"))["spec"]["replicas"] == 2
    assert yaml.safe_load(get("-n", kube_ns, "-o", "yaml"))["items"][0]["metadata"]["namespace"] == kube_ns
    capsys.readouterr()
    assert main(["describe", "pools", "web", "-n", kube_ns, *cfg]) == 0
    described = capsys.readouterr().out
    assert "Name:" in described and "squid-a (weight 3), squid-b (weight 1)" in described  # the server's defaulted weight

    watch = subprocess.Popen([sys.executable, "-m", "fleet.cli", "get", "pools", "web", "-n", kube_ns, "-w", *cfg],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={k: v for k, v in os.environ.items() if not k.startswith("FLEET_")})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watch.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(lambda: any(line.split()[:2] == ["web", "2"] for line in lines), 30, f"the first listing: {lines}")
        kube_server.json("PATCH", pools(kube_ns, "web") + "/scale", {"spec": {"replicas": 5}}, content_type=MERGE)
        wait_for(lambda: any(line.split()[:2] == ["web", "5"] for line in lines), 30, f"the change printed: {lines}")
    finally:
        watch.terminate()
        watch.wait(10)
        reader.join(10)
        watch.stdout.close()  # type: ignore[union-attr]
