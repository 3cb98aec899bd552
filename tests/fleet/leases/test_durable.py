"""Leases that survive a loss of Redis data (issue 21, item 3), on fakeredis
with Lua: renewal (extends, keeps the lease's ttl, answers like a release for
what it cannot renew), the epoch guard (vanished, changed, rolled back:
grace in Redis, grants refused, renewals re-create within capacity), the
process's view of it (table), and the API's routes on top."""

from __future__ import annotations

import asyncio
import json

import fakeredis
import pytest

from fleet.leases import decide
from fleet.leases.app import Api, ApiConfig
from fleet.leases.guard import EpochView, should_wait
from fleet.store import Store, keys
from fleet.store.leases import (
    EPOCH,
    Epoch,
    Grace,
    Granted,
    GuardCall,
    LeaseCall,
    NotRenewed,
    RenewCall,
    Renewed,
    online_replicas,
)
from tests.fleet.leases.test_app import AUTH, TOKEN, call

NOW = 1_800_000_000.0
FIRST = GuardCall()  # a process's first call: no epoch seen yet


@pytest.fixture
def store():
    s = Store(fakeredis.FakeRedis())
    yield s
    s.close()


def running(r, key: str, uid: str = "u", ip: str = "10.0.0.1", port: int = 3128) -> None:
    r.hset(keys.PX_ENDPOINTS, key, json.dumps({"uid": uid, "ip": ip, "port": port, "provider": "lab", "instance": "i-" + uid}))


def grant(store, lease_id: str, now: float = NOW, ttl: float = 60.0, guard: GuardCall = FIRST):
    call = LeaseCall(lease_id=lease_id, target="example.com", expires=now + ttl, max_per_proxy=1, ttl=ttl)
    return store.leases.lease_guarded(call, now, 0.0, guard)


def renew(store, lease_id: str, now: float = NOW, ttl: float | None = None, guard: GuardCall = FIRST, **kw):
    return store.leases.renew(RenewCall(lease_id=lease_id, ttl=ttl, default_ttl=300.0, max_per_proxy=1, **kw), now, guard)


# -- renewal ----------------------------------------------------------------------------------------

def test_a_renewal_extends_by_the_leases_own_ttl_or_the_one_asked(store):
    running(store._redis, "ns/a")
    got, _ = grant(store, "a" * 32, ttl=60)
    assert isinstance(got, Granted)
    ren, _ = renew(store, "a" * 32, now=NOW + 50)
    assert isinstance(ren, Renewed) and (ren.expires, ren.ttl, ren.recreated) == (NOW + 110, 60, False)
    assert store._redis.zscore(keys.LEASE_EXPIRY, "a" * 32) == NOW + 110
    assert store._redis.zscore(keys.LEASE_HELD + "ns/a", "a" * 32) == NOW + 110
    ren, _ = renew(store, "a" * 32, now=NOW + 100, ttl=600)
    assert (ren.expires, ren.ttl) == (NOW + 700, 600)
    # the renewed lease still holds its proxy past the first expiry: no second grant
    assert not isinstance(grant(store, "b" * 32, now=NOW + 200)[0], Granted)


@pytest.mark.parametrize("setup, want", [
    ("expired", NotRenewed("expired")),
    ("released", NotRenewed("released")),
    ("gone", NotRenewed("revoked", "gone")),
    ("replaced", NotRenewed("revoked", "replaced")),
    ("unhealthy", NotRenewed("revoked", "unhealthy")),
    ("never", NotRenewed("unknown")),
    ("never-with-proxy", NotRenewed("unknown")),  # no loss seen: nothing is re-created
])
def test_what_a_renewal_cannot_renew(store, setup, want):
    r = store._redis
    running(r, "ns/a")
    lease_id = "c" * 32
    grant(store, lease_id, ttl=60)
    now = NOW + 1
    if setup == "expired":
        now = NOW + 61
    elif setup == "released":
        store.leases.release(lease_id, NOW)
    elif setup == "gone":
        r.hdel(keys.PX_ENDPOINTS, "ns/a")
    elif setup == "replaced":
        running(r, "ns/a", uid="u2")
    elif setup == "unhealthy":
        r.hset(keys.PROBE_VERDICTS, "ns/a", json.dumps({"uid": "u", "healthy": False}))
    before = r.hget(keys.LEASE_DOCS, lease_id)
    kw = {"proxy": "ns/a", "target": "example.com"} if setup == "never-with-proxy" else {}
    got, _ = renew(store, "d" * 32 if setup.startswith("never") else lease_id, now=now, **kw)
    assert got == want
    assert r.hget(keys.LEASE_DOCS, lease_id) == before  # nothing extended


