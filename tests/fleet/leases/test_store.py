"""The lease scripts (fleet.store.leases) on fakeredis with Lua: least-loaded
choice, capacity, sticky keys, cooldown scopes, expiry, revocation (another
uid, instance or ip:port), idempotent release, the egress address."""

from __future__ import annotations

import json
import time

import fakeredis
import pytest

from fleet.store import Store, keys
from fleet.store.leases import RELEASE_KEEP, RELEASED, Busy, Granted, LeaseCall, Life, NoProxy, RenewCall, ReportCall

NOW = 1_800_000_000.0


@pytest.fixture
def store():
    s = Store(fakeredis.FakeRedis())
    yield s
    s.close()


def running(store, key: str, uid: str = "u", provider: str = "lab", region: str = "r1", zone: str = "z1", port: int = 3128,
            instance: str | None = "i-1", ip: str = "127.0.0.1", pool: str | None = None):
    doc = {"uid": uid, "ip": ip, "port": port, "provider": provider, "region": region, "zone": zone}
    if instance is not None:
        doc["instance"] = instance
    if pool is not None:
        doc["pool"] = pool
    store._redis.hset(keys.PX_ENDPOINTS, key, json.dumps(doc))


def verdict(store, key: str, uid: str, healthy: bool, egress: str | None = None):
    doc = {"uid": uid, "healthy": healthy, "since": NOW}
    if egress is not None:
        doc["egressIP"] = egress
    store._redis.hset(keys.PROBE_VERDICTS, key, json.dumps(doc))


_ids = iter(range(10**9))


def lease(store, target="example.com", now=NOW, ttl=60.0, max_per_proxy=1, rand=0.0, **kw):
    call = LeaseCall(lease_id=f"{next(_ids):032x}", target=target, expires=now + ttl, max_per_proxy=max_per_proxy, **kw)
    return call.lease_id, store.leases.lease(call, now, rand)


def report(store, outcome, now=NOW, blocked=600.0, errors=3, global_=300.0, **kw):
    return store.leases.report(ReportCall(outcome=outcome, **kw), now, blocked, errors, global_)


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


def load(store, proxy: str) -> float:
    return store._redis.zscore(keys.LEASE_LOAD, proxy) or 0.0


def test_a_sessions_concurrent_leases_share_its_proxy_as_one_holder(store):
    """A browser's six connections of one session: one proxy, one unit of its capacity; another session takes
    another proxy; the load falls back with the session's last release, not its first."""
    for k in ("ns/a", "ns/b", "ns/c"):
        running(store, k)
    got = [lease(store, sticky="gw/acme/b1", session_connections=16, rand=0.5) for _ in range(6)]
    assert {g.proxy for _, g in got} == {got[0][1].proxy}
    assert load(store, got[0][1].proxy) == 1
    other = [lease(store, sticky="gw/acme/b2", session_connections=16) for _ in range(6)]
    assert {g.proxy for _, g in other} == {other[0][1].proxy} != {got[0][1].proxy}
    for lid, _ in got[:5]:
        assert store.leases.release(lid, NOW) == ["released"]
    assert load(store, got[0][1].proxy) == 1
    assert lease(store, sticky="gw/acme/b1", session_connections=16)[1].proxy == got[0][1].proxy
    store.leases.release(got[5][0], NOW)
    assert load(store, got[0][1].proxy) == 1  # the lease just above holds it still


def test_a_sessions_last_lease_ending_frees_its_proxy_also_by_expiry(store):
    running(store, "ns/a")
    _, g1 = lease(store, sticky="s", session_connections=16, ttl=10)
    _, g2 = lease(store, sticky="s", session_connections=16, ttl=20)
    assert g1.proxy == g2.proxy == "ns/a" and load(store, "ns/a") == 1
    assert isinstance(lease(store, sticky="t", session_connections=16, now=NOW + 11)[1], Busy)  # the first swept, the second holds
    assert load(store, "ns/a") == 1
    assert lease(store, sticky="t", session_connections=16, now=NOW + 21)[1].proxy == "ns/a"  # both gone
    assert load(store, "ns/a") == 1


