"""Issue 19, item 1: the lease API against hostile clients, on a real
`fleet api` process and a real redis-server. Every attack runs while a
normal client leases and releases over one keep-alive connection from its
own address (127.0.0.1); the attackers come from other loopback addresses
(127.0.0.2 …), as other hosts would. Each test asserts the normal client's
p99 under 50 ms, the API's RSS under 200 MiB, the attacker's answer (a JSON
408/431/503/400, or a close) and a log that does not flood."""

from __future__ import annotations

import contextlib
import http.client
import json
import resource
import socket
import threading
import time

import pytest

from fleet.testing.api import TOKEN
from tests.integration.test_leases import apis, running  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration

P99_MS = 50.0
RSS_MIB = 200.0


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                print(f"fleet api RSS {int(line.split()[1]) / 1024:.0f} MiB")
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class NormalClient:
    """Leases and releases in a loop over one keep-alive connection; its latencies in ms."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> NormalClient:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _call(self, conn: http.client.HTTPConnection, path: str, body: bytes) -> dict:
        conn.request("POST", path, body, {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        if resp.status != 200:
            self.failures.append(f"{path}: {resp.status} {doc}")
        return doc

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10, source_address=("127.0.0.1", 0))
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                got = self._call(conn, "/v1/leases", b'{"target": "example.com", "ttl": 60}')
                if "lease" in got:
                    self._call(conn, f"/v1/leases/{got['lease']}/release", b"")
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            self.latencies.append((time.perf_counter() - start) * 1000)
            time.sleep(0.01)
        conn.close()

    def p99(self) -> float:
        xs = sorted(self.latencies)
        assert len(xs) >= 20, f"only {len(xs)} lease+release rounds"
        p99 = xs[int(0.99 * (len(xs) - 1))]
        print(f"normal client: {len(xs)} lease+release rounds, p50 {xs[len(xs) // 2]:.1f} ms, p99 {p99:.1f} ms")
        return p99


def connect(n: int, first_host: int = 2, per_host: int = 250) -> list[socket.socket]:
    """`n` idle TCP connections from 127.0.0.<first_host>, … (`per_host` each) that never send a byte."""
    out = []
    for i in range(n):
        s = socket.socket()
        s.bind((f"127.0.0.{first_host + i // per_host}", 0))
        out.append(s)
    return out


def read_answer(s: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes (b"" if it closes silently)."""
    s.settimeout(timeout)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            data += chunk
    return data


def status_of(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), answer[:200]
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)


@pytest.fixture
def api(apis, redis_server):  # noqa: F811
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20_000), hard))  # this test process holds 10,000 sockets
    running(redis_server.client(), "crawl/a")
    proc = apis(FLEET_API_HEADER_TIMEOUT="2s", FLEET_API_BODY_TIMEOUT="2s", FLEET_API_IDLE_TIMEOUT="60s")
    yield proc
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def warnings_in(proc) -> int:
    return sum(1 for line in proc.log().splitlines() if "WARNING" in line or "level=warning" in line)


def test_ten_thousand_idle_connections_leave_a_normal_client_served(api):
    socks = connect(10_000)
    try:
        for s in socks:
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", api.port))
        time.sleep(1.0)
        with NormalClient(api.port) as client:
            time.sleep(6)
            status, health, _ = api.get("/healthz")
        assert status == 200 and health["ok"]
        assert not client.failures, client.failures[:5]
        assert client.p99() < P99_MS, f"p99 {client.p99():.1f} ms with 10,000 idle connections held"
        assert rss_mib(api.proc.pid) < RSS_MIB
        assert "proxy_operator_http_connections " in api.metrics()
    finally:
        for s in socks:
            s.close()


