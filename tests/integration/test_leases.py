"""The lease API on real processes (`python -m fleet.cli api`) and a real
redis-server: capacity under 200 concurrent clients over two API processes,
cooldown scopes, expiry, revocation (a deleted, unhealthy or replaced proxy: another
uid, instance or ip:port), idempotent release over two processes, the egress address,
auth refusals (and two Authorization headers), the bad-input table
(status, field, Redis unchanged), one server span per request under an
incoming traceparent, conformance to its OpenAPI document (schemathesis),
and a fetch through a leased real Squid (the local provider)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

from fleet.store import keys
from fleet.store.leases import LOAD, PREFIX, RELEASE_KEEP
from fleet.testing.api import TOKEN, ApiProc
from fleet.testing.procs import free_port, wait_for

pytestmark = pytest.mark.integration

@pytest.fixture
def apis(redis_server, tmp_path):
    started: list[ApiProc] = []

    def make(name: str = "api", wait: bool = True, **env: str) -> ApiProc:
        api = ApiProc(tmp_path, redis_server.url, name, **env)
        started.append(api)
        return api.start(wait)

    yield make
    for api in started:
        api.stop()
    for api in started:
        assert "Traceback" not in api.log(), api.log()[-3000:]


def running(r, key: str, uid: str = "u1", ip: str = "127.0.0.1", port: int = 3128, instance: str = "lab/i-1",
            **placement: str) -> None:
    r.hset(keys.PX_ENDPOINTS, key, json.dumps({"uid": uid, "ip": ip, "port": port, "provider": placement.get("provider", "lab"),
                                               "region": placement.get("region", "r1"), "zone": placement.get("zone", "z1"),
                                               "instance": instance}))


def state(r) -> dict:
    out = {}
    for key in sorted(r.scan_iter(match="fleet:*")):
        kind = r.type(key).decode()
        out[key] = (r.hgetall(key) if kind == "hash" else r.zrange(key, 0, -1, withscores=True) if kind == "zset"
                    else r.get(key))
    return out


# --- capacity over two processes -----------------------------------------------------------------------

async def _post(port: int, path: str, body: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write((f"POST {path} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        raw = await reader.read()
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head[9:12]), json.loads(payload)


class Client:
    """A keep-alive HTTP/1.1 connection to one API process."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def __aenter__(self) -> Client:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc) -> None:
        self.writer.close()

    async def post(self, path: str, body: bytes) -> tuple[int, dict]:
        self.writer.write((f"POST {path} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {TOKEN}\r\n"
                           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        at = head.find(b"content-length: ")
        length = int(head[at + 16:head.index(b"\r\n", at)])
        return int(head[9:12]), json.loads(await self.reader.readexactly(length))


def test_capacity_is_never_exceeded_by_200_clients_over_two_processes(redis_server, apis):
    r = redis_server.client()
    n, limit = 20, 2
    for i in range(n):
        running(r, f"crawl/p{i:02d}", uid=f"u{i}", port=3000 + i)
    first, second = apis("api-1", FLEET_MAX_LEASES_PER_PROXY=str(limit)), apis("api-2", FLEET_MAX_LEASES_PER_PROXY=str(limit))
    ports = [first.port, second.port]

    async def grab_all() -> list[tuple[int, dict]]:
        # Phase 1: 200 clients at once, nobody releases: exactly n × limit grants, at most `limit` per proxy.
        return await asyncio.gather(*(_post(ports[i % 2], "/v1/leases", b'{"target": "a.example", "ttl": 120}')
                                      for i in range(200)))

    began = time.monotonic()
    answers = asyncio.run(grab_all())
    took = time.monotonic() - began
    granted = [doc for status, doc in answers if status == 200]
    assert Counter(status for status, _ in answers) == {200: n * limit, 409: 200 - n * limit}
    per_proxy = Counter(doc["proxy"] for doc in granted)
    assert len(per_proxy) == n and set(per_proxy.values()) == {limit}
    for _, doc in answers:
        if "retryAfter" in doc:
            # A refusal counts from its own arrival; a grant the other process made later in the burst frees at
            # its own arrival + 120 s, so the honest wait may exceed the TTL by the burst's length (rounded up).
            assert 100 <= doc["retryAfter"] <= 120 + math.ceil(took)
    for doc in granted:
        assert first.release(doc["lease"])[1]["status"] == "released"

    # Phase 2: 200 clients churn lease → hold → release for 3 s. A lease is surely open in Redis from its grant's
    # arrival to its release's sending; in that window no proxy may count more than `limit`.
    holders: Counter[str] = Counter()
    violations: list[str] = []
    done = Counter()

    async def churn(i: int, until: float) -> None:
        async with Client(ports[i % 2]) as c:
            while time.monotonic() < until:
                status, doc = await c.post("/v1/leases", b'{"target": "b.example", "ttl": 60}')
                if status != 200:
                    await asyncio.sleep(0.005)
                    continue
                if holders[doc["proxy"]] >= limit:
                    violations.append(doc["proxy"])
                holders[doc["proxy"]] += 1
                await asyncio.sleep(0.002)
                holders[doc["proxy"]] -= 1
                status, rel = await c.post(f"/v1/leases/{doc['lease']}/release", b"")
                assert (status, rel["status"]) == (200, "released")
                done["ops"] += 1

    async def run_churn() -> None:
        until = time.monotonic() + 3
        await asyncio.gather(*(churn(i, until) for i in range(200)))

    asyncio.run(run_churn())
    assert violations == [] and done["ops"] > 200
    assert r.zrangebyscore(LOAD, f"({limit}", "+inf") == []
    assert r.zcount(PREFIX + "expiry", "-inf", "+inf") == 0


# --- cooldowns, expiry, revocation ---------------------------------------------------------------------

def test_cooldowns_honour_target_and_global_scope(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a")
    api = apis(FLEET_COOLDOWN_BLOCKED="2s", FLEET_COOLDOWN_GLOBAL="2s", FLEET_COOLDOWN_ERRORS="2")
    status, doc, _ = api.lease(target="shop.example")
    assert status == 200
    status, rep, _ = api.report(lease=doc["lease"], outcome="blocked")
    assert status == 200 and rep["cooldown"]["scope"] == "target" and rep["target"] == "shop.example"
    assert api.release(doc["lease"])[1]["status"] == "released"
    status, busy, headers = api.lease(target="shop.example")
    assert status == 409 and 1 <= busy["retryAfter"] <= 2 and headers["retry-after"] == str(busy["retryAfter"])
    status, other, _ = api.lease(target="news.example")  # another target: not cooling
    assert status == 200 and other["proxy"] == "crawl/a"
    api.release(other["lease"])
    assert 'proxy_operator_cooldowns_active{scope="target"} 1.0' in api.metrics()
    wait_for(lambda: api.lease(target="shop.example", ttl=1)[0] == 200, 5, "the target cooldown to end")

    # errors in a row → global cooldown; an ok in between resets the count
    for outcome in ("error", "ok", "error"):
        assert api.report(proxy="crawl/a", target="x.example", outcome=outcome)[0] == 200
    assert api.lease(target="y.example", ttl=1)[0] in (200, 409)  # not cooling (the ttl=1 lease above may hold it)
    status, rep, _ = api.report(proxy="crawl/a", target="x.example", outcome="error")
    assert rep["cooldown"]["scope"] == "global"
    wait_for(lambda: r.zcount(PREFIX + "expiry", f"({time.time()}", "+inf") == 0, 5, "the short leases to expire")
    for target in ("x.example", "y.example", "z.example"):
        assert api.lease(target=target)[0] == 409
    text = api.metrics()
    assert 'proxy_operator_cooldowns_active{scope="global"} 1.0' in text
    assert 'proxy_operator_reports_total{outcome="error"} 3.0' in text
    wait_for(lambda: api.lease(target="z.example")[0] == 200, 5, "the global cooldown to end")


def test_unreleased_leases_expire_at_their_ttl(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a")
    api = apis()
    status, doc, _ = api.lease(ttl=1)
    assert status == 200
    assert "proxy_operator_leases_active 1.0" in api.metrics()
    assert api.lease()[0] == 409
    t0 = time.monotonic()
    second = wait_for(lambda: (lambda got: got[1] if got[0] == 200 else None)(api.lease(ttl=30)), 5, "the lease to expire")
    assert time.monotonic() - t0 < 2.5 and second["proxy"] == "crawl/a"
    status, gone, _ = api.release(doc["lease"])
    assert status == 404 and gone["field"] == "id"
    assert "proxy_operator_leases_active 1.0" in api.metrics()


def test_a_proxy_that_turns_unhealthy_or_is_deleted_stops_being_leased_and_its_leases_are_revoked(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a", uid="a1")
    running(r, "crawl/b", uid="b1")
    api = apis(FLEET_MAX_LEASES_PER_PROXY="5")
    leases = {}
    for _ in range(2):
        _, doc, _ = api.lease()
        leases[doc["proxy"]] = doc["lease"]
    assert set(leases) == {"crawl/a", "crawl/b"}
    r.hset(keys.PROBE_VERDICTS, "crawl/a", json.dumps({"uid": "a1", "healthy": False, "since": time.time()}))
    r.hdel(keys.PX_ENDPOINTS, "crawl/b")
    assert api.lease()[0] == 503
    assert [p["proxy"] for p in api.get("/v1/proxies")[1]["proxies"]] == []
    assert api.release(leases["crawl/a"])[1] == {"lease": leases["crawl/a"], "status": "revoked", "reason": "unhealthy",
                                                "message": "the proxy turned unhealthy since"}
    assert api.release(leases["crawl/b"])[1]["reason"] == "gone"
    running(r, "crawl/b", uid="b2")  # replaced: a new instance under the same name
    status, doc, _ = api.lease()
    assert status == 200 and doc["proxy"] == "crawl/b"
    running(r, "crawl/b", uid="b3")
    assert api.release(doc["lease"])[1]["reason"] == "replaced"


def test_a_lease_across_an_instance_replacement_reads_revoked_and_a_second_release_answers_the_same(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a", uid="a1", port=3128, instance="lab/i-1")
    first, second = apis("api-1"), apis("api-2")
    _, held, _ = first.lease(target="shop.example")
    assert (held["proxy"], held["port"]) == ("crawl/a", 3128)
    # The same Proxy (uid a1) on a new instance, at a new port: the lease's ip:port is no longer its proxy.
    running(r, "crawl/a", uid="a1", port=3129, instance="lab/i-2")
    before = state(r)
    status, rep, _ = first.report(lease=held["lease"], outcome="blocked")  # about the old instance: not recorded
    assert (status, rep["field"], rep["reason"]) == (410, "lease", "replaced")
    assert state(r) == before
    want = {"lease": held["lease"], "status": "revoked", "reason": "replaced",
            "message": "the proxy was replaced since (another instance or address)"}
    answers = [api.release(held["lease"])[:2] for api in (first, second, first)]
    assert answers == [(200, want)] * 3
    assert r.zscore(LOAD, "crawl/a") == 0 and r.hlen(keys.LEASE_DOCS) == 0

    # The new instance is leased at its address; a new instance id alone (the same ip:port) revokes too.
    _, doc, _ = second.lease(target="shop.example")
    assert doc["port"] == 3129
    running(r, "crawl/a", uid="a1", port=3129, instance="lab/i-3")
    assert first.release(doc["lease"])[1]["reason"] == "replaced"
    # Unchanged: released, and released again from the other process; an id never granted stays 404.
    _, doc, _ = first.lease()
    assert [api.release(doc["lease"])[:2] for api in (second, first)] == \
        [(200, {"lease": doc["lease"], "status": "released", "reason": None})] * 2
    assert first.release("e" * 32)[:2] == (404, {"error": f"unknown lease {'e' * 32}", "field": "id"})
    ttl = r.pttl(keys.LEASE_RELEASED + doc["lease"])
    assert 0 < ttl <= RELEASE_KEEP * 1000


def test_concurrent_releases_of_one_lease_over_two_processes_count_once(redis_server, apis):
    r = redis_server.client()
    for i in range(10):
        running(r, f"crawl/p{i}", uid=f"u{i}", port=3000 + i)
    ports = [apis("api-1").port, apis("api-2").port]

    async def go() -> list[list[tuple[int, dict]]]:
        grants = await asyncio.gather(*(_post(ports[i % 2], "/v1/leases", b'{"target": "a.example"}') for i in range(10)))
        ids = [doc["lease"] for status, doc in grants if status == 200]
        assert len(ids) == 10
        return await asyncio.gather(*(asyncio.gather(*(_post(ports[j % 2], f"/v1/leases/{lid}/release", b"")
                                                       for j in range(8))) for lid in ids))

    for answers in asyncio.run(go()):
        assert {(status, doc["status"]) for status, doc in answers} == {(200, "released")}
    assert set(r.zrange(LOAD, 0, -1, withscores=True)) == {(f"crawl/p{i}".encode(), 0.0) for i in range(10)}


def test_lease_and_list_answers_carry_the_probers_egress_address(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a", uid="a1", port=3000)
    running(r, "crawl/b", uid="b1", port=3001)
    r.hset(keys.PROBE_VERDICTS, "crawl/a", json.dumps({"uid": "a1", "healthy": True, "since": time.time(),
                                                       "egressIP": "203.0.113.7"}))
    r.hset(keys.PROBE_VERDICTS, "crawl/b", json.dumps({"uid": "old", "healthy": True, "since": time.time(),
                                                       "egressIP": "203.0.113.8"}))  # about an earlier Proxy
    api = apis()
    listed = {p["proxy"]: p["egressIP"] for p in api.get("/v1/proxies")[1]["proxies"]}
    assert listed == {"crawl/a": "203.0.113.7", "crawl/b": None}
    got = {doc["proxy"]: doc["egressIP"] for doc in (api.lease()[1] for _ in range(2))}
    assert got == {"crawl/a": "203.0.113.7", "crawl/b": None}


def test_a_restart_loses_nothing(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a")
    api = apis()
    _, doc, _ = api.lease(sticky="job-1")
    api.report(lease=doc["lease"], target="shop.example", outcome="blocked")
    api.stop()
    again = apis("api-again")
    assert again.lease()[0] == 409  # the lease is still held
    assert again.release(doc["lease"])[1]["status"] == "released"
    assert again.lease(target="shop.example")[0] == 409  # still cooling for that target
    _, doc2, _ = again.lease(target="other.example", sticky="job-1")
    assert doc2["proxy"] == "crawl/a"


# --- auth -------------------------------------------------------------------------------------------------

def test_each_operation_is_one_script_call_and_a_grant_that_waits_is_one_round_trip(redis_server):
    """Redis's own count of what each operation sends (INFO commandstats): one EVALSHA (and, waiting
    for a replica, one WAIT written with it: no SCRIPT EXISTS first); after SCRIPT FLUSH (a restarted
    Redis) the script is loaded once and the operation still answers."""
    from fleet.store.leases import SCRIPTS, AsyncLeases, GuardCall, LeaseCall, RenewCall, ReportCall

    r = redis_server.client()
    running(r, "crawl/a")
    for name in ("lease", "renew", "report"):
        r.script_load(SCRIPTS[name])

    def sent() -> dict[str, int]:
        got = {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}
        r.config_resetstat()
        return {k: v for k, v in got.items() if k.split("|")[0] not in ("info", "config")}

    async def go() -> None:
        leases = AsyncLeases.from_url(redis_server.url)
        try:
            now = time.time()
            await leases.ping()
            r.config_resetstat()
            call = LeaseCall(lease_id="a" * 32, target="example.com", expires=now + 60, max_per_proxy=1, ttl=60.0)
            got, epoch, acked = await leases.lease(call, now, 0.0, GuardCall(), wait_ms=5)
            assert type(got).__name__ == "Granted" and acked == 0  # no replica: WAIT answers 0 after 5 ms
            top = {k: v for k, v in sent().items() if k in ("evalsha", "wait") or k.startswith("script")}
            assert top == {"evalsha": 1, "wait": 1}, top
            await leases.report(ReportCall(outcome="ok", lease_id="a" * 32), now, 600, 3, 300)
            assert sent().get("evalsha") == 1
            r.script_flush()
            ren, _, acked = await leases.renew(RenewCall(lease_id="a" * 32, ttl=None, default_ttl=300, max_per_proxy=1), now + 1,
                                               GuardCall(epoch=epoch.id, seq=epoch.seq), wait_ms=5)
            assert type(ren).__name__ == "Renewed" and acked == 0
            calls = sent()
            assert calls.get("script|load") == 1 and calls.get("evalsha") == 2, calls  # NOSCRIPT, loaded, again
            r.script_flush()
            assert await leases.release("a" * 32, now + 2) == ["released"]
            assert sent().get("script|load") == 1
        finally:
            await leases.close()

    asyncio.run(go())


def test_auth_refusals(redis_server, apis, tmp_path):
    r = redis_server.client()
    running(r, "crawl/a")
    env = {k: v for k, v in os.environ.items() if k != "FLEET_API_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "fleet.cli", "api", "--broker", redis_server.url,
                          "--api-bind-address", f"127.0.0.1:{free_port()}"], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and "refusing to start without a token" in out.stderr

    api = apis()
    before = state(r)
    for token in (None, "wrong-token", TOKEN + "x"):
        for method, path, body in (("GET", "/v1/proxies", None), ("POST", "/v1/leases", {"target": "a.example"}),
                                   ("POST", "/v1/reports", {"proxy": "crawl/a", "target": "a.b", "outcome": "blocked"}),
                                   ("POST", "/v1/leases/" + "0" * 32 + "/release", b"")):
            status, doc, headers = api.request(method, path, body, token=token)
            assert status == 401 and doc["field"] == "authorization" and headers["www-authenticate"].startswith("Bearer")
    assert state(r) == before
    assert api.get("/healthz", token=None)[1] == {"ok": True, "insecure": False}
    assert 'proxy_operator_lease_requests_total{result="unauthorized"} 3.0' in api.metrics()

    # Two Authorization headers (a right and a wrong one, either order): refused, whichever the server would keep.
    before = state(r)
    for pair in ((TOKEN, "wrong"), ("wrong", TOKEN), (TOKEN, TOKEN)):
        body = b'{"target": "a.example"}'
        status, doc = raw_request(api.port, b"POST /v1/leases HTTP/1.1\r\nHost: api\r\nContent-Length: %d\r\n" % len(body)
                                  + b"".join(b"Authorization: Bearer %s\r\n" % t.encode() for t in pair) + b"\r\n" + body)
        assert (status, doc["field"]) == (400, "authorization") and "more than one" in doc["error"]
    assert state(r) == before

    open_api = apis("insecure", FLEET_API_TOKEN="", FLEET_INSECURE_NO_AUTH="true")
    assert "WARNING" in open_api.log().upper() and "without authentication" in open_api.log()
    assert open_api.get("/healthz", token=None)[1]["insecure"] is True
    assert open_api.request("POST", "/v1/leases", {"target": "a.example"}, token=None)[0] == 200


# --- bad input ----------------------------------------------------------------------------------------------

BAD = [
    ("POST", "/v1/leases", b"{not json", 400, "body"),
    ("POST", "/v1/leases", b"", 400, "body"),
    ("POST", "/v1/leases", b"[]", 400, "body"),
    ("POST", "/v1/leases", b'{"target": "a.example", "colour": "red"}', 400, "colour"),
    ("POST", "/v1/leases", b'{"target": "a.example", "ttl": 0}', 400, "ttl"),
    ("POST", "/v1/leases", b'{"target": "a.example", "ttl": 172800}', 400, "ttl"),
    ("POST", "/v1/leases", b'{"target": "a.example", "ttl": "5m"}', 400, "ttl"),
    ("POST", "/v1/leases", b'{"target": "not a host"}', 400, "target"),
    ("POST", "/v1/leases", b'{"target": "http://a.example/"}', 400, "target"),
    ("POST", "/v1/leases", b'{"target": "a.example", "provider": "NO"}', 400, "provider"),
    ("POST", "/v1/leases", b'{"target": "a.example", "sticky": ""}', 400, "sticky"),
    ("POST", "/v1/leases/" + "f" * 32 + "/release", b"", 404, "id"),
    ("POST", "/v1/leases/not-a-lease/release", b"", 404, "id"),
    ("POST", "/v1/reports", b'{"lease": "' + b"f" * 32 + b'", "outcome": "ok"}', 404, "lease"),
    ("POST", "/v1/reports", b'{"proxy": "crawl/none", "target": "a.b", "outcome": "blocked"}', 404, "proxy"),
    ("POST", "/v1/reports", b'{"proxy": "crawl/a", "target": "a.b", "outcome": "meh"}', 400, "outcome"),
    ("POST", "/v1/reports", b'{"proxy": "crawl/a", "outcome": "blocked"}', 400, "target"),
    ("POST", "/v1/reports", b'{"proxy": "crawl/a", "target": "a b", "outcome": "blocked"}', 400, "target"),
    ("GET", "/v1/proxies?colour=red", None, 400, "colour"),
    ("GET", "/v1/proxies?zone=a/b", None, 400, "zone"),
]


def test_bad_input_gets_a_4xx_naming_the_field_and_changes_nothing_in_redis(redis_server, apis):
    r = redis_server.client()
    running(r, "crawl/a")
    api = apis()
    _, held, _ = api.lease(target="held.example")  # some state to keep: a lease, a load entry
    before = state(r)
    for method, path, body, status, field in BAD:
        got, doc, _ = api.request(method, path, body)
        assert (got, doc.get("field")) == (status, field), (path, body[:80] if body else None, doc)
        assert isinstance(doc.get("error"), str) and doc["error"]
        assert state(r) == before, (path, body[:80] if body else None)
    # A 10 MB body: refused by its Content-Length before a byte of it is read; chunked, cut at the bound.
    for head, body in ((b"Content-Length: %d\r\n" % (10 * 1024 * 1024), b"{" * 1024),
                       (b"Transfer-Encoding: chunked\r\n", b"11800\r\n" + b" " * 0x11800 + b"\r\n0\r\n\r\n")):
        status, doc = raw_request(api.port, b"POST /v1/leases HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "
                                  + TOKEN.encode() + b"\r\n" + head + b"\r\n" + body)
        assert (status, doc["field"]) == (413, "body")
        assert state(r) == before
    assert api.release(held["lease"])[1]["status"] == "released"


def raw_request(port: int, data: bytes) -> tuple[int, dict]:
    """Send `data` on a fresh connection and read the answer (the server may close before reading it all)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        raw = b""
        while b"\r\n\r\n" not in raw or len(raw.partition(b"\r\n\r\n")[2]) < int(
                raw.lower().partition(b"content-length: ")[2].split(b"\r\n")[0] or 0):
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head[9:12]), json.loads(payload)


# --- tracing ------------------------------------------------------------------------------------------------

def test_one_server_span_per_request_under_the_incoming_traceparent(redis_server, apis):
    from tests.fakes.otlp import Collector

    r = redis_server.client()
    running(r, "crawl/a")
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with Collector() as collector:
        api = apis(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100", OTEL_TRACES_SAMPLER="always_on")
        status, _doc, _ = api.request("POST", "/v1/leases", {"target": "a.example"},
                                     headers={"traceparent": f"00-{trace_id}-{parent}-01"})
        assert status == 200

        def lease_spans():
            return [s for s in collector.collected.snapshot() if s["trace"] == trace_id]

        spans = wait_for(lease_spans, 20, "the lease span")
        assert len(spans) == 1
        (span,) = spans
        assert span["name"] == "POST /v1/leases" and span["parent"] == parent and span["service"] == "fleet-api"
        assert span["attributes"]["http.response.status_code"] == 200


# --- conformance to the OpenAPI document ----------------------------------------------------------------

def test_the_api_conforms_to_its_openapi_document(redis_server, apis):
    """schemathesis against the real server: every documented operation, generated valid and invalid
    input, each response checked against the document (status, content type, schema)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from openapi_spec_validator import validate
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation import GenerationMode

    r = redis_server.client()
    for i in range(3):
        running(r, f"crawl/p{i}", uid=f"u{i}", port=3000 + i)
    api = apis(FLEET_MAX_LEASES_PER_PROXY="2", FLEET_LEASE_MAX_TTL="10m")
    status, document, _ = api.get("/openapi.json", token=None)
    assert status == 200
    validate(document)
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=api.url)
    failures: list[str] = []
    calls = Counter()
    t0 = time.monotonic()
    def run(operation, mode) -> None:
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case) -> None:
            calls[operation.label] += 1
            try:
                response = case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10,
                                                  excluded_checks=[not_a_server_error])
                # 503 is a documented answer (no proxy matches the filters); nothing else 5xx is.
                assert response.status_code < 500 or (response.status_code == 503 and "error" in response.json()), \
                    response.text[:300]
            except AssertionError as exc:  # collect, to report every operation's failures at once
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:800]}")

        try:
            check()
        except Unsatisfiable:  # no invalid input exists (e.g. /healthz takes none)
            assert mode is GenerationMode.NEGATIVE, operation.label

    for op in schema.get_all_operations():
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run(op.ok(), mode)
    assert failures == [], "\n".join(failures[:10])
    assert time.monotonic() - t0 < 60
    assert calls["GET /healthz"] >= 1 and len(calls) == 6, calls
    assert min(n for label, n in calls.items() if label != "GET /healthz") >= 30, calls


# --- end to end through a real Squid ----------------------------------------------------------------------

def test_a_fetch_through_a_leased_local_proxy(lab, redis_server, origin, echo, apis):  # noqa: F811
    """A real controller, local-provider worker (Squid) and prober: the endpoint names its instance (the
    Proxy's providerID), the lease doc keeps it, and the listing shows the egress address the prober learnt."""
    from fleet.cli import commands
    from tests.integration.test_local_proxies import declare, fetch, status

    lab.env.update(FLEET_PROBE_TARGET=f"http://{echo}/ip", FLEET_PROBE_INTERVAL="500ms")
    lab.start("prober", commands.prober_argv())
    lo, _ = lab.ports
    declare(lab, "e2e", lo)
    st = wait_for(lambda: (s := status(lab, "e2e")).get("phase") == "Running" and s, 60, "crawl/e2e Running")
    r = redis_server.client()
    wait_for(lambda: r.hget(keys.PROBE_VERDICTS, "crawl/e2e"), 20, "the prober's first verdict")
    assert json.loads(r.hget(keys.PX_ENDPOINTS, "crawl/e2e"))["instance"] == st["providerID"] != ""
    api = apis()
    out = subprocess.run([sys.executable, "-m", "fleet.cli", "lease", "--target", "127.0.0.1", "--ttl", "1m",
                          "--api-url", api.url], env={**lab.env, "FLEET_API_TOKEN": TOKEN}, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    url = out.stdout.strip()
    assert url == f"http://127.0.0.1:{lo}"
    assert api.lease(target="127.0.0.1")[0] == 409  # one lease per proxy by default
    proxies = api.get("/v1/proxies")[1]["proxies"]
    assert [(p["proxy"], p["leases"], p["egressIP"]) for p in proxies] == [("crawl/e2e", 1, "127.0.0.1")]
    (doc,) = (json.loads(v) for v in r.hvals(keys.LEASE_DOCS))
    assert (doc["instance"], doc["port"]) == (st["providerID"], lo)
    from tests.providers.local.conftest import ORIGIN_BODY

    assert fetch("127.0.0.1", lo, origin) == ORIGIN_BODY
    status_, rep, _ = api.report(proxy="crawl/e2e", target="127.0.0.1", outcome="ok")
    assert status_ == 200 and rep["cooldown"] is None
    out = subprocess.run([sys.executable, "-m", "fleet.cli", "lease", "--target", "127.0.0.1", "--api-url", api.url],
                         env={**lab.env, "FLEET_API_TOKEN": TOKEN}, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "frees up" in out.stderr


from tests.integration.test_local_proxies import lab  # noqa: E402, F401  # the local-provider stack fixture
from tests.integration.test_prober import echo  # noqa: E402, F401  # an origin echoing the caller's address
from tests.providers.local.conftest import origin, port_window, state_dir  # noqa: E402, F401
