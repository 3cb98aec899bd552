"""The lease scripts (fleet.store.leases) on fakeredis with Lua: least-loaded
choice, capacity, sticky keys, cooldown scopes, expiry, revocation."""

from __future__ import annotations

import json

import fakeredis
import pytest

from fleet.store import Store, keys
from fleet.store.leases import Busy, Granted, LeaseCall, NoProxy, ReportCall

NOW = 1_800_000_000.0


@pytest.fixture
def store():
    s = Store(fakeredis.FakeRedis())
    yield s
    s.close()


def running(store, key: str, uid: str = "u", provider: str = "lab", region: str = "r1", zone: str = "z1", port: int = 3128):
    store._redis.hset(keys.PX_ENDPOINTS, key, json.dumps({"uid": uid, "ip": "127.0.0.1", "port": port, "provider": provider,
                                                          "region": region, "zone": zone}))


def verdict(store, key: str, uid: str, healthy: bool):
    store._redis.hset(keys.PROBE_VERDICTS, key, json.dumps({"uid": uid, "healthy": healthy, "since": NOW}))


_ids = iter(range(10**9))


def lease(store, target="example.com", now=NOW, ttl=60.0, max_per_proxy=1, rand=0.0, **kw):
    call = LeaseCall(f"{next(_ids):032x}", target, now + ttl, max_per_proxy, **kw)
    return call.lease_id, store.leases.lease(call, now, rand)


def report(store, outcome, now=NOW, blocked=600.0, errors=3, global_=300.0, **kw):
    return store.leases.report(ReportCall(outcome, **kw), now, blocked, errors, global_)


def test_least_loaded_first_and_never_past_capacity(store):
    for k in ("ns/a", "ns/b", "ns/c"):
        running(store, k)
    got = [lease(store, max_per_proxy=2, rand=0.5)[1] for _ in range(6)]
    proxies = [g.proxy for g in got if isinstance(g, Granted)]
    assert sorted(proxies) == ["ns/a", "ns/a", "ns/b", "ns/b", "ns/c", "ns/c"]
    assert len(set(proxies[:3])) == 3  # every proxy got one before any got two
    assert isinstance(lease(store, max_per_proxy=2)[1], Busy)
    assert store.leases.loads() == {"ns/a": 2, "ns/b": 2, "ns/c": 2}


def test_ties_are_broken_by_the_random_start(store):
    for k in ("ns/a", "ns/b", "ns/c", "ns/d"):
        running(store, k)
    store.leases.sync(NOW)
    firsts = {lease(store, rand=r)[1].proxy for r in (0.0, 0.26, 0.51, 0.76)}
    assert firsts == {"ns/a", "ns/b", "ns/c", "ns/d"}


def test_no_proxy_at_all_versus_busy(store):
    assert isinstance(lease(store)[1], NoProxy)
    running(store, "ns/a")
    _lid, got = lease(store, ttl=30)
    assert isinstance(got, Granted)
    busy = lease(store, now=NOW + 1)[1]
    assert isinstance(busy, Busy) and busy.free_at == pytest.approx(NOW + 30)


def test_filters(store):
    running(store, "ns/a", provider="lab", zone="z1")
    running(store, "ns/b", provider="gcp", region="europe-west1", zone="europe-west1-b")
    assert lease(store, provider="gcp")[1].proxy == "ns/b"
    assert isinstance(lease(store, provider="gcp")[1], Busy)
    assert lease(store, zone="z1")[1].proxy == "ns/a"
    assert isinstance(lease(store, provider="kvm")[1], NoProxy)


def test_unhealthy_for_the_same_uid_is_never_leased_and_no_verdict_is_healthy(store):
    running(store, "ns/a", uid="new")
    verdict(store, "ns/a", "old", False)  # about an earlier instance: does not count
    assert isinstance(lease(store)[1], Granted)
    running(store, "ns/b", uid="b1")
    verdict(store, "ns/b", "b1", False)
    assert isinstance(lease(store)[1], Busy)  # ns/a is full; ns/b does not count
    assert isinstance(lease(store, provider="lab", zone="z1", max_per_proxy=1, target="t.example")[1], Busy)
    store._redis.hdel(keys.PX_ENDPOINTS, "ns/a")
    assert isinstance(lease(store)[1], NoProxy)
    verdict(store, "ns/b", "b1", True)
    assert lease(store)[1].proxy == "ns/b"


