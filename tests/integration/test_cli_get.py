"""`fleet get` and `fleet describe` as a user runs them: the real command
(`python -m fleet.cli`) against a real redis-server holding what the
controller and the lease API write there (standalone Proxy objects,
endpoints, a lease granted and a cooldown reported by the lease scripts).
-o name and -o wide, describe px with a lease and cooldowns, --watch through
a change and a Redis restart, and a reader that closes the pipe early."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from fleet.durations import rfc3339
from fleet.proxies.model import Condition, Proxy, ProxySpec, ProxyStatus
from fleet.proxies.standalone import encode
from fleet.store import Store, keys
from fleet.store.leases import Granted, LeaseCall, ReportCall
from providers.base import Placement

pytestmark = pytest.mark.integration

CREATED = "2026-01-01T00:00:00Z"


def proxy(name: str, namespace: str = "crawl", phase: str = "Running", port: int = 31280, created: str = CREATED,
          **kw) -> Proxy:
    status = ProxyStatus(phase=phase, provider_id=f"local://{name}", ip="127.0.0.1", port=port, egress_ip="203.0.113.9",
                         conditions=(Condition("Ready", "True" if phase == "Running" else "False", phase, "", 1, CREATED),))
    return Proxy(namespace=namespace, name=name, uid=f"u-{name}", generation=1, created_at=created, status=status,
                 spec=ProxySpec(provider="squid", placement=Placement(region="fsn1", zone="fsn1-dc14")), **kw)


def put(client, *proxies: Proxy) -> None:
    client.hset(keys.PX_OBJECTS, mapping={p.key: encode(p) for p in proxies})
    for p in proxies:  # as the reconciler publishes a Running Proxy's endpoint
        client.hset(keys.PX_ENDPOINTS, p.key, f'{{"uid":"{p.uid}","ip":"127.0.0.1","port":{p.status.port}}}')


def env(redis_server) -> dict[str, str]:
    """The user's environment: no FLEET_ settings but the broker, stdout buffered as Python's default."""
    mine = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "PYTHONUNBUFFERED"}
    return {**mine, "FLEET_BROKER_URL": redis_server.url}


def fleet(redis_server, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleet.cli", *argv], env=env(redis_server), capture_output=True,
                          text=True, timeout=60, check=False)


def test_get_px_name_and_wide(redis_server):
    put(redis_server.client(), proxy("a", pool="web"), proxy("b", namespace="web", port=31281))
    got = fleet(redis_server, "get", "px", "-o", "name")
    assert (got.returncode, got.stderr) == (0, "")
    assert got.stdout.splitlines() == ["proxy.crawl.example.com/crawl/a", "proxy.crawl.example.com/web/b"]
    assert fleet(redis_server, "get", "px", "-n", "web", "-o", "name").stdout == "proxy.crawl.example.com/b\n"
    wide = fleet(redis_server, "get", "px", "-A", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    head, a, b = (line.split() for line in wide.stdout.splitlines())
    assert head[-6:] == ["REGION", "ZONE", "POOL", "EGRESS", "IP", "INSTANCE"]
    assert a[:2] == ["crawl", "a"] and a[-5:] == ["fsn1", "fsn1-dc14", "web", "203.0.113.9", "local://a"]
    assert b[:2] == ["web", "b"] and b[-3] == "<none>"
    refused = fleet(redis_server, "get", "px", "-A", "-n", "web")
    assert refused.returncode == 2 and "cannot be given together" in refused.stderr and refused.stdout == ""


def test_describe_px_shows_its_lease_and_cooldowns(redis_server):
    client = redis_server.client()
    put(client, proxy("a"), proxy("b"))
    store = Store(client)
    now = time.time()
    granted = store.leases.lease(LeaseCall(lease_id="1" * 32, target="example.com", expires=now + 600, max_per_proxy=1,
                                           ttl=600), now, 0.0)
    assert isinstance(granted, Granted)
    cooled = granted.proxy  # the one holding the lease also gets the cooldowns
    store.leases.report(ReportCall(outcome="blocked", proxy=cooled, target="shop.example"), now, 900.0, 3, 300.0)
    store.leases.report(ReportCall(outcome="error", proxy=cooled, target="news.example"), now, 900.0, 1, 300.0)
    got = fleet(redis_server, "describe", "px", cooled.split("/")[1], "-n", "crawl")
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "Traceback" not in got.stderr
    assert f"Name:                {cooled.split('/')[1]}" in out and "Provider:            squid" in out
    assert "Leases:              1 open" in out
    lease_row = next(line for line in out.splitlines() if line.strip().startswith("1" * 32))
    assert "example.com" in lease_row and ("9m" in lease_row or "10m" in lease_row)  # expires in about 10 minutes
    assert "Cooldowns:           2 in force" in out
    assert any(line.strip().startswith("shop.example") and "(in 14m" in line for line in out.splitlines()), out
    assert any(line.strip().startswith("* (global)") and "(in 4m" in line for line in out.splitlines()), out
    other = "crawl/b" if cooled == "crawl/a" else "crawl/a"
    calm = fleet(redis_server, "describe", f"proxy.crawl.example.com/{other}").stdout
    assert "Leases:              <none>" in calm and "Cooldowns:           <none>" in calm


def _lines(stream, into: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        into.put(line.rstrip("\n"))


def _next(lines: queue.Queue, within: float = 15.0) -> str:
    return lines.get(timeout=within)


def test_watch_prints_a_change_and_keeps_trying_while_redis_is_away(redis_server):
    client = redis_server.client()
    young = rfc3339(time.time())  # its AGE moves every second: no change of its own
    put(client, proxy("a", phase="Provisioning", created=young))
    proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "get", "px", "-n", "crawl", "--watch"],
                            env=env(redis_server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    readers = [threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=_lines, args=(proc.stderr, err), daemon=True)]
    for t in readers:
        t.start()
    try:
        assert _next(out).split()[:3] == ["NAME", "PROVIDER", "PHASE"]
        assert _next(out).split()[:3] == ["a", "squid", "Provisioning"]
        time.sleep(2.5)
        assert out.empty()  # nothing changed (but the age): nothing printed
        put(client, proxy("a", phase="Running", created=young))
        assert _next(out).split()[:3] == ["a", "squid", "Running"]
        redis_server.stop()
        said = _next(err)
        assert said.startswith("fleet get: cannot read Proxies from Redis at redis://127.0.0.1:") and \
            "trying again every 2s" in said
        time.sleep(5)
        assert err.empty() and proc.poll() is None  # said once, still watching
        redis_server.start()  # empty: the Proxy is gone, its last row once more
        assert _next(err) == "fleet get: reading again"
        assert _next(out).split()[:3] == ["a", "squid", "Running"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
        for t in readers:
            t.join(10)
        rest = []
        while not err.empty():
            rest.append(err.get())
        assert not any("Traceback" in line for line in rest), rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for t in readers:
            t.join(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_a_reader_that_closes_the_pipe_after_one_line_gets_no_traceback(redis_server):
    # 400 Proxies are ~150 KB of YAML: more than the pipe and Python's buffer hold, so the writer is still writing
    # when the reader goes away.
    put(redis_server.client(), *(proxy(f"px-{i:03d}", port=30000 + i) for i in range(400)))
    proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "get", "px", "-o", "yaml"], env=env(redis_server),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"apiVersion: v1\n"
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(30) == 141, err  # 128 + SIGPIPE, as the shell reports git and kubectl there
    assert "Traceback" not in err and "BrokenPipeError" not in err and err == "", err
