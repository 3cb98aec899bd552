"""The prober end to end (issue 13), on real processes.

- A real Squid (local provider) behind a Running Proxy, driven by a real
  controller and provider worker from a standalone manifest, probed by a real
  `fleet prober` through CONNECT + GET to a local origin that echoes the
  caller's address: healthy (egress 127.0.0.1, no mismatch); the Squid
  process SIGKILLed → unhealthy after the failure threshold, written as
  Healthy=False by the controller, which then finds the instance stopped and
  replaces it (Squid restarted on its port) → healthy again. Asserted on the
  verdicts in Redis and the Proxy's conditions (`fleet get px -o json`).
- Two `fleet prober` replicas split the proxies; one SIGKILLed, the other's
  share grows to all within two probe intervals and its verdicts keep coming.
"""

from __future__ import annotations

import json
import os
import re
import socketserver
import threading
import time
import urllib.request

import pytest

from fleet.cli import commands
from fleet.store import keys
from fleet.testing.http import LoopbackServer, Quiet
from fleet.testing.procs import free_port, wait_for
from tests.integration.test_local_proxies import declare, lab, records, status  # noqa: F401
from tests.providers.local.conftest import port_window, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

INTERVAL = 0.5  # seconds
FAILURES = 3


class _Echo(Quiet):
    def do_GET(self) -> None:
        self.reply(200, json.dumps({"origin": self.client_address[0]}).encode(), {"Content-Type": "application/json"})


@pytest.fixture
def echo():
    """An origin on 127.0.0.1 answering {"origin": <the caller's address>}; yields host:port."""
    with LoopbackServer(_Echo, "echo") as server:
        yield server.url.removeprefix("http://")


def verdict(redis_server, key: str) -> dict | None:
    raw = redis_server.client().hget(keys.PROBE_VERDICTS, key)
    return json.loads(raw) if raw else None


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def sample(text: str, name: str, labels: str = "") -> float | None:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def healthy_condition(stack, name: str) -> dict:
    return next((c for c in status(stack, name).get("conditions", []) if c["type"] == "Healthy"), {})


def test_a_killed_squid_turns_unhealthy_within_the_threshold_and_back_when_restarted(lab, redis_server, echo):  # noqa: F811
    metrics = free_port()
    lab.env.update(FLEET_PROBE_TARGET=f"http://{echo}/ip", FLEET_PROBE_INTERVAL=f"{int(INTERVAL * 1000)}ms",
                   FLEET_PROBE_FAILURE_THRESHOLD=str(FAILURES), FLEET_PROBER_METRICS_BIND_ADDRESS=f"127.0.0.1:{metrics}")
    lab.start("prober", commands.prober_argv())
    lo, _ = lab.ports
    declare(lab, "a", lo)
    st = wait_for(lambda: status(lab, "a") if status(lab, "a").get("phase") == "Running" else None, 60, "crawl/a Running")
    first = wait_for(lambda: verdict(redis_server, "crawl/a"), 20, "the first verdict")
    assert first["healthy"] is True and first["egressIP"] == "127.0.0.1" and first["egressMismatch"] is False
    uid = first["uid"]
    wait_for(lambda: healthy_condition(lab, "a").get("status") == "True", 20, "Healthy=True on the Proxy")
    assert status(lab, "a").get("egressIP") == "127.0.0.1" and st["ip"] == "127.0.0.1"

    text = scrape(metrics)
    assert sample(text, "proxy_operator_healthcheck_duration_seconds_count", '{proxy="crawl/a"}') >= 1
    assert sample(text, "proxy_operator_healthcheck_failures_total", '{proxy="crawl/a"}') == 0
    assert sample(text, "proxy_operator_prober_proxies") == 1

    (rec,) = records(lab).values()
    os.kill(rec.pid, 9)  # Squid dies behind a Running Proxy
    killed = time.monotonic()
    down = wait_for(lambda: (v := verdict(redis_server, "crawl/a")) and v["healthy"] is False and v, 20, "unhealthy")
    took = time.monotonic() - killed
    # FAILURES refused connections, one per interval, the first within an interval of the kill
    assert took <= (FAILURES + 1) * INTERVAL + 1.5, took
    assert down["uid"] == uid and down["message"].startswith(f"{FAILURES} probes failed in a row; last: connect to 127.0.0.1:")
    assert "connection refused" in down["message"]
    # The verdict makes the Proxy due: the controller writes Healthy=False (Ready follows), then finds the
    # instance stopped and replaces it under the same name and uid: Squid restarted on its port.
    cond = wait_for(lambda: (c := healthy_condition(lab, "a")).get("status") == "False" and c, 20, "Healthy=False",
                    interval=0.01)
    assert cond["reason"] == "ProbeFailed" and "connection refused" in cond["message"]
    up = wait_for(lambda: (v := verdict(redis_server, "crawl/a")) and v["healthy"] is True and v, 60, "healthy again")
    assert up["uid"] == uid and up["message"].startswith("1 good probe in a row: GET 200")
    (again,) = records(lab).values()
    assert again.pid != rec.pid and again.port == rec.port
    wait_for(lambda: healthy_condition(lab, "a").get("status") == "True", 20, "Healthy=True again")
    st = status(lab, "a")
    assert st["phase"] == "Running" and next(c for c in st["conditions"] if c["type"] == "Ready")["status"] == "True"
    assert "Traceback" not in lab.log("prober")
    started = next(line for line in lab.log("prober").splitlines() if "prober started" in line)
    assert "uvloop" in started, started  # the api extra is installed: the prober runs on uvloop (issue 24)


