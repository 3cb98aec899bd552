"""Issue 21, item 5: the whole fleet on real processes through a Redis
failover, and through a restart of a persistent Redis.

The failover: a master, a replica and three sentinels (tests/integration/
sentinel.py); the controller, two provider workers serving 50 fake
providers between them (a worker consumes several provider queues: one
process per provider would not fit this 2-core machine), beat, the prober
(probing every proxy through a CONNECT-answering fake on loopback), two
`fleet api` processes, 50 standalone Proxies Running, and 20 client threads
leasing, renewing and releasing. The master is SIGKILLed; then, within the
Sentinel failover time + 10 s, both APIs grant again, a Proxy declared after
the kill goes Running, every provider's ProviderHealth is current again
within two check intervals, and when the load stops: no proxy was held by
two clients at any moment (each client's own timeline: from the grant's
answer to the moment it sent the release, or the lease's expiry), and every
Proxy has exactly one instance.

The restart: one redis-server with AOF (`--appendfsync everysec`), leases,
cooldowns and standalone Proxy statuses written, the server SIGTERMed and
started again on the same directory: everything is still there, and the API
answers the old lease ids."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from pathlib import Path

import pytest

from fleet.cli import commands
from fleet.health.stored import StoredResults
from fleet.store import Store, keys
from fleet.testing.api import ApiProc
from fleet.testing.procs import wait_for
from fleet.testing.redis import RedisServer
from fleet.testing.sentinel import FAILOVER_TIMEOUT_MS
from tests.fleet.prober.fakeproxy import FakeProxy
from tests.integration.sentinel import sentinels  # noqa: F401  (the fixture)
from tests.integration.test_proxies import declare as edge_declare
from tests.integration.test_proxies import fake

pytestmark = pytest.mark.integration

PROVIDERS = 50
CLIENTS = 20
CHECK_INTERVAL = 10.0  # the shortest fleet allows
MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: {provider}
  port: {port}
  cloudInit: {{inline: "#cloud-config chaos"}}
"""


class ConnectProxy:
    """FakeProxy (200 to every CONNECT) on its own event loop thread: every fake instance is 127.0.0.1:<port>."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxy = FakeProxy("ok")
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.__aenter__(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @property
    def port(self) -> int:
        return self.proxy.port


def providers(tmp: Path) -> list[dict]:
    return [{"name": f"p{i:02d}", "type": "fake", "fake": {"stateFile": str(tmp / f"p{i:02d}.json")}}
            for i in range(PROVIDERS)]


def declare(directory: Path, name: str, provider: str, port: int) -> None:
    (directory / f"{name}.yaml").write_text(MANIFEST.format(name=name, provider=provider, port=port))


def phases(store: Store) -> dict[str, str]:
    """Proxy key → its phase (stored as `phase|since`)."""
    return {k: keys.text(v).partition("|")[0] for k, v in store.proxies.phases().items()}


def instances(tmp: Path) -> dict[str, list[str]]:
    """uid → the instance ids holding it, over every fake provider's table."""
    out: dict[str, list[str]] = {}
    for i in range(PROVIDERS):
        path = tmp / f"p{i:02d}.json"
        if path.exists():
            for pid, doc in json.loads(path.read_text()).items():
                out.setdefault(doc["uid"], []).append(pid)
    return out


