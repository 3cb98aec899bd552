"""Issue 21, item 3 as applied, on real `fleet api` processes and redis-server:

- the issue's own case: a Redis without persistence restarted under held
  leases. The API sees the epoch gone, grants nothing for the grace period
  (503 with Retry-After), the holders' renewals re-create their leases, and
  no proxy a crawler still held is leased to another one — then, after the
  grace, it leases again;
- WAIT: with a replica connected a grant is answered once the replica has it;
  with the replica stopped (SIGSTOP) it is answered after --lease-replica-wait
  anyway and counted in proxy_operator_lease_unreplicated_total."""

from __future__ import annotations

import re
import signal
import time

import pytest
import redis

from fleet.store import keys
from fleet.testing.api import ApiProc
from fleet.testing.procs import wait_for
from tests.integration.sentinel import sentinels  # noqa: F401  (the fixture)
from tests.integration.test_leases import apis, running  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration


def sample(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_a_redis_restarted_empty_grants_nothing_twice(redis_server, apis):  # noqa: F811
    r = redis_server.client()
    for i in range(3):
        running(r, f"crawl/p{i}", uid=f"u{i}", port=3128 + i, instance=f"lab/i-{i}")
    api = apis("api", FLEET_LEASE_MAX_TTL="8s", FLEET_LEASE_GRACE="4s")  # renewed leases (8 s) outlive the grace (4 s)
    held = [api.lease(ttl=8)[1] for _ in range(3)]
    assert all("lease" in h for h in held) and api.lease()[0] == 409
    redis_server.stop()  # a Redis run with --save '' --appendonly no, restarted: everything is gone
    redis_server.start()
    r = redis_server.client()
    for i in range(3):  # what the controller writes again on its resync
        running(r, f"crawl/p{i}", uid=f"u{i}", port=3128 + i, instance=f"lab/i-{i}")
    wait_for(lambda: "recovering" in api.get("/healthz")[1], 10, "the API to see the epoch gone")
    status, doc, headers = api.lease()
    assert status == 503 and doc["recovering"] is True and 1 <= int(headers["retry-after"]) <= 8, doc
    assert "Redis lost lease data" in api.log()
    # two holders renew in time: re-created on their proxies; the third does not (its crawler stopped)
    for h in held[:2]:
        status, doc, _ = api.request("POST", f"/v1/leases/{h['lease']}/renew",
                                     {"proxy": h["proxy"], "target": "example.com", "ip": h["ip"], "port": h["port"]})
        assert status == 200 and doc["recreated"] is True and doc["proxy"] == h["proxy"], doc
    # someone else claiming a re-created lease's proxy: refused
    status, doc, _ = api.request("POST", f"/v1/leases/{'f' * 32}/renew", {"proxy": held[0]["proxy"], "target": "example.com"})
    assert status == 409, doc
    got = wait_for(lambda: (lambda a: a[1] if a[0] == 200 else None)(api.lease(ttl=8)), 15, "a grant after the grace")
    assert got["proxy"] == held[2]["proxy"]  # the one nobody renewed; the two held ones are never handed out
    assert api.lease()[0] == 409
    text = api.metrics()
    assert sample(text, "proxy_operator_lease_recovering") == 0
    assert 'proxy_operator_lease_renewals_total{result="recreated"} 2.0' in text


def test_a_grant_waits_for_the_replica_and_is_counted_when_it_is_slow(sentinels, tmp_path):  # noqa: F811
    master = redis.Redis(port=sentinels.ports["a"])
    replica = redis.Redis(port=sentinels.ports["b"])
    api = ApiProc(tmp_path, sentinels.url, "api", FLEET_LEASE_REPLICA_WAIT="300ms")
    try:
        wait_for(lambda: master.info("replication").get("slave0", {}).get("state") == "online", 20, "the replica online")
        running(master, "crawl/a")
        running(master, "crawl/b", uid="u2", port=3129, instance="lab/i-2")
        api.start()
        wait_for(lambda: "replicas=1" in api.log(), 10, "the API to count the replica")
        status, doc, _ = api.lease()
        assert status == 200
        assert replica.hexists(keys.LEASE_DOCS, doc["lease"])  # on the replica when answered
        sentinels.procs["b"].send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            status, doc2, _ = api.lease()
            took = time.monotonic() - started
        finally:
            sentinels.procs["b"].send_signal(signal.SIGCONT)
        assert status == 200 and 0.3 <= took < 2.0, (status, took)
        assert sample(api.metrics(), "proxy_operator_lease_unreplicated_total") == 1
        wait_for(lambda: replica.hexists(keys.LEASE_DOCS, doc2["lease"]), 10, "the replica to catch up")
    finally:
        api.stop()
        master.close()
        replica.close()
    assert "Traceback" not in api.log()