def test_slowloris_headers_and_endless_bodies_get_408_within_the_deadline(api):
    slow = connect(50)
    chunked = connect(20, first_host=3)
    with NormalClient(api.port) as client:
        for s in slow + chunked:
            s.connect(("127.0.0.1", api.port))
        start = time.monotonic()
        for s in chunked:
            s.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                      + b"\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        answered: dict[socket.socket, bytes] = {}
        header = b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
        for i in range(len(header)):  # a byte a second would take 100 s: the deadline is 2 s
            for s in slow:
                if s not in answered:
                    try:
                        s.sendall(header[i:i + 1])
                    except OSError:
                        answered[s] = b""
            for s in chunked:
                with contextlib.suppress(OSError):
                    s.sendall(b"1\r\na\r\n")
            time.sleep(0.25)
            if time.monotonic() - start > 4:
                break
        took = time.monotonic() - start
    for s in slow:
        assert status_of(read_answer(s, 5))[0] == 408
        s.close()
    for s in chunked:
        code, body = status_of(read_answer(s, 5))
        assert code == 408 and "body" in body["error"]
        s.close()
    assert took < 6
    assert not client.failures and client.p99() < P99_MS
    assert warnings_in(api) <= 3  # one summary line per 10 s, not one per connection


def test_huge_and_unfinished_headers_are_cut_at_64_kib_without_growing(api):
    before = rss_mib(api.proc.pid)
    with NormalClient(api.port) as client:
        big = socket.create_connection(("127.0.0.1", api.port), source_address=("127.0.0.2", 0))
        big.settimeout(10)
        sent = 0
        with contextlib.suppress(OSError):  # the server stops reading and closes at 64 KiB
            big.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            chunk = b"a" * (1 << 20)
            while sent < 64 << 20:
                big.sendall(chunk)
                sent += len(chunk)
        code, body = status_of(read_answer(big, 5))
        big.close()
        assert code == 431 and "65536" in body["error"]
        assert sent < 8 << 20, f"{sent} bytes of header were accepted"
        unfinished = connect(8, first_host=4)
        for s in unfinished:
            s.connect(("127.0.0.1", api.port))
            with contextlib.suppress(OSError):
                s.sendall(b"GET / HTTP/1.1\r\nX-Big: " + b"b" * (4 << 20))
        for s in unfinished:
            assert status_of(read_answer(s, 5))[0] == 431
            s.close()
        time.sleep(1)
    assert not client.failures and client.p99() < P99_MS
    assert rss_mib(api.proc.pid) - before < 30 and rss_mib(api.proc.pid) < RSS_MIB


def test_one_address_is_capped_and_garbage_gets_json(apis, redis_server):  # noqa: F811
    running(redis_server.client(), "crawl/a")
    api = apis(FLEET_API_MAX_CONNECTIONS_PER_CLIENT="100")
    held = connect(100, per_host=100)
    for s in held:
        s.connect(("127.0.0.1", api.port))
    time.sleep(0.5)
    extra = socket.create_connection(("127.0.0.1", api.port), source_address=("127.0.0.2", 0))
    code, body = status_of(read_answer(extra, 5))
    assert code == 503 and "this address" in body["error"]
    with NormalClient(api.port) as client:  # another address is served
        time.sleep(2)
    assert not client.failures and client.p99() < P99_MS
    junk = socket.create_connection(("127.0.0.1", api.port), source_address=("127.0.0.9", 0))
    junk.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
    code, body = status_of(read_answer(junk, 5))
    assert code == 400 and body["field"] is None
    for s in (*held, extra, junk):
        s.close()
    text = api.metrics()
    assert 'proxy_operator_http_connections_closed_total{reason="per_client_limit"} 1.0' in text
    assert 'proxy_operator_http_connections_closed_total{reason="bad_request"} 1.0' in text


def test_at_the_total_limit_the_longest_idle_connection_makes_room(apis, redis_server):  # noqa: F811
    running(redis_server.client(), "crawl/a")
    api = apis(FLEET_API_MAX_CONNECTIONS="64", FLEET_API_MAX_CONNECTIONS_PER_CLIENT="64")
    held = connect(64, per_host=16)
    for s in held:
        s.connect(("127.0.0.1", api.port))
    time.sleep(0.5)
    with NormalClient(api.port) as client:
        time.sleep(2)
    assert not client.failures and client.p99() < P99_MS
    assert read_answer(held[0], 5) == b""  # the oldest idle one was closed, silently
    for s in held:
        s.close()
    assert 'proxy_operator_http_connections_closed_total{reason="evicted_idle"}' in api.metrics()
