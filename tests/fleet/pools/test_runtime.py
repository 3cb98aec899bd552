"""fleet.pools.runtime as applied: the pool loop against the fake API server
(as tests/fleet/pools/test_cluster.py) and one Redis (fakeredis with Lua, the
lease scripts of fleet.store.leases): one replica of two runs passes (the
Redis lock) and the other takes over when it stops or dies; a namespace whose
claim is not held is left alone; demand is what the lease API recorded
(leases held by members, refused requests naming the pool) and moves
spec.replicas."""

from __future__ import annotations

import json
import random
import threading
import time

import fakeredis
import pytest

from fleet.pools.cluster import InCluster, PoolController
from fleet.pools.model import parse_pool
from fleet.pools.runtime import Inputs, PoolLoop
from fleet.store import Store, keys
from fleet.store.leases import Busy, LeaseCall
from fleet.testing.pools import NS, Kubelet, members
from tests.fleet.pools.test_cluster import apply_pool, env, pool_obj  # noqa: F401


@pytest.fixture
def store():
    return Store(fakeredis.FakeRedis())


def loop_for(env, store, owner, ttl=15.0, served=lambda ns: True):  # noqa: F811
    _, writer, clock, _, _ = env
    inputs = Inputs(store.leases, per_member=2, clock=clock)
    ctl = PoolController(InCluster(writer), (NS,), clock=clock, demand=inputs.demand, usage=inputs.usage,
                         rng=random.Random(owner), served=served)
    return PoolLoop(ctl, store.pool_lock, inputs, owner, ttl=ttl)


def test_one_replica_runs_the_loop_and_another_takes_over_when_it_stops(env, store):  # noqa: F811
    api = env[0]
    apply_pool(api, replicas=4)
    a, b = loop_for(env, store, "a"), loop_for(env, store, "b")
    assert a.step() and not b.step()
    assert len(members(api)) == 4
    assert (a.controller.counters.creates, b.controller.counters.creates) == (4, 0)
    api.add({**pool_obj(api), "spec": {**pool_obj(api)["spec"], "replicas": 6}}, plural="proxypools")
    assert not b.step() and a.step()  # a extends its lock; b still waits
    assert len(members(api)) == 6 and b.controller.counters.creates == 0
    stop = threading.Event()
    stop.set()
    a.run(stop)  # a stopping holder releases the lock
    assert store.pool_lock.holder() is None
    assert b.step() and store.pool_lock.holder() == "b"


def test_a_dead_holders_lock_lapses(env, store):  # noqa: F811
    apply_pool(env[0], replicas=2)
    a, b = loop_for(env, store, "a", ttl=0.2), loop_for(env, store, "b", ttl=0.2)
    assert a.step() and not b.step()
    time.sleep(0.3)  # a died without releasing
    assert b.step() and not a.step()


def test_a_namespace_not_served_is_left_alone(env, store):  # noqa: F811
    api = env[0]
    apply_pool(api, replicas=3)
    loop = loop_for(env, store, "a", served=lambda ns: ns != NS)
    assert loop.step() and loop.controller.run_once() == {}
    assert members(api) == {} and "status" not in pool_obj(api)


def test_demand_from_the_lease_api_moves_spec_replicas(env, store):  # noqa: F811
    api, _, clock, _, _ = env
    apply_pool(api, replicas=1, autoscale={"min": 1, "max": 5, "targetUtilization": 100,
                                           "scaleDownStabilizationSeconds": 0})
    kubelet = Kubelet(api, clock)
    loop = loop_for(env, store, "a")
    loop.step()
    kubelet.settle()
    kubelet.settle()
    (key,) = (f"{NS}/{o['metadata']['name']}" for o in members(api).values())
    store._redis.hset(keys.PX_ENDPOINTS, key, json.dumps({"uid": "u", "ip": "10.0.0.1", "port": 3128, "pool": "web"}))
    store._redis.hset(keys.PX_ENDPOINTS, "crawl/other", json.dumps({"uid": "o", "ip": "10.0.0.2", "port": 3128}))
    n = iter(range(1000))

    def lease(pool: str) -> object:
        call = LeaseCall(lease_id=f"{next(n):032x}", target="example.com", expires=clock() + 600, max_per_proxy=2, pool=pool, ttl=600)
        return store.leases.lease(call, clock(), 0.0)

    for _ in range(2):
        lease("web")  # the member's capacity (2), held
    for _ in range(3):
        assert isinstance(lease("web"), Busy)  # refused: the pool's demand
    for _ in range(4):
        lease("")  # another proxy's leases and refusals name no pool: not web's demand
    loop.inputs.refresh()
    d = loop.inputs.demand(parse_pool(pool_obj(api)), [key])
    assert (d.held, d.refused, d.per_member) == (2, 3, 2)
    clock.t += 1  # past the first pass's recommendation (no demand yet: min)
    loop.step()
    assert pool_obj(api)["spec"]["replicas"] == 3  # ceil((2 + 3) / 2)
    clock.t += 3600  # the leases expired, the refusals left the window
    loop.step()
    assert pool_obj(api)["spec"]["replicas"] == 1  # back to min
