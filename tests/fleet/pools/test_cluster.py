"""fleet.pools.cluster as applied: the pool controller against the fake API
server (fleet/testing/kubeapi.py, which validates, defaults and prunes against
the shipped CRDs and serves the pool's scale subresource), the real
`kubernetes` client in between.

The Proxy controller is played by `Kubelet` (fleet.testing.pools): it gives each new member
an instance (providerID, phase Provisioning) and, `ready_after` seconds of
the test's clock later, Running and Ready, as fleet.proxies would once the
instance answers. Everything the pool controller reads is in the fake API.
"""

from __future__ import annotations

import random

import pytest
from kubernetes import client

from fleet.kube import Writer
from fleet.pools.cluster import InCluster, PoolController
from fleet.proxies.model import LABEL_POOL
from fleet.testing.pools import NS, Clock, Kubelet, members
from providers.kubernetes.client import load_configuration

POOLS = f"/apis/crawl.example.com/v1alpha1/namespaces/{NS}/proxypools"


@pytest.fixture
def env(kubeapi):
    writer = Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), "blue")
    clock = Clock()
    usage: dict[str, tuple[int, int]] = {}
    ctl = PoolController(InCluster(writer), (NS,), clock=clock, usage=lambda key: usage.get(key, (0, 0)), rng=random.Random(7))
    return kubeapi, writer, clock, ctl, usage


def apply_pool(api, replicas=10, **spec):
    body = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool", "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": replicas, "providers": [{"provider": "squid-a", "weight": 3}, {"provider": "squid-b", "weight": 1}],
                     "template": {"port": 3130}, **spec}}
    return api.add(body, plural="proxypools")


def pool_obj(api):
    return api.objects[f"{NS}/web"]


def spread_of(api):
    out: dict[str, int] = {}
    for o in members(api).values():
        out[o["spec"]["provider"]] = out.get(o["spec"]["provider"], 0) + 1
    return out