@pytest.mark.parametrize("verdict, egress", [
    ({"uid": "u", "healthy": True, "egressIP": "203.0.113.7"}, "203.0.113.7"),
    ({"uid": "earlier", "healthy": True, "egressIP": "203.0.113.8"}, ""),  # another instance's
    (None, ""),
])
def test_a_renewal_and_a_re_creation_answer_the_endpoint_and_egress_address_as_stored_now(store, verdict, egress):
    r = store._redis
    running(r, "ns/a")
    if verdict:
        r.hset(keys.PROBE_VERDICTS, "ns/a", json.dumps(verdict))
    _, e = grant(store, "a" * 32)
    ren, e = renew(store, "a" * 32, now=NOW + 1, guard=GuardCall(epoch=e.id, seq=e.seq, grace=30))
    assert isinstance(ren, Renewed) and not ren.recreated
    assert ren.endpoint == r.hget(keys.PX_ENDPOINTS, "ns/a") and ren.egress_ip == egress
    r.delete(*r.keys("fleet:lease:*"))  # Redis lost it: the renewal re-creates it from what the client says
    ren, _ = renew(store, "a" * 32, now=NOW + 2, guard=GuardCall(epoch=e.id, seq=e.seq, grace=30), proxy="ns/a", target="example.com")
    assert isinstance(ren, Renewed) and ren.recreated
    assert ren.endpoint == r.hget(keys.PX_ENDPOINTS, "ns/a") and ren.egress_ip == egress


# -- the epoch guard --------------------------------------------------------------------------------

def test_the_first_call_writes_the_epoch_and_later_ones_bump_its_seq(store):
    _, e1 = grant(store, "1" * 32)
    assert e1.lost == "" and e1.seq == 1 and e1.id and e1.grace_until == 0
    _, e2 = renew(store, "1" * 32, guard=GuardCall(epoch=e1.id, seq=e1.seq, grace=30))
    assert (e2.id, e2.seq, e2.lost) == (e1.id, 2, "")
    e3 = store.leases.check(NOW, GuardCall(epoch=e2.id, seq=e2.seq, grace=30))
    assert (e3.seq, e3.lost) == (2, "")  # a check does not bump


@pytest.mark.parametrize("loss, why", [("flush", "vanished"), ("other", "changed"), ("rollback", "rolled-back")])
def test_a_loss_of_data_starts_the_grace_and_grants_nothing(store, loss, why):
    r = store._redis
    running(r, "ns/a")
    running(r, "ns/b", uid="v", ip="10.0.0.2")
    got, e = grant(store, "1" * 32)
    assert isinstance(got, Granted)
    proxy = got.proxy
    seen = GuardCall(epoch=e.id, seq=e.seq + 5 if loss == "rollback" else e.seq, grace=30)  # as if this process saw 5 more
    if loss == "flush":
        r.delete(*r.keys("fleet:lease:*"))
    elif loss == "other":
        r.delete(*r.keys("fleet:lease:*"))
        r.hset(EPOCH, mapping={"id": "another", "created": NOW, "seq": 0})
    got, e = grant(store, "2" * 32, now=NOW + 1, guard=seen)
    assert isinstance(got, Grace) and e.lost == why and e.grace_until == NOW + 31
    assert float(r.hget(EPOCH, "grace")) == NOW + 31
    # another process (no loss seen by it) is refused too: the grace is in Redis
    got, e2 = grant(store, "3" * 32, now=NOW + 2, guard=GuardCall(epoch=e.id, seq=e.seq, grace=30))
    assert isinstance(got, Grace) and e2.lost == "" and e2.grace_until == NOW + 31
    # the holder renews: re-created (Redis lost it; the flush and the other epoch lost it, the rollback did not)
    ren, _ = renew(store, "1" * 32, now=NOW + 3, guard=GuardCall(epoch=e2.id, seq=e2.seq, grace=30), proxy=proxy,
                   target="example.com", ip=json.loads(r.hget(keys.PX_ENDPOINTS, proxy))["ip"], port=3128)
    assert isinstance(ren, Renewed) and ren.proxy == proxy and ren.recreated == (loss != "rollback")
    # a second holder claiming the same proxy: over capacity
    ren, _ = renew(store, "4" * 32, now=NOW + 4, proxy=proxy, target="example.com")
    assert ren == NotRenewed("busy")
    # re-creation checks the address
    other = "ns/b" if proxy == "ns/a" else "ns/a"
    ren, _ = renew(store, "5" * 32, now=NOW + 4, proxy=other, target="example.com", ip="10.9.9.9", port=3128)
    assert ren == NotRenewed("revoked", "replaced")
    # after the grace: grants again
    got, _ = grant(store, "6" * 32, now=NOW + 32)
    assert isinstance(got, Granted) and got.proxy == other


def test_the_grace_is_never_shortened(store):
    _, e = grant(store, "1" * 32)
    store._redis.hset(EPOCH, "grace", NOW + 1000)
    e2 = store.leases.check(NOW + 1, GuardCall(epoch="not-this", seq=e.seq, grace=30))
    assert e2.lost == "changed" and e2.grace_until == NOW + 1000


# -- the process's view (pure) ----------------------------------------------------------------------