class Clients:
    """CLIENTS threads leasing (ttl 6 s), renewing once, releasing, against both APIs; each held interval is
    recorded from the client's side."""

    def __init__(self, apis: list[ApiProc]) -> None:
        self.apis = apis
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.held: list[tuple[str, float, float, str]] = []  # proxy, from, to, lease id
        self.granted_at: dict[int, list[float]] = {i: [] for i in range(len(apis))}
        self.answers: dict[int, int] = {}
        self.renewals: dict[int, int] = {}
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def start(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _count(self, table: dict[int, int], status: int) -> None:
        with self.lock:
            table[status] = table.get(status, 0) + 1

    def _run(self, n: int) -> None:
        rnd = random.Random(n)
        which = n % len(self.apis)
        api = self.apis[which]
        while not self.stop.is_set():
            try:
                status, lease, _ = api.lease(target="example.com", ttl=6)
            except OSError:
                status, lease = 0, {}
            self._count(self.answers, status)
            if status != 200:
                time.sleep(0.2)
                continue
            start = time.time()
            expires = start + 6
            with self.lock:
                self.granted_at[which].append(start)
            time.sleep(rnd.uniform(0.2, 1.0))
            body = {"proxy": lease["proxy"], "target": "example.com", "ip": lease["ip"], "port": lease["port"], "ttl": 6}
            try:
                status = api.request("POST", f"/v1/leases/{lease['lease']}/renew", body)[0]
            except OSError:
                status = 0
            self._count(self.renewals, status)
            sent = time.time()
            if status == 200:
                expires = sent + 6  # at least: the renewal was answered after it was sent
                time.sleep(rnd.uniform(0.2, 1.0))
            end = min(time.time(), expires)
            with self.lock:
                self.held.append((lease["proxy"], start, end, lease["lease"]))
            with contextlib.suppress(OSError):
                api.release(lease["lease"])


def overlaps(held: list[tuple[str, float, float, str]]) -> list[tuple]:
    """Pairs of intervals on one proxy that overlap (capacity 1)."""
    by: dict[str, list[tuple[float, float, str]]] = {}
    for proxy, start, end, lease in held:
        by.setdefault(proxy, []).append((start, end, lease))
    bad = []
    for proxy, spans in by.items():
        spans.sort()
        longest = spans[0]  # the span reaching furthest so far
        for span in spans[1:]:
            if span[0] < longest[1]:
                bad.append((proxy, longest, span))
            if span[1] > longest[1]:
                longest = span
    return bad


# Celery's consumer logs this one with a traceback when the broker goes away under its gossip step (kombu's
# ignore_errors on a connection already None) and then reconnects; it is no crash of ours.
CELERY_GOSSIP = 'msg="Error on restarting Gossip'


def crashes(log: str) -> list[str]:
    """Log lines holding a traceback, but Celery's gossip restart (above)."""
    return [line for line in log.splitlines() if "Traceback" in line and CELERY_GOSSIP not in line]


def test_a_master_killed_under_load_loses_nothing(sentinels, make_stack, tmp_path):  # noqa: F811
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    with ConnectProxy() as origin:
        stack = make_stack(sentinels.url, providers(tmp_path), FLEET_PROXIES=str(manifests),
                           FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROXY_RESYNC_INTERVAL="5s",
                           FLEET_PROVIDER_CALL_TIMEOUT="5s", FLEET_PROVIDER_CHECK_INTERVAL=f"{int(CHECK_INTERVAL)}s",
                           FLEET_PROVIDER_CHECK_TIMEOUT="3s", FLEET_GC_INTERVAL="0",
                           FLEET_PROBE_TARGET="origin.example:443", FLEET_PROBE_INTERVAL="1s",
                           FLEET_PROBER_METRICS_BIND_ADDRESS="0")
        for i in range(PROVIDERS):
            declare(manifests, f"px{i:02d}", f"p{i:02d}", origin.port)
        half = PROVIDERS // 2
        names = [f"p{i:02d}" for i in range(PROVIDERS)]
        for role, group in (("worker:a", names[:half]), ("worker:b", names[half:])):
            stack.start(role, commands.CELERY + ["worker", "-Q", ",".join(f"provider.{p}" for p in group),
                                                 "-n", f"{role.split(':')[1]}@%h", *commands.WORKER_POOL,
                                                 "--concurrency", "4", "--without-mingle"])
        stack.controller()
        stack.beat()
        stack.start("prober", commands.prober_argv())
        apis = [ApiProc(tmp_path, sentinels.url, f"api-{i}", FLEET_LEASE_MAX_TTL="10s").start() for i in range(2)]
        store = Store.from_url(sentinels.url)
        try:
            stack.wait_ready("worker:a", "worker:b", "controller", timeout=60)
            wait_for(lambda: sum(p == "Running" for p in phases(store).values()) >= PROVIDERS, 90,
                     f"{PROVIDERS} Proxies Running")
            wait_for(lambda: len(StoredResults(store).all()) >= PROVIDERS, 30, "a result for every provider")
            wait_for(lambda: apis[0].lease(ttl=1)[0] == 200, 20, "a first lease")

            clients = Clients(apis).start()
            time.sleep(5)
            old = sentinels.master()
            sentinels.kill_master()
            killed = time.time()
            wait_for(lambda: sentinels.master() not in (None, old), FAILOVER_TIMEOUT_MS / 1000 + 10, "the promotion")
            promoted = time.time()
            declare(manifests, "after", "p00", origin.port)
            budget = FAILOVER_TIMEOUT_MS / 1000 + 10
            for i in range(len(apis)):
                wait_for(lambda i=i: any(t > promoted for t in clients.granted_at[i]), budget, f"api-{i} to grant again")
            wait_for(lambda: phases(store).get("crawl/after") == "Running", budget + 10, "a Proxy declared after the kill")
            wait_for(lambda: all(r.checked_at > promoted for r in StoredResults(store).all().values()),
                     2 * CHECK_INTERVAL + 5, "every ProviderHealth current again")
            took = time.time() - killed
            time.sleep(3)
            clients.join()
        finally:
            for api in apis:
                api.stop()
            store.close()
        print(f"kill → promoted {promoted - killed:.1f} s → everything working {took:.1f} s; "
              f"lease answers {clients.answers}, renewals {clients.renewals}")
        assert not overlaps(clients.held), overlaps(clients.held)[:5]
        assert clients.answers.get(200, 0) > 100 and clients.renewals.get(200, 0) > 50
        final_store = Store.from_url(sentinels.url)
        try:
            final = phases(final_store)
        finally:
            final_store.close()
        assert sum(p == "Running" for p in final.values()) == PROVIDERS + 1, final
        held = instances(tmp_path)
        assert len(held) == PROVIDERS + 1 and all(len(ids) == 1 for ids in held.values()), held
        for role in ("controller", "worker:a", "worker:b", "beat", "prober"):
            assert not crashes(stack.log(role)), (role, crashes(stack.log(role))[:2])
        for api in apis:
            assert "Traceback" not in api.log(), api.log()[-3000:]


def test_a_persistent_redis_restarted_keeps_leases_cooldowns_and_proxies(make_stack, tmp_path):
    srv = RedisServer(tmp_path, persistent=True)
    srv.start()
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    stack = make_stack(srv.url, fake(tmp_path), FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROVIDER_CALL_TIMEOUT="5s", FLEET_PROVIDER_CHECK_INTERVAL="0")
    for name, port in (("a", 3128), ("b", 3129), ("c", 3130)):
        edge_declare(manifests, name, port)
    stack.worker("edge")
    stack.controller()
    api = ApiProc(tmp_path, srv.url, "api")
    store = Store.from_url(srv.url)
    try:
        stack.wait_ready("worker:edge", "controller")
        wait_for(lambda: sum(p == "Running" for p in phases(store).values()) == 3, 40, "three Proxies Running")
        api.start()
        leases = [api.lease(ttl=600)[1] for _ in range(2)]
        assert all("lease" in doc for doc in leases), leases
        free = ({"crawl/a", "crawl/b", "crawl/c"} - {doc["proxy"] for doc in leases}).pop()
        status, doc, _ = api.report(proxy=free, target="shop.example", outcome="blocked")
        assert status == 200 and doc["cooldown"]["scope"] == "target"
        before = store.leases.dump()
        objects = {k: (json.loads(v).get("status") or {}).get("phase") for k, v in store.proxies.objects().items()}
        time.sleep(1.5)  # everysec: the last second reaches the disk
        srv.restart()
        store.close()
        store = Store.from_url(srv.url)
        after = store.leases.dump()
        assert after == before and any(k.startswith(keys.LEASE_COOL_TARGET) for k in after)  # leases, cooldowns, epoch
        again = {k: (json.loads(v).get("status") or {}).get("phase") for k, v in store.proxies.objects().items()}
        assert again == objects and set(again.values()) == {"Running"}
        wait_for(lambda: api.get("/healthz")[0] == 200, 20, "the API to reconnect")
        for doc in leases:  # the old ids are known: renewed, not re-created, and no grace began
            status, ren, _ = api.request("POST", f"/v1/leases/{doc['lease']}/renew", b"")
            assert status == 200 and ren["recreated"] is False, ren
        assert "recovering" not in api.get("/healthz")[1]
        status, doc, _ = api.lease(target="shop.example")
        assert status == 409, doc  # two held, the third still cooling for shop.example
        assert api.lease(target="other.example")[1].get("proxy") == free
    finally:
        api.stop()
        store.close()
        stack.stop()
        srv.stop()
    assert "Traceback" not in api.log(), api.log()[-3000:]
