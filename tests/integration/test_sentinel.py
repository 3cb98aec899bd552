"""Issue 21, item 2: every process on a Sentinel URL keeps working through a
failover, without a restart. A real master, replica and three sentinels; a
real controller and provider worker (Celery on kombu's sentinel transport),
the store (redis-py's Sentinel) and `fleet get px`. The master is SIGKILLed
under a Running Proxy; a Proxy declared afterwards must go Running on the
promoted master within the failover time + 10 s, and each process logs the
master change once."""

from __future__ import annotations

import json
import time

import pytest

from fleet.store import Store
from fleet.testing.procs import wait_for
from fleet.testing.sentinel import FAILOVER_TIMEOUT_MS
from tests.integration.sentinel import sentinels  # noqa: F401  (the fixture)
from tests.integration.test_proxies import declare, fake

pytestmark = pytest.mark.integration


def phases(stack) -> dict[str, str]:
    out = stack.fleet("get", "px", "-o", "json")
    if out.returncode != 0:
        return {}
    return {i["metadata"]["name"]: (i.get("status") or {}).get("phase", "") for i in json.loads(out.stdout)["items"]}


def test_a_failover_is_followed_by_every_process_without_a_restart(sentinels, make_stack, tmp_path):  # noqa: F811
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    stack = make_stack(sentinels.url, fake(tmp_path), FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROVIDER_CALL_TIMEOUT="5s", FLEET_PROVIDER_CHECK_INTERVAL="0")
    declare(manifests, "before")
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: phases(stack).get("before") == "Running", 40, "crawl/before Running")
    for role in ("controller", "worker:edge"):  # the watch asks every 5 s: a loaded machine may miss the first ask
        wait_for(lambda role=role: "Redis master found through Sentinel" in stack.log(role), 15, f"{role} to log the master")

    old = sentinels.master()
    killed_at = time.monotonic()
    sentinels.kill_master()
    wait_for(lambda: sentinels.master() not in (None, old), FAILOVER_TIMEOUT_MS / 1000 + 10, "the sentinels to promote the replica")
    declare(manifests, "after")
    wait_for(lambda: phases(stack).get("after") == "Running", FAILOVER_TIMEOUT_MS / 1000 + 10 + 20,
             "crawl/after Running on the promoted master")
    took = time.monotonic() - killed_at
    print(f"SIGKILL of the master → a new Proxy Running: {took:.1f} s")
    assert phases(stack)["before"] == "Running"
    store = Store.from_url(sentinels.url)
    try:
        assert store.ping()
    finally:
        store.close()
    for role in ("controller", "worker:edge"):
        wait_for(lambda role=role: "Redis master changed" in stack.log(role), 15, f"{role} to log the master change")
        assert stack.log(role).count("Redis master changed") == 1
        # kombu may log one traceback while Celery's consumer closes the channel of the dead master
        # (celery.bootsteps 'Error on stopping', then it reconnects): any other one is a failure
        records = stack.log(role).split("\ntime=")
        others = [r for r in records if "Traceback" in r and "celery/bootsteps.py" not in r]
        assert others == [], stack.log(role)[-3000:]
