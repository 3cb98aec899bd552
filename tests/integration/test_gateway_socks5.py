"""The SOCKS5 front-end of a real `fleet gateway` (--gateway-socks-bind-address): real Squids of the local provider as
the fleet's proxies, a real redis-server, a local origin over HTTP and one over HTTPS, and real clients: curl
`--socks5-hostname`, requests with `socks5h://` (PySocks) and httpx with a SOCKS proxy (socksio). A session
username keeps its proxy across connections; a wrong token is RFC 1929's failure; BIND and UDP ASSOCIATE are 0x07;
the core's refusals have their reply codes; hostile clients (another version, 255 methods, a truncated greeting, a
byte a second, more idle connections than the gateway holds) each end in a reply or a close, and none holds up a
normal client."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import subprocess
import time

import pytest

from fleet.testing.procs import free_port
from fleet.testing.tls import https_server, self_signed
from tests.integration.test_gateway import (  # noqa: F401
    IDLE_FLOOD,
    OTHER_TOKEN,
    TOKEN,
    _Origin,
    _room_for_the_flood,
    flood_idle,
    lab,
    origin,
    origin_hostport,
    plain,
    wait_for,
)
from tests.integration.test_gateway import IDLE_LIMIT as FLOOD_LIMIT
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration


def socks_gateway(lab, **env: str):  # noqa: F811
    port = free_port()
    gw = lab.gateway(FLEET_GATEWAY_SOCKS_BIND_ADDRESS=f"127.0.0.1:{port}", **env)
    gw.socks_port = port
    wait_for(lambda: _listens(port), 10, "the SOCKS5 listener")
    return gw


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def closed(sock: socket.socket, within: float = 5, keep: bool = False) -> bool:
    """The gateway closed `sock` (EOF or reset) within `within` seconds, nothing more sent (and `sock` is closed here
    whatever the answer, unless `keep`)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        if not keep:
            sock.close()


def address(host: str) -> bytes:
    with contextlib.suppress(OSError):
        return b"\x01" + socket.inet_pton(socket.AF_INET, host)
    with contextlib.suppress(OSError):
        return b"\x04" + socket.inet_pton(socket.AF_INET6, host)
    return b"\x03" + bytes([len(host)]) + host.encode()


def socks_open(gw, host: str, port: int, user: str = "acme", token: str = TOKEN, command: int = 1,
               timeout: float = 20) -> tuple[socket.socket, int]:
    """A raw SOCKS5 client: greeting (username/password), RFC 1929, the request; (socket, reply code)."""
    sock = socket.create_connection(("127.0.0.1", gw.socks_port), timeout)
    sock.sendall(b"\x05\x01\x02")
    assert recv_exactly(sock, 2) == b"\x05\x02"
    u, p = user.encode(), token.encode()
    sock.sendall(b"\x01" + bytes([len(u)]) + u + bytes([len(p)]) + p)
    status = recv_exactly(sock, 2)
    if status != b"\x01\x00":
        return sock, -status[1]  # the authentication's failure, negative
    sock.sendall(bytes([5, command, 0]) + address(host) + struct.pack(">H", port))
    answer = recv_exactly(sock, 10)
    assert answer[0] == 5 and answer[3:] == b"\x01" + bytes(6)  # BND.ADDR 0.0.0.0:0
    return sock, answer[1]


def get(sock: socket.socket, host: str, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
    while len(body) < n:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0] + b" " + body


@pytest.fixture
def tls_origin(tmp_path):
    directory = tmp_path / "tls"
    directory.mkdir()
    cert = self_signed(directory, "127.0.0.1")
    with https_server(_Origin, directory, "origin-tls", "127.0.0.1", cert) as server:
        yield server, cert[0]


