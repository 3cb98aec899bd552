"""fleet.pools.metrics as applied: the pool controller against the fake API
(tests/fleet/pools/test_cluster.py's `env` and `Kubelet`), scraped as the
controller's /metrics is: the figures of the last pass per pool, the
replacements by reason, remediation blocked during an outage, a pool gone
losing its series, a replica without the lock serving none."""

from __future__ import annotations

import fakeredis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleet import serving
from fleet.pools.metrics import PoolSeries
from fleet.pools.runtime import Inputs, PoolLoop
from fleet.serving import registry_of
from fleet.store import Store
from fleet.testing.pools import NS, Kubelet, members
from tests.fleet.pools.test_cluster import apply_pool, converge, env  # noqa: F401


def scrape(series: PoolSeries) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry_of([series])).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted({"pool_namespace": NS, "pool": "web", **labels}.items()))))


def test_a_converged_pool_reports_its_replicas_by_state_and_max_unavailable(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=10, strategy={"maxSurge": 1, "maxUnavailable": "25%"})
    converge(ctl, Kubelet(api, clock), clock)
    s = scrape(ctl.series)
    assert {st: value(s, serving.POOL_REPLICAS, state=st) for st in ("desired", "ready", "available", "updated")} == {
        "desired": 10, "ready": 10, "available": 10, "updated": 10}
    assert value(s, serving.POOL_MAX_UNAVAILABLE) == 2  # 25% of 10, rounded down as the decision does
    assert value(s, serving.POOL_REMEDIATION_BLOCKED) == 0
    assert value(s, serving.POOL_AUTOSCALE_MAX) is None  # not autoscaling
    assert {r: value(s, serving.POOL_REPLACEMENTS, reason=r) for r in ("rotation", "template", "remediation")} == {
        "rotation": 0, "template": 0, "remediation": 0}  # present from the first pass, at 0


def test_rotation_and_a_template_change_are_counted_apart(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    body = apply_pool(api, replicas=4, maxAgeSeconds=60, strategy={"maxSurge": 2, "maxUnavailable": 0})
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    clock.t += 60
    converge(ctl, kubelet, clock, passes=8)
    s = scrape(ctl.series)
    assert value(s, serving.POOL_REPLACEMENTS, reason="rotation") == 4
    body = {**api.objects[f"{NS}/web"]}
    api.add({**body, "spec": {**body["spec"], "template": {"port": 3131}}}, plural="proxypools")
    converge(ctl, kubelet, clock, passes=8)
    s = scrape(ctl.series)
    assert value(s, serving.POOL_REPLACEMENTS, reason="template") == 4
    assert value(s, serving.POOL_REPLACEMENTS, reason="rotation") == 4
    assert value(s, serving.POOL_REPLICAS, state="updated") == 4


def test_an_outage_above_max_unhealthy_sets_remediation_blocked_and_replaces_nothing(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=10, remediation={"maxUnhealthy": "40%", "unhealthyAfterSeconds": 60})
    kubelet = Kubelet(api, clock)
    converge(ctl, kubelet, clock)
    for k in sorted(members(api))[:6]:
        kubelet.set(k, ready=False, healthy=False, since=clock() - 120)
    converge(ctl, kubelet, clock, passes=2)
    s = scrape(ctl.series)
    assert value(s, serving.POOL_REMEDIATION_BLOCKED) == 1
    assert value(s, serving.POOL_REPLACEMENTS, reason="remediation") == 0
    assert value(s, serving.POOL_REPLICAS, state="ready") == 4
    for k in sorted(members(api))[:2]:
        kubelet.set(k)
    converge(ctl, kubelet, clock, passes=3)
    s = scrape(ctl.series)
    assert value(s, serving.POOL_REMEDIATION_BLOCKED) == 0
    assert value(s, serving.POOL_REPLACEMENTS, reason="remediation") == 4


def test_an_autoscaling_pool_reports_its_max(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=2, autoscale={"min": 2, "max": 5})
    converge(ctl, Kubelet(api, clock), clock, passes=2)
    assert value(scrape(ctl.series), serving.POOL_AUTOSCALE_MAX) == 5


def test_a_deleted_pool_loses_its_series(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    apply_pool(api, replicas=2)
    converge(ctl, Kubelet(api, clock), clock, passes=2)
    assert value(scrape(ctl.series), serving.POOL_REPLICAS, state="desired") == 2
    api.delete(f"{NS}/web")
    ctl.run_once()
    assert scrape(ctl.series) == {}


def test_only_the_replica_holding_the_lock_serves_the_figures(env):  # noqa: F811
    api, _, clock, ctl, _ = env
    store = Store(fakeredis.FakeRedis())
    apply_pool(api, replicas=2)
    inputs = Inputs(store.leases, per_member=2, clock=clock)
    a = PoolLoop(ctl, store.pool_lock, inputs, "a", ttl=0.2)
    assert a.step() and value(scrape(ctl.series), serving.POOL_REPLICAS, state="desired") == 2
    store.pool_lock.release("a")
    assert store.pool_lock.hold("b", 15.0)
    assert not a.step()  # b holds it now: a serves nothing (b serves the figures)
    assert scrape(ctl.series) == {}