def test_sticky_keys_keep_their_proxy_while_it_has_room(store):
    for k in ("ns/a", "ns/b", "ns/c"):
        running(store, k)
    _lid, first = lease(store, sticky="job-1", max_per_proxy=3, rand=0.9)
    for _ in range(2):
        assert lease(store, sticky="job-1", max_per_proxy=3, rand=0.0)[1].proxy == first.proxy
    moved = lease(store, sticky="job-1", max_per_proxy=3)[1]  # full: another proxy, and the key follows it
    assert moved.proxy != first.proxy
    assert lease(store, sticky="job-1", max_per_proxy=3)[1].proxy == moved.proxy
    store._redis.hdel(keys.PX_ENDPOINTS, moved.proxy)  # deleted: leased elsewhere at once
    assert lease(store, sticky="job-1", max_per_proxy=3)[1].proxy not in (moved.proxy,)


def test_blocked_cools_the_proxy_for_that_target_only(store):
    running(store, "ns/a")
    lid, _ = lease(store, target="shop.example")
    assert report(store, "blocked", lease_id=lid, blocked=600) == ["cooldown", "ns/a", "shop.example", "target", str(int(NOW + 600))]
    assert store.leases.release(lid, NOW) == ["released"]
    busy = lease(store, target="shop.example")[1]
    assert isinstance(busy, Busy) and busy.free_at == pytest.approx(NOW + 600)
    other, got = lease(store, target="news.example")
    assert got.proxy == "ns/a"
    store.leases.release(other, NOW)
    assert lease(store, target="shop.example", now=NOW + 601)[1].proxy == "ns/a"


def test_errors_in_a_row_cool_the_proxy_globally_and_ok_resets_the_count(store):
    running(store, "ns/a")
    assert report(store, "error", proxy="ns/a", target="x.example") == ["counted", "ns/a", "x.example", "1"]
    assert report(store, "error", proxy="ns/a", target="y.example") == ["counted", "ns/a", "y.example", "2"]
    assert report(store, "ok", proxy="ns/a", target="y.example") == ["ok", "ns/a", "y.example"]
    assert report(store, "error", proxy="ns/a", target="x.example")[3] == "1"
    report(store, "error", proxy="ns/a", target="x.example")
    got = report(store, "error", proxy="ns/a", target="x.example", global_=300)
    assert got[:4] == ["cooldown", "ns/a", "x.example", "global"]
    for target in ("x.example", "any.example"):
        busy = lease(store, target=target)[1]
        assert isinstance(busy, Busy) and busy.free_at == pytest.approx(NOW + 300)
    assert lease(store, now=NOW + 300.5)[1].proxy == "ns/a"


def test_reports_about_unknown_things(store):
    assert report(store, "ok", lease_id="f" * 32) == ["unknown-lease"]
    assert report(store, "ok", proxy="ns/none", target="a.b") == ["unknown-proxy"]


def test_expiry_frees_the_slot_and_release_after_it_is_unknown(store):
    running(store, "ns/a")
    lid, _ = lease(store, ttl=5)
    assert store.leases.active(NOW) == 1 and store.leases.active(NOW + 5) == 0
    assert isinstance(lease(store, now=NOW + 4.9)[1], Busy)
    assert lease(store, now=NOW + 5.0)[1].proxy == "ns/a"  # the expired one was swept
    assert store.leases.release(lid, NOW + 6) == ["unknown"]
    assert store.leases.loads() == {"ns/a": 1}


def test_release_of_an_expired_lease_not_yet_swept(store):
    running(store, "ns/a")
    lid, _ = lease(store, ttl=5)
    assert store.leases.release(lid, NOW + 10) == ["expired"]
    assert store.leases.loads() == {"ns/a": 0}
    assert store.leases.release(lid, NOW + 10) == ["unknown"]


@pytest.mark.parametrize("change, why", [
    (lambda s: s._redis.hdel(keys.PX_ENDPOINTS, "ns/a"), "gone"),
    (lambda s: running(s, "ns/a", uid="u2"), "replaced"),
    (lambda s: verdict(s, "ns/a", "u", False), "unhealthy"),
])
def test_release_says_revoked_when_the_proxy_changed(store, change, why):
    running(store, "ns/a")
    lid, _ = lease(store)
    change(store)
    assert store.leases.release(lid, NOW) == ["revoked", why]
    assert store.leases.loads().get("ns/a", 0) == 0


def test_sync_adds_running_proxies_and_drops_gone_idle_ones(store):
    running(store, "ns/a")
    running(store, "ns/b")
    assert store.leases.sync(NOW) == (2, 0)
    _lid, got = lease(store)
    store._redis.hdel(keys.PX_ENDPOINTS, "ns/a", "ns/b")
    joined, left = store.leases.sync(NOW)
    assert joined == 0 and left == 1 and store.leases.loads() == {got.proxy: 1}
    assert store.leases.sync(NOW + 61) == (0, 1) and store.leases.loads() == {}


def test_a_corrupt_endpoint_is_skipped(store):
    store._redis.hset(keys.PX_ENDPOINTS, "ns/bad", "{not json")
    running(store, "ns/a")
    assert lease(store)[1].proxy == "ns/a"
    assert isinstance(lease(store)[1], Busy)
