"""One probe against real local listeners (a tiny CONNECT-answering proxy on
127.0.0.1 that can be told to refuse, hang, forbid or misbehave)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from fleet.prober.probe import probe
from fleet.prober.target import Target
from tests.fleet.prober.fakeproxy import FakeProxy

CONNECT = Target("origin.example", 443)
GET = Target("origin.example", 80, "/ip")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode: str, target: Target, limit: float = 2.0, body: bytes = b"hello\n"):
    async def main():
        async with FakeProxy(mode, body) as proxy:
            outcome = await probe("127.0.0.1", proxy.port, target, limit)
            return outcome, proxy.requests

    return asyncio.run(main())


def test_a_connect_answered_200_is_good():
    outcome, requests = run("ok", CONNECT)
    assert outcome.ok and outcome.message.startswith("CONNECT 200 in ") and outcome.egress_ip is None
    assert requests == [b"CONNECT origin.example:443 HTTP/1.1\r\nHost: origin.example:443\r\nUser-Agent: fleet-prober\r\n\r\n"]
    assert 0 < outcome.duration < 2


def test_a_get_in_the_tunnel_reads_the_egress_address():
    outcome, requests = run("ok", GET, body=b'{"origin": "203.0.113.5"}')
    assert outcome.ok and outcome.message.startswith("GET 200 in ") and outcome.egress_ip == "203.0.113.5"
    assert requests[1].startswith(b"GET /ip HTTP/1.1\r\nHost: origin.example\r\n")
    outcome, _ = run("echo", GET)
    assert outcome.egress_ip == "127.0.0.1"
    outcome, _ = run("ok", GET, body=b"not an address")
    assert outcome.ok and outcome.egress_ip is None
    outcome, _ = run("ok", GET, body=b"9" * 5000)  # longer than 4 KiB: good, but not read for an address
    assert outcome.ok and outcome.egress_ip is None


@pytest.mark.parametrize(("mode", "target", "says"), [
    ("forbidden", CONNECT, "CONNECT origin.example:443: the proxy answered 'HTTP/1.1 403 Forbidden'"),
    ("garbage", CONNECT, "CONNECT origin.example:443: the proxy answered 'SSH-2.0-OpenSSH'"),
    ("close", CONNECT, "CONNECT origin.example:443: the connection was closed without an answer"),
    ("huge", CONNECT, "CONNECT origin.example:443: the answer's head is over 16 KiB"),
    ("get_fail", GET, "GET http://origin.example:80/ip: the target answered 'HTTP/1.1 502 Bad Gateway'"),
])
def test_bad_answers_fail_and_say_why(mode, target, says):
    outcome, _ = run(mode, target)
    assert not outcome.ok and outcome.message == says


def test_a_refused_connection_fails_at_once():
    started = time.monotonic()
    outcome = asyncio.run(probe("127.0.0.1", closed_port(), CONNECT, 2.0))
    assert not outcome.ok and "connection refused" in outcome.message and outcome.message.startswith("connect to 127.0.0.1:")
    assert time.monotonic() - started < 1


def test_a_hanging_proxy_fails_at_the_time_limit():
    started = time.monotonic()
    outcome, _ = run("hang", CONNECT, limit=0.3)
    took = time.monotonic() - started
    assert not outcome.ok and outcome.message == "CONNECT origin.example:443: no answer within 300ms"
    assert 0.3 <= took < 1.5 and 0.29 <= outcome.duration < 1.0


def test_many_probes_at_once():
    async def main():
        async with FakeProxy("ok") as proxy:
            outcomes = await asyncio.gather(*(probe("127.0.0.1", proxy.port, CONNECT, 5.0) for _ in range(200)))
            return outcomes, proxy.connections

    outcomes, connections = asyncio.run(main())
    assert all(o.ok for o in outcomes) and connections == 200