def test_a_session_at_its_connection_limit_waits_and_never_moves(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    held = [lease(store, sticky="s", session_connections=3, ttl=30 + i) for i in range(3)]
    proxy = held[0][1].proxy
    busy = lease(store, sticky="s", session_connections=3)[1]
    assert isinstance(busy, Busy) and busy.free_at == pytest.approx(NOW + 30)
    assert store._redis.get(keys.LEASE_STICKY + "s").decode() == proxy  # still bound to its proxy
    store.leases.release(held[0][0], NOW)
    assert lease(store, sticky="s", session_connections=3)[1].proxy == proxy


@pytest.mark.parametrize(("why", "make"), [
    ("gone", lambda store, p: store._redis.hdel(keys.PX_ENDPOINTS, p)),
    ("unhealthy", lambda store, p: verdict(store, p, "u", healthy=False)),
    ("cooling", lambda store, p: report(store, "blocked", proxy=p, target="example.com")),
])
def test_a_session_moves_when_its_proxy_is_gone_unhealthy_or_cooling(store, why, make):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    _, first = lease(store, sticky="s", session_connections=16)
    make(store, first.proxy)
    moved = lease(store, sticky="s", session_connections=16)[1]
    assert isinstance(moved, Granted) and moved.proxy != first.proxy, why


def test_without_session_sharing_each_lease_is_a_holder(store):
    """The lease API's sticky keys (session_connections 0): each lease is a unit of capacity, as before."""
    for k in ("ns/a", "ns/b"):
        running(store, k)
    a = lease(store, sticky="job")[1]
    b = lease(store, sticky="job")[1]
    assert a.proxy != b.proxy and load(store, a.proxy) == load(store, b.proxy) == 1


def test_a_retry_after_a_timeout_keeps_the_session_bound_one_after_a_refusal_moves_it(store):
    """The gateway's retry elsewhere (its `skip`): after a timeout (the origin behind the proxy may be slow) the
    session stays bound to its proxy; after a refusal (the proxy is not there) the grant rebinds it."""
    for k in ("ns/a", "ns/b"):
        running(store, k)
    first = lease(store, sticky="gw/acme/s1", session_connections=16)[1].proxy
    lid, got = lease(store, sticky="gw/acme/s1", session_connections=16, skip=(first,), keep_sticky=True)
    other = got.proxy
    assert other != first and store._redis.get(keys.LEASE_STICKY + "gw/acme/s1") == first.encode()
    store.leases.release(lid, NOW)
    moved = lease(store, sticky="gw/acme/s1", session_connections=16, skip=(first,))[1].proxy
    assert moved == other and store._redis.get(keys.LEASE_STICKY + "gw/acme/s1") == other.encode()


def test_a_sessions_ban_report_moves_it_off_its_proxy_for_every_host(store):
    """The gateway's in-band ban report (by session, no lease): that proxy cools for that host, and the session's
    next lease, for any host, takes another proxy and stays there; a renewal of a lease it still holds on the old
    proxy does not bring it back."""
    for k in ("ns/a", "ns/b"):
        running(store, k)
    lid, first = lease(store, target="shop.example", sticky="gw/acme/s1", session_connections=16)
    got = report(store, "blocked", target="shop.example", sticky="gw/acme/s1")
    assert got[:4] == ["cooldown", first.proxy, "shop.example", "target"]
    store.leases.release(lid, NOW)
    moved = lease(store, target="news.example", sticky="gw/acme/s1", session_connections=16)[1]
    assert moved.proxy != first.proxy
    assert lease(store, target="news.example", sticky="gw/acme/s1", session_connections=16)[1].proxy == moved.proxy


def test_a_renewal_on_the_proxy_a_session_left_does_not_rebind_it(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    old, first = lease(store, target="t1.example", sticky="gw/acme/s1", session_connections=16)
    report(store, "blocked", target="t2.example", sticky="gw/acme/s1")
    assert store._redis.get(keys.LEASE_STICKY + "gw/acme/s1") == f"!{first.proxy}".encode()
    store.leases.renew(RenewCall(lease_id=old, ttl=60, default_ttl=60, max_per_proxy=1, sticky_keep=600), NOW + 1)
    assert store._redis.get(keys.LEASE_STICKY + "gw/acme/s1") == f"!{first.proxy}".encode()


def test_a_session_that_left_its_only_proxy_comes_back_to_it_for_other_hosts(store):
    running(store, "ns/a")
    lid, _ = lease(store, target="shop.example", sticky="gw/acme/s1", session_connections=16)
    report(store, "blocked", target="shop.example", sticky="gw/acme/s1")
    store.leases.release(lid, NOW)
    assert lease(store, target="news.example", sticky="gw/acme/s1", session_connections=16)[1].proxy == "ns/a"
    assert isinstance(lease(store, target="shop.example", sticky="gw/acme/s2", session_connections=16)[1], Busy)


def test_a_ban_report_by_a_session_without_a_proxy_names_none(store):
    running(store, "ns/a")
    assert report(store, "blocked", target="shop.example", sticky="gw/acme/nobody") == ["unknown-proxy"]


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
    assert store.leases.release(lid, NOW + 10) == ["expired"]  # a repeated release: the same answer


@pytest.mark.parametrize("change, why", [
    (lambda s: s._redis.hdel(keys.PX_ENDPOINTS, "ns/a"), "gone"),
    (lambda s: running(s, "ns/a", uid="u2"), "replaced"),
    (lambda s: running(s, "ns/a", instance="i-2"), "replaced"),  # same uid, another instance, same ip:port
    (lambda s: running(s, "ns/a", port=3129), "replaced"),  # same uid and instance, another port
    (lambda s: running(s, "ns/a", ip="127.0.0.2"), "replaced"),
    (lambda s: running(s, "ns/a", instance=None, port=3129), "replaced"),  # no instance named: ip:port still counts
    (lambda s: verdict(s, "ns/a", "u", False), "unhealthy"),
    (lambda s: running(s, "ns/a", zone="z9"), None),  # the same instance at the same address: released
    (lambda s: running(s, "ns/a", instance=None), None),  # an endpoint that names no instance: not a replacement
    (lambda s: verdict(s, "ns/a", "u", True, egress="203.0.113.9"), None),
])
def test_release_says_revoked_when_the_proxy_changed(store, change, why):
    running(store, "ns/a")
    lid, _ = lease(store)
    change(store)
    assert store.leases.release(lid, NOW) == (["revoked", why] if why else ["released"])
    assert store.leases.loads().get("ns/a", 0) == 0


def test_a_lease_granted_before_instances_were_stored_compares_the_uid_only(store):
    running(store, "ns/a")
    lid, _ = lease(store)
    doc = json.loads(store.leases.lease_doc(lid))
    assert (doc["uid"], doc["instance"], doc["ip"], doc["port"]) == ("u", "i-1", "127.0.0.1", 3128)
    store._redis.hset(keys.LEASE_DOCS, lid, json.dumps({k: v for k, v in doc.items() if k not in ("instance", "ip", "port")}))
    running(store, "ns/a", instance="i-2", port=4000)
    assert store.leases.release(lid, NOW) == ["released"]


@pytest.mark.parametrize("change, first", [
    (lambda s: None, ["released"]),
    (lambda s: running(s, "ns/a", instance="i-2"), ["revoked", "replaced"]),
    (lambda s: s._redis.hdel(keys.PX_ENDPOINTS, "ns/a"), ["revoked", "gone"]),
    (lambda s: verdict(s, "ns/a", "u", False), ["revoked", "unhealthy"]),
])
def test_a_second_release_answers_the_first_ones_answer(store, change, first):
    running(store, "ns/a")
    lid, _ = lease(store)
    change(store)
    assert store.leases.release(lid, NOW) == first
    running(store, "ns/a", instance="i-3")  # whatever happens since does not change the answer
    verdict(store, "ns/a", "u", True)
    before = (store.leases.loads(), store._redis.zcard(keys.LEASE_EXPIRY))
    for _ in range(3):
        assert store.leases.release(lid, NOW + 10) == first
    assert (store.leases.loads(), store._redis.zcard(keys.LEASE_EXPIRY)) == before  # counted once
    ttl = store._redis.pttl(RELEASED + lid)
    assert RELEASE_KEEP * 1000 - 5000 < ttl <= RELEASE_KEEP * 1000  # the record is bounded


def test_the_release_record_lapses_and_a_lease_never_granted_stays_unknown(store):
    running(store, "ns/a")
    lid, _ = lease(store)
    assert store.leases.release(lid, NOW, keep=0.05) == ["released"]
    assert store.leases.release(lid, NOW) == ["released"]
    time.sleep(0.1)  # Redis expires the record
    assert store.leases.release(lid, NOW) == ["unknown"]
    assert store._redis.exists(RELEASED + lid) == 0
    never = "e" * 32
    assert store.leases.release(never, NOW) == ["unknown"]
    assert store.leases.release(never, NOW) == ["unknown"]
    assert store._redis.keys(RELEASED + "*") == []  # an unknown id leaves nothing behind


@pytest.mark.parametrize("change, got", [
    (lambda s: running(s, "ns/a", instance="i-2"), ["revoked", "replaced"]),
    (lambda s: running(s, "ns/a", port=4000), ["revoked", "replaced"]),
    (lambda s: s._redis.hdel(keys.PX_ENDPOINTS, "ns/a"), ["revoked", "gone"]),
])
def test_a_report_on_a_lease_whose_instance_is_gone_records_nothing(store, change, got):
    running(store, "ns/a")
    lid, _ = lease(store, target="shop.example")
    change(store)
    before = store.leases.dump()
    assert report(store, "blocked", lease_id=lid) == got
    assert store.leases.dump() == before  # no cooldown for the new instance


def test_a_report_on_a_lease_whose_proxy_is_unhealthy_still_counts(store):
    running(store, "ns/a")
    lid, _ = lease(store, target="shop.example")
    verdict(store, "ns/a", "u", False)  # the same instance: what it did is still about it
    assert report(store, "blocked", lease_id=lid)[0] == "cooldown"


def test_the_grant_carries_the_probers_egress_address_for_the_same_uid(store):
    running(store, "ns/a", uid="u1")
    running(store, "ns/b", uid="u2")
    running(store, "ns/c", uid="u3")
    verdict(store, "ns/a", "u1", True, egress="203.0.113.7")
    verdict(store, "ns/b", "old", True, egress="203.0.113.8")  # about an earlier Proxy under the name: not this one
    verdict(store, "ns/c", "u3", True)  # probed, no echo
    got = {g.proxy: g.egress_ip for g in (lease(store)[1] for _ in range(3))}
    assert got == {"ns/a": "203.0.113.7", "ns/b": "", "ns/c": ""}


def test_sync_adds_running_proxies_and_drops_gone_idle_ones(store):
    running(store, "ns/a")
    running(store, "ns/b")
    assert store.leases.sync(NOW) == (2, 0)
    _lid, got = lease(store)
    store._redis.hdel(keys.PX_ENDPOINTS, "ns/a", "ns/b")
    joined, left = store.leases.sync(NOW)
    assert joined == 0 and left == 1 and store.leases.loads() == {got.proxy: 1}
    assert store.leases.sync(NOW + 61) == (0, 1) and store.leases.loads() == {}


def test_a_new_proxy_joins_at_once_though_another_is_free(store):
    """One crawler asking one at a time never makes every proxy busy: a proxy that went Running takes its share from
    the next lease, not only when all others are full (no sync in between, as under a gateway between syncs)."""
    running(store, "ns/a")
    lid, got = lease(store)
    store.leases.release(lid, NOW)
    running(store, "ns/b")
    seen = set()
    for rand in (0.0, 0.99, 0.0, 0.99):
        lid, got = lease(store, rand=rand)
        seen.add(got.proxy)
        store.leases.release(lid, NOW)
    assert seen == {"ns/a", "ns/b"} and set(store.leases.loads()) | {"ns/b"} == {"ns/a", "ns/b"}
    assert store._redis.zscore(keys.LEASE_LOAD, "ns/b") is not None


def test_a_new_proxy_hidden_by_a_gone_ones_entry_joins_when_nothing_else_is_free(store):
    """A gone proxy's entry (its lease still open until the sync drops it) evens the counts: the new one still joins
    once the others are busy."""
    running(store, "ns/a")
    running(store, "ns/gone")
    assert {lease(store)[1].proxy for _ in range(2)} == {"ns/a", "ns/gone"}
    store._redis.hdel(keys.PX_ENDPOINTS, "ns/gone")
    running(store, "ns/b")
    assert store._redis.hlen(keys.PX_ENDPOINTS) == store._redis.zcard(keys.LEASE_LOAD) == 2
    assert lease(store)[1].proxy == "ns/b"


def test_a_corrupt_endpoint_is_skipped(store):
    store._redis.hset(keys.PX_ENDPOINTS, "ns/bad", "{not json")
    running(store, "ns/a")
    assert lease(store)[1].proxy == "ns/a"
    assert isinstance(lease(store)[1], Busy)


# -- a gateway session's life (leases.Life): retired after its uses, its age, its error score, or a ban -----------

LIFE = Life(max_uses=3, max_age=100.0, max_error_score=2.0, error_decrement=0.5)
S1 = "gw/acme/s1"


def _use(store, now=NOW, life=LIFE, **kw):
    """One lease of session s1 with `life`, released at once: (the proxy, why the session retired)."""
    lid, got = lease(store, now=now, sticky=S1, session_connections=16, life=life, **kw)
    assert isinstance(got, Granted), got
    store.leases.release(lid, now)
    return got.proxy, got.retired


def test_a_session_retires_after_its_uses_and_moves_off_its_proxy_once(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    first = [_use(store) for _ in range(3)]
    assert len({p for p, _ in first}) == 1 and {r for _, r in first} == {""}
    fourth = _use(store)
    assert fourth[1] == "uses" and fourth[0] != first[0][0]  # retired at its 4th lease: another proxy
    assert [_use(store) for _ in range(2)] == [(fourth[0], "")] * 2  # a new life: it stays there
    assert store._redis.hget(keys.LEASE_LIFE + S1, "uses") == b"3"
    assert store._redis.zscore(keys.LEASE_SESSIONS, S1) is not None


def test_a_session_retires_at_its_age_and_the_lease_api_knows_no_life(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    proxy, _ = _use(store)
    assert _use(store, now=NOW + 99) == (proxy, "")
    moved, why = _use(store, now=NOW + 100)
    assert why == "age" and moved != proxy
    # a sticky lease without a life (the lease API's) writes none and never retires
    for _ in range(5):
        lid, got = lease(store, sticky="api-key")
        store.leases.release(lid, NOW)
        assert got.retired == ""
    assert not store._redis.exists(keys.LEASE_LIFE + "api-key")


def test_errors_raise_a_sessions_score_good_answers_lower_it_and_at_its_limit_it_retires(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    life = Life(max_uses=100, max_age=1000.0, max_error_score=2.0, error_decrement=0.5)
    proxy, _ = _use(store, life=life)
    report(store, "error", proxy=proxy, target="example.com", sticky=S1)
    report(store, "ok", proxy=proxy, target="example.com", sticky=S1, life_decrement=0.5)  # 1 - 0.5
    report(store, "error", proxy=proxy, target="example.com", sticky=S1)  # 1.5
    assert _use(store, life=life) == (proxy, "")
    report(store, "error", proxy=proxy, target="example.com", sticky=S1)  # 2.5 >= 2
    moved, why = _use(store, life=life)
    assert why == "errors" and moved != proxy
    assert store._redis.hget(keys.LEASE_LIFE + S1, "score") == b"0"


def test_a_ban_of_the_sessions_proxy_retires_it_and_says_so(store):
    for k in ("ns/a", "ns/b"):
        running(store, k)
    proxy, _ = _use(store)
    got = report(store, "blocked", target="shop.example", sticky=S1)
    assert got[:3] == ["cooldown", proxy, "shop.example"] and got[-1] == "ban"
    assert store._redis.hget(keys.LEASE_LIFE + S1, "uses") == b"0"
    moved, why = _use(store, target="news.example")
    assert moved != proxy and why == ""  # moved by the ban, already counted as its retirement
    # a ban of a proxy the session is not on retires nothing
    assert report(store, "blocked", proxy=proxy, target="x.example", sticky=S1)[-1] != "ban"