def scale(api, n):
    """`kubectl scale pxp web --replicas=n`: a merge patch of the scale subresource."""
    import json
    import urllib.request
    req = urllib.request.Request(f"{api.server.url}{POOLS}/web/scale", method="PATCH",
                                 data=json.dumps({"spec": {"replicas": n}}).encode(),
                                 headers={"Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


def converge(ctl, kubelet, clock, passes=6, step=1.0):
    for _ in range(passes):
        ctl.run_once()
        kubelet.settle()
        clock.t += step


def test_a_pool_of_10_at_3_to_1_reaches_8_to_2_ready_owned_and_labelled(env):
    api, _, clock, ctl, _ = env
    created = apply_pool(api)
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    assert spread_of(api) == {"squid-a": 8, "squid-b": 2}
    for o in members(api).values():
        meta = o["metadata"]
        assert meta["name"].startswith("web-") and len(meta["name"]) == len("web-") + 5
        assert meta["ownerReferences"] == [{"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool", "name": "web",
                                            "uid": created["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        assert o["spec"]["port"] == 3130
    st = pool_obj(api)["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"], st["updatedReplicas"]) == (10, 10, 10, 10)
    assert st["selector"] == "crawl.example.com/pool=web"
    conds = {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}
    assert conds["Available"] == ("True", "MinimumReplicasAvailable")
    assert conds["Progressing"] == ("True", "NewReplicasAvailable")
    assert conds["RemediationAllowed"][0] == "True" and conds["ScalingLimited"][0] == "False"
    # converged: another pass writes nothing
    writes = len(api.writes())
    ctl.run_once()
    assert len(api.writes()) == writes


def test_kubectl_scale_to_20_then_5_removes_members_in_the_documented_order(env):
    api, _, clock, ctl, usage = env
    apply_pool(api)
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    got = scale(api, 20)
    assert got["kind"] == "Scale" and got["spec"]["replicas"] == 20 and got["status"]["replicas"] == 10
    converge(ctl, kubelet, clock)
    assert spread_of(api) == {"squid-a": 15, "squid-b": 5}
    assert scale(api, 20)["status"] == {"replicas": 20, "selector": "crawl.example.com/pool=web"}
    # make the order visible: one not created yet, one unhealthy, two cooling down, leases on the rest by age
    by_age = sorted(members(api).items(), key=lambda kv: (kv[1]["metadata"]["creationTimestamp"], kv[0]))
    a = [k for k, o in by_age if o["spec"]["provider"] == "squid-a"]
    b = [k for k, o in by_age if o["spec"]["provider"] == "squid-b"]
    kubelet.set(a[0], ready=False, provider_id=False)  # not created yet
    kubelet.set(a[1], ready=False, healthy=False, since=clock() - 600)  # unhealthy for 10 minutes
    usage[a[2]], usage[a[3]] = (0, 3), (0, 1)  # cooldowns
    for i, k in enumerate(a[4:] + b):
        usage[k] = (i % 4, 0)  # leases 0..3
    objs = members(api)

    def last_to_go(k):  # the most leases stay, then the youngest, then by name
        return usage[k][0], objs[k]["metadata"]["creationTimestamp"], k

    expected_kept = set(sorted(a[4:], key=last_to_go)[-4:]) | {max(b, key=last_to_go)}
    n_requests = len(api.requests)
    scale(api, 5)
    converge(ctl, kubelet, clock, passes=3)
    assert spread_of(api) == {"squid-a": 4, "squid-b": 1}  # 3.75 : 1.25, the tie to the earlier entry
    deleted = [r.path.rsplit("/", 1)[1] for r in api.requests[n_requests:] if r.method == "DELETE"]
    names = {k: k.split("/", 1)[1] for k in a + b}
    assert deleted[:4] == [names[a[0]], names[a[1]], names[a[2]], names[a[3]]]  # not created, unhealthy, cooldowns 3, 1
    assert len(deleted) == 15 and ctl.counters.creates == 20  # nothing replaced on the way down
    assert set(members(api)) == expected_kept  # the most leases (then the youngest) stay


def test_a_rotation_by_max_age_keeps_replicas_minus_max_unavailable_available(env):
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=10, maxAgeSeconds=60, strategy={"maxSurge": 2, "maxUnavailable": 1})
    kubelet = Kubelet(api, clock, ready_after=3.0)
    converge(ctl, kubelet, clock, passes=8)
    first = set(members(api))
    assert len(first) == 10 and kubelet.available() == 10
    clock.t += 60  # every member past maxAge
    timeline = []
    for _ in range(60):
        ctl.run_once()
        timeline.append(kubelet.available())  # the worst point: deletes done, the new ones not Ready yet
        kubelet.settle()
        timeline.append(kubelet.available())
        clock.t += 1.0
        if not first & set(members(api)) and kubelet.available() == 10 and len(members(api)) == 10:
            break
    assert not first & set(members(api)), "every original member replaced"
    assert min(timeline) >= 10 - 1, timeline
    assert ctl.counters.deletes.get("rotation") == 10
    ctl.run_once()
    st = pool_obj(api)["status"]
    assert (st["availableReplicas"], st["updatedReplicas"]) == (10, 10)


def test_an_outage_above_max_unhealthy_replaces_nothing_and_says_so(env):
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=10, remediation={"maxUnhealthy": "40%", "unhealthyAfterSeconds": 60})
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    for k in sorted(members(api))[:6]:  # 60% fail every probe
        kubelet.set(k, ready=False, healthy=False, since=clock() - 120)
    before = set(members(api))
    converge(ctl, kubelet, clock, passes=3)
    assert set(members(api)) == before and ctl.counters.deletes == {}
    conds = {c["type"]: c for c in pool_obj(api)["status"]["conditions"]}
    assert (conds["RemediationAllowed"]["status"], conds["RemediationAllowed"]["reason"]) == ("False", "TooManyUnhealthy")
    assert pool_obj(api)["status"]["unhealthyReplicas"] == 6
    # two recover: 4 unhealthy ≤ 40% of 10: those 4 are replaced
    for k in sorted(members(api))[:2]:
        kubelet.set(k)
    converge(ctl, kubelet, clock, passes=3)
    assert ctl.counters.deletes == {"remediation": 4}
    assert len(members(api)) == 10


def test_deleting_the_pool_deletes_its_members_and_only_them(env):
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=3)
    api.add({"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
             "metadata": {"name": "mine", "namespace": NS, "labels": {LABEL_POOL: "web"}},
             "spec": {"provider": "squid-a"}}, plural="proxies")  # labelled, but not owned: not a member
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    assert len(members(api)) == 4
    api.delete(f"{NS}/web")
    ctl.run_once()
    assert set(members(api)) == {f"{NS}/mine"}
    assert ctl.counters.deletes == {"orphan": 3}


def test_an_invalid_pool_is_refused_by_the_schema(env):
    api, _, _, _, _ = env
    import json
    import urllib.error
    import urllib.request
    body = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool", "metadata": {"name": "bad"},
            "spec": {"providers": [], "strategy": {"maxSurge": True}}}
    req = urllib.request.Request(f"{api.server.url}{POOLS}", method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req)
    text = exc.value.read().decode()
    assert exc.value.code == 422 and "spec.providers" in text and "spec.strategy.maxSurge" in text
