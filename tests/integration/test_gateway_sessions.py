"""Sessions with a life through a real `fleet gateway`: real Squids of the local provider with distinct egress
addresses, a real redis-server, a plain HTTP origin that answers each request with the address it came from (and a
429 on /ban). A session is retired — moved to another exit, counted anew — after its uses, at its age and on a ban;
`fleet get sessions` lists it (from Redis: every replica's) and the gateway's metrics count the retirements by
reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fleet.testing.http import LoopbackServer, Quiet
from tests.integration.test_gateway import TOKEN, exits_lab, plain
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration


class _Exit(Quiet):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith("/ban"):
            self.reply(429, b"banned\n")
        else:
            self.reply(200, self.client_address[0].encode())


@pytest.fixture
def lab(tmp_path, redis_server, make_provider, port_window):  # noqa: F811
    lab = exits_lab(tmp_path, redis_server, make_provider, port_window, "crawl/a", "crawl/b", "crawl/c")
    doc = json.loads(lab.clients.read_text())
    doc["clients"]["acme"]["sessions"] = {"maxUses": 3, "maxAge": 3}
    lab.clients.write_text(json.dumps(doc))
    yield lab
    for gw in lab.gateways:
        gw.stop()
    for gw in lab.gateways:
        assert "Traceback" not in gw.log(), gw.log()[-3000:]


@pytest.fixture
def origin():
    with LoopbackServer(_Exit, "origin-exit") as server:
        yield server.url


def _exit(gw, url: str, user: str) -> str:
    status, _, body = plain(gw, url, user=user)
    assert status == 200, (status, body)
    return body.decode()


def _retired(gw) -> dict[str, float]:
    return {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in gw.metrics().splitlines()
            if line.startswith("proxy_operator_gateway_sessions_retired_total{")}


def test_a_session_is_retired_after_its_uses_at_its_age_and_on_a_ban(lab, origin):
    gw = lab.gateway(FLEET_GATEWAY_MAX_ATTEMPTS="1")  # a ban reaches the crawler (no retry elsewhere)
    user = "acme-session-s1"
    exits = [_exit(gw, f"{origin}/{n}", user) for n in range(7)]
    # three uses on one exit, then a new life on another, and again
    assert len(set(exits[:3])) == 1 and len(set(exits[3:6])) == 1 and exits[3] != exits[2] and exits[6] != exits[5]
    assert _retired(gw)["uses"] == 2

    # at its age (3 s) the session moves, however few its uses
    young = _exit(gw, f"{origin}/young", "acme-session-s2")
    time.sleep(3.2)
    assert _exit(gw, f"{origin}/old", "acme-session-s2") != young
    assert _retired(gw)["age"] == 1

    # a ban of its proxy retires it at once
    before = _exit(gw, f"{origin}/x", "acme-session-s3")
    status, headers, _ = plain(gw, f"{origin}/ban", user="acme-session-s3")
    assert status == 429 and headers["x-fleet-proxy"]
    assert _exit(gw, f"{origin}/y", "acme-session-s3") != before
    assert _retired(gw)["ban"] == 1

    # a -sesstime- longer than the client's age keeps the session past it
    kept = _exit(gw, f"{origin}/k1", "acme-session-s4-sesstime-1")
    time.sleep(3.2)
    assert _exit(gw, f"{origin}/k2", "acme-session-s4-sesstime-1") == kept

    # `fleet get sessions`: every session of every replica, from Redis
    run = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "sessions", "-o", "json"], env=gw.env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = {r["session"]: r for r in json.loads(run.stdout)}
    assert set(rows) >= {"s1", "s2", "s3", "s4"} and {r["client"] for r in rows.values()} == {"acme"}
    assert rows["s1"]["uses"] == 1 and rows["s1"]["proxy"].startswith("crawl/")
    assert rows["s4"]["uses"] == 2 and rows["s4"]["age"] >= 3
    table = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "sessions"], env=gw.env, capture_output=True,
                           text=True, timeout=60)
    assert table.stdout.splitlines()[0].split()[:4] == ["CLIENT", "SESSION", "PROXY", "USES"]
    # the gauge (counted every 10 s, from Redis)
    time.sleep(10.5)
    assert "proxy_operator_gateway_sessions_active 4.0" in gw.metrics()
    assert TOKEN not in gw.log()