def test_curl_requests_and_httpx_get_pages_through_socks5(lab, origin, tls_origin):  # noqa: F811
    import httpx
    import requests

    lab.squid("crawl/a")
    gw = socks_gateway(lab, FLEET_MAX_LEASES_PER_PROXY="8")  # a kept-alive client's tunnels each hold a lease
    tls, cafile = tls_origin
    proxy = f"acme:{TOKEN}@127.0.0.1:{gw.socks_port}"
    named = f"http://localhost:{origin.port}"  # a domain name: the proxy resolves it (socks5h)

    got = subprocess.run(["curl", "-sS", "-m", "20", "--socks5-hostname", proxy, f"{named}/curl"],
                         capture_output=True, timeout=30)
    assert (got.returncode, got.stdout) == (0, b"hello from the origin /curl\n"), got.stderr
    got = subprocess.run(["curl", "-sS", "-m", "20", "--cacert", str(cafile), "--socks5-hostname", proxy,
                          f"{tls.url}/curl-tls"], capture_output=True, timeout=30)
    assert (got.returncode, got.stdout) == (0, b"hello from the origin /curl-tls\n"), got.stderr
    got = subprocess.run(["curl", "-sS", "-m", "20", "--socks5-hostname", f"acme:wrong-token@127.0.0.1:{gw.socks_port}",
                          f"{named}/nope"], capture_output=True, timeout=30)
    assert got.returncode == 97, got  # curl's CURLE_PROXY: the SOCKS5 authentication failed

    proxies = {"http": f"socks5h://{proxy}", "https": f"socks5h://{proxy}"}
    with requests.Session() as s:
        r = s.get(f"{named}/requests", proxies=proxies, timeout=20)
        assert (r.status_code, r.content) == (200, b"hello from the origin /requests\n")
        r = s.get(f"{tls.url}/requests-tls", proxies=proxies, timeout=20, verify=str(cafile))
        assert (r.status_code, r.content) == (200, b"hello from the origin /requests-tls\n")

    with httpx.Client(proxy=f"socks5://{proxy}", verify=ssl.create_default_context(cafile=str(cafile)),
                      timeout=20) as client:
        r = client.get(f"{named}/httpx")
        assert (r.status_code, r.content) == (200, b"hello from the origin /httpx\n")
        r = client.get(f"{tls.url}/httpx-tls")
        assert (r.status_code, r.content) == (200, b"hello from the origin /httpx-tls\n")

    wait_for(lambda: lab.loads() == {"crawl/a": 0}, 10, "every tunnel's lease released")
    m = gw.metrics()
    ok = next(ln for ln in m.splitlines() if ln.startswith(
        'proxy_operator_gateway_requests_total{client="acme",kind="connect",outcome="ok",protocol="socks5"}'))
    assert float(ok.split()[-1]) >= 6
    assert 'proxy_operator_gateway_requests_total{client="-",kind="connect",outcome="unauthorized",' \
           'protocol="socks5"} 1.0' in m
    assert 'proxy_operator_gateway_tunnels_open{protocol="socks5"} 0.0' in m
    assert TOKEN not in gw.log()
    status, _, body = plain(lab.gateways[0], f"{origin.url}/http")  # the HTTP front-end beside it, as before
    assert (status, body) == (200, b"hello from the origin /http\n")


def test_a_session_keeps_its_proxy_and_refusals_have_their_reply_codes(lab, origin):  # noqa: F811
    for key in ("crawl/a", "crawl/b", "crawl/c"):
        lab.squid(key)
    gw = socks_gateway(lab, FLEET_MAX_LEASES_PER_PROXY="4")
    host, port = origin_hostport(origin)
    held = []
    for i in range(4):  # the session sticks across connections: the same proxy holds each tunnel's lease
        sock, code = socks_open(gw, "localhost", port, user="acme-session-s1")
        assert code == 0
        assert get(sock, "localhost", f"/s{i}") == f"HTTP/1.1 200 OK hello from the origin /s{i}\n".encode()
        held.append({k for k, v in lab.loads().items() if v})
        sock.close()
        wait_for(lambda: set(lab.loads().values()) == {0}, 10, "the tunnel's lease released")
    assert len(held[0]) == 1 and all(h == held[0] for h in held), held

    sock, code = socks_open(gw, host, port, token="wrong-token-0123456789")
    assert code == -1 and closed(sock)  # RFC 1929's failure, then the close
    sock, code = socks_open(gw, host, port, user="acme-bogus-x")
    assert code == -1 and closed(sock)
    for command in (2, 3):  # BIND, UDP ASSOCIATE
        sock, code = socks_open(gw, host, port, command=command)
        assert code == 0x07 and closed(sock)
    sock = socket.create_connection(("127.0.0.1", gw.socks_port), 10)  # an unknown address type
    sock.sendall(b"\x05\x01\x02")
    assert recv_exactly(sock, 2) == b"\x05\x02"
    sock.sendall(b"\x01\x04acme" + bytes([len(TOKEN)]) + TOKEN.encode())
    assert recv_exactly(sock, 2) == b"\x01\x00"
    sock.sendall(b"\x05\x01\x00\x09" + bytes(6))
    assert recv_exactly(sock, 10)[1] == 0x08 and closed(sock)
    sock, code = socks_open(gw, host, port, user="narrow", token=OTHER_TOKEN)  # only port 443 for narrow
    assert code == 0x02 and closed(sock)
    sock, code = socks_open(gw, host, 443, user="narrow", token=OTHER_TOKEN)  # its namespace has no proxy
    assert code == 0x01 and closed(sock)
    dead = free_port()  # nothing listens there: every proxy's CONNECT fails
    sock, code = socks_open(gw, host, dead, user="acme-pool-none")
    assert code == 0x01 and closed(sock)  # no proxy in that pool
    sock, code = socks_open(gw, host, dead)
    assert code == 0x04 and closed(sock)  # every proxy tried failed: host unreachable
    assert lab.loads() == {"crawl/a": 0, "crawl/b": 0, "crawl/c": 0}
    m = gw.metrics()
    for outcome, n in (("forbidden", 1), ("bad_request", 3), ("upstream_failed", 1)):
        assert (f'proxy_operator_gateway_requests_total{{client="{"narrow" if outcome == "forbidden" else "acme"}",'
                f'kind="connect",outcome="{outcome}",protocol="socks5"}} {n:.1f}') in m, (outcome, m)