class _Connect(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def connect_server():
    server = _Server(("127.0.0.1", 0), _Connect)
    t = threading.Thread(target=server.serve_forever, name="connect", daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    t.join(5)


def test_a_killed_prober_hands_its_proxies_to_the_other_replica(redis_server, make_stack, connect_server):
    interval = 1.0
    stack = make_stack(redis_server.url, [], FLEET_PROBE_TARGET="origin.example:443", FLEET_PROBE_INTERVAL="1s")
    r = redis_server.client()
    closed = free_port()  # nobody listens here: every probe of these fails
    endpoints = {f"crawl/p{i:02d}": json.dumps({"uid": f"uid-{i}", "ip": "127.0.0.1", "port": connect_server}) for i in range(40)}
    r.hset(keys.PX_ENDPOINTS, mapping=endpoints)
    ports = {}
    for name in ("prober-a", "prober-b"):
        ports[name] = free_port()
        stack.env["FLEET_PROBER_METRICS_BIND_ADDRESS"] = f"127.0.0.1:{ports[name]}"
        stack.start(name, commands.prober_argv())

    def shares() -> dict[str, float]:
        return {n: sample(scrape(p), "proxy_operator_prober_proxies") for n, p in ports.items()}

    wait_for(lambda: (s := shares()) and all(s.values()) and sum(s.values()) == 40, 20, "the proxies split between two probers")
    assert r.zcard(keys.PROBER_MEMBERS) == 2
    wait_for(lambda: r.hlen(keys.PROBE_VERDICTS) == 40, 20, "a verdict for every proxy")
    assert all(json.loads(v)["healthy"] for v in r.hvals(keys.PROBE_VERDICTS))
    # each proxy was probed by one replica only: the two per-proxy series sets are disjoint
    series = {n: set(re.findall(r'proxy_operator_healthcheck_duration_seconds_count\{proxy="([^"]+)"\}', scrape(p)))
              for n, p in ports.items()}
    assert not series["prober-a"] & series["prober-b"] and len(series["prober-a"] | series["prober-b"]) == 40
    b_share = sorted(series["prober-b"])

    stack.kill("prober-b")  # SIGKILL: no clean leave
    killed = time.monotonic()
    wait_for(lambda: sample(scrape(ports["prober-a"]), "proxy_operator_prober_proxies") == 40, 10, "prober-a takes everything",
             interval=0.02)
    took = time.monotonic() - killed
    assert took <= 2 * interval + 0.3, took
    # verdicts keep coming for the dead replica's proxies: one of them breaks now
    broken = b_share[0]
    r.hset(keys.PX_ENDPOINTS, broken, json.dumps({"uid": f"uid-{int(broken[-2:])}", "ip": "127.0.0.1", "port": closed}))
    down = wait_for(lambda: (v := verdict(redis_server, broken)) and v["healthy"] is False and v, 15, f"{broken} unhealthy")
    assert "connection refused" in down["message"]
    stack.stop()  # SIGTERM: prober-a leaves the membership set
    wait_for(lambda: r.zrangebyscore(keys.PROBER_MEMBERS, f"({time.time()}", "+inf") == [], 5, "no live member left")
    assert "Traceback" not in stack.log("prober-a")