@pytest.mark.parametrize("view, got, want_seq, want_grace, why", [
    (EpochView(30), Epoch(1, "e", "", 0), 1, 0, ""),  # first answer: adopted
    (EpochView(30, "e", 9), Epoch(7, "e", "", 0), 9, 0, ""),  # an older answer arriving late keeps the highest
    (EpochView(30, "e", 9), Epoch(3, "e", "rolled-back", NOW + 30), 3, NOW + 30, "rolled-back"),  # the new count
    (EpochView(30, "e", 9), Epoch(1, "f", "changed", NOW + 30), 1, NOW + 30, "changed"),
    (EpochView(30, "e", 9, NOW + 99), Epoch(10, "e", "", NOW + 30), 10, NOW + 99, ""),  # never shortened
    (EpochView(30, "e", 9), Epoch(10, "e", "", NOW + 30), 10, NOW + 30, ""),  # another process's grace
])
def test_the_view_of_the_epoch(view, got, want_seq, want_grace, why):
    assert view.observe(got) == why
    assert (view.epoch, view.seq, view.grace_until) == (got.id, want_seq, want_grace)
    assert view.in_grace(NOW) == (want_grace > NOW)


@pytest.mark.parametrize("info, want", [
    ({"role": "master", "connected_slaves": 2, "slave0": {"state": "online"}, "slave1": {"state": "wait_bgsave"}}, 1),
    ({"role": "master", "connected_slaves": 0}, 0),
    ({"role": "slave", "slave0": {"state": "online"}}, 0),
])
def test_only_streaming_replicas_count(info, want):
    assert online_replicas(info) == want


@pytest.mark.parametrize("replicas, wait_ms, want", [(0, 100, 0), (1, 100, 100), (2, 0, 0), (1, 50, 50)])
def test_waiting_for_a_replica(replicas, wait_ms, want):
    assert should_wait(replicas, wait_ms) == want


# -- the API ----------------------------------------------------------------------------------------

@pytest.fixture
def app():
    server = fakeredis.FakeServer()
    clock = [NOW]
    from fleet.store.leases import AsyncLeases

    a = Api(AsyncLeases(fakeredis.FakeAsyncRedis(server=server)), ApiConfig(token=TOKEN, max_ttl=600, grace=20),
            clock=lambda: clock[0], rand=lambda: 0.0)
    a.raw = fakeredis.FakeRedis(server=server)
    a.clock_ = clock
    yield a
    a.raw.close()


def run(coro):
    return asyncio.run(coro)


def test_renew_through_the_api_and_the_grace_after_a_flush(app):
    running(app.raw, "ns/a")
    status, lease, _ = run(call(app, "POST", "/v1/leases", b'{"target": "example.com", "ttl": 60}', AUTH))
    assert status == 200
    app.clock_[0] = NOW + 30
    status, doc, _ = run(call(app, "POST", f"/v1/leases/{lease['lease']}/renew", b"", AUTH))
    assert status == 200 and doc["expiresAt"] == decide.timestamp(NOW + 90) and doc["recreated"] is False
    assert doc["url"] == lease["url"]
    status, doc, _ = run(call(app, "POST", f"/v1/leases/{lease['lease']}/renew", b'{"ttl": 601}', AUTH))
    assert (status, doc["field"]) == (400, "ttl")
    status, doc, _ = run(call(app, "POST", f"/v1/leases/{'e' * 32}/renew", b"", AUTH))
    assert status == 404 and "unknown lease" in doc["error"]
    status, doc, _ = run(call(app, "POST", "/v1/leases/nope/renew", b"", AUTH))
    assert status == 404
    assert run(call(app, "POST", f"/v1/leases/{lease['lease']}/renew", b""))[0] == 401

    app.raw.flushall()  # Redis restarted without its data
    running(app.raw, "ns/a")  # the controller writes the endpoints again
    app.clock_[0] = NOW + 31
    status, doc, headers = run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))
    assert status == 503 and doc["recovering"] is True and headers[b"retry-after"] == b"20"
    status, health, _ = run(call(app, "GET", "/healthz"))
    assert status == 200 and health["recovering"] is True
    body = json.dumps({"proxy": lease["proxy"], "target": "example.com", "ip": lease["ip"], "port": lease["port"]})
    status, doc, _ = run(call(app, "POST", f"/v1/leases/{lease['lease']}/renew", body.encode(), AUTH))
    assert status == 200 and doc["recreated"] is True and doc["proxy"] == lease["proxy"]
    app.clock_[0] = NOW + 52
    assert run(call(app, "POST", "/v1/leases", b'{"target": "example.com"}', AUTH))[0] == 409  # held by the renewed one
    status, text, _ = run(call(app, "GET", "/metrics"))
    for line in (b'proxy_operator_lease_requests_total{result="recovering"} 1.0',
                 b'proxy_operator_lease_renewals_total{result="renewed"} 1.0',
                 b'proxy_operator_lease_renewals_total{result="recreated"} 1.0',
                 b'proxy_operator_lease_renewals_total{result="unknown"} 2.0',
                 b"proxy_operator_lease_unreplicated_total 0.0"):
        assert line in text, text.decode()