IDLE_LIMIT = 200


def test_hostile_socks_clients_end_in_a_reply_or_a_close_and_hold_up_nobody(lab, origin):  # noqa: F811
    lab.squid("crawl/a")
    gw = socks_gateway(lab, FLEET_GATEWAY_HEADER_TIMEOUT="2s", FLEET_GATEWAY_IDLE_TIMEOUT="120s",
                       FLEET_GATEWAY_MAX_CONNECTIONS=str(IDLE_LIMIT),
                       FLEET_GATEWAY_MAX_CONNECTIONS_PER_CLIENT=str(IDLE_LIMIT * 4))
    _, port = origin_hostport(origin)

    def served() -> None:
        t0 = time.monotonic()
        sock, code = socks_open(gw, "localhost", port, timeout=10)
        assert code == 0 and get(sock, "localhost", "/ok").endswith(b"/ok\n")
        sock.close()
        assert time.monotonic() - t0 < 3

    def opened(data: bytes) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", gw.socks_port), 10)
        sock.sendall(data)
        return sock

    version4 = opened(b"\x04\x01\x00\x50\x7f\x00\x00\x01acme\x00")  # SOCKS4: no reply, closed
    assert closed(version4)
    many = opened(b"\x05\xff" + bytes(range(255)).replace(b"\x02", b"\x00"))  # 255 methods, none acceptable
    assert recv_exactly(many, 2) == b"\x05\xff" and closed(many)
    cut = opened(b"\x05\x03\x00")  # a truncated greeting, then the client's end
    cut.shutdown(socket.SHUT_WR)
    assert closed(cut)
    t0 = time.monotonic()
    stalled = opened(b"\x05\x03\x00")  # a truncated greeting that stays: the handshake timeout ends it
    slow = opened(b"\x05")  # a byte a second
    served()  # meanwhile, a normal client
    for ch in b"\xff" + bytes(10):  # 255 methods announced, one a second
        if select.select([slow], [], [], 1.0)[0]:
            break
        slow.sendall(bytes([ch]))
    assert closed(slow, 5) and closed(stalled, 1)
    assert 1.5 < time.monotonic() - t0 < 6

    idle = []
    try:
        for _ in range(IDLE_LIMIT + 100):  # past the gateway's --gateway-max-connections, sending nothing
            idle.append(socket.create_connection(("127.0.0.1", gw.socks_port), 10))
        served()  # the normal client takes the longest-idle one's place
        assert sum(closed(c, 0.5) for c in idle[:100]) == 100  # the oldest were evicted for the newest
        assert not any(closed(c, 0.01, keep=True) for c in idle[-IDLE_LIMIT + 10:])
        m = gw.metrics()
        evicted = float(next(ln for ln in m.splitlines() if ln.startswith(
            'proxy_operator_http_connections_closed_total{reason="evicted_idle"}')).split()[-1])
        assert evicted >= 100
        assert float(next(ln for ln in m.splitlines() if ln.startswith("proxy_operator_http_connections "))
                     .split()[-1]) <= IDLE_LIMIT
        for reason in ("header_timeout", "bad_request"):
            line = next(ln for ln in m.splitlines() if ln.startswith(
                f'proxy_operator_http_connections_closed_total{{reason="{reason}"}}'))
            assert float(line.split()[-1]) >= 1, reason
    finally:
        for c in idle:
            c.close()


def test_ten_thousand_idle_socks_clients_are_evicted_oldest_first_and_memory_stays_bounded(lab, origin):  # noqa: F811
    _room_for_the_flood()
    lab.squid("crawl/a")
    gw = socks_gateway(lab, FLEET_GATEWAY_MAX_CONNECTIONS=str(FLOOD_LIMIT),
                       FLEET_GATEWAY_MAX_CONNECTIONS_PER_CLIENT=str(IDLE_FLOOD + 100), FLEET_GATEWAY_IDLE_TIMEOUT="120s")
    _, port = origin_hostport(origin)
    base = gw.rss_mib()

    def served() -> None:
        sock, code = socks_open(gw, "localhost", port, timeout=10)
        assert code == 0 and get(sock, "localhost", "/ok").endswith(b"/ok\n")
        sock.close()

    flood_idle(gw, gw.socks_port, served, base)

