"""Upstreams the gateway did not create, as real servers on loopback: a Squid that asks for Basic credentials
(basic_ncsa_auth over an `openssl passwd -apr1` file) and microsocks with a username and password (RFC 1929).
Each dialer is driven directly (`Dialers.default`) and through the in-process gateway (its lease store the
harness's, its credentials a secrets directory): the right credentials carry a tunnel and a plain request, wrong
ones are `upstream_auth` (reported, retried on another proxy, counted), a closed port is refused, a listener that
answers garbage or nothing is connect_error or timeout within the connect timeout; the password is never in a log
line, a repr or an error text. The prober, last, probes through both with the same handshakes."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.gateway import decide
from fleet.gateway.config import GatewayConfig
from fleet.gateway.decide import Target
from fleet.gateway.dialers import Auth, Channel, Credentials, DialError, Dialers, Upstream
from fleet.testing import upstreams
from fleet.testing.http import LoopbackServer, Quiet
from fleet.testing.procs import free_port, wait_for
from tests.fleet.gateway.harness import FakeLeases, Running, auth, status_of

NC = shutil.which("nc")
USER = "buyer"
SENTINEL = "s3ntinel-Pa55-do-not-log"  # the right password: must never be seen
WRONG = "wr0ng-Pa55-do-not-log"
RIGHT, BAD = Auth(USER, SENTINEL), Auth(USER, WRONG)
SECRETS = [SENTINEL, WRONG, base64.b64encode(f"{USER}:{SENTINEL}".encode()).decode(),
           base64.b64encode(f"{USER}:{WRONG}".encode()).decode()]
TIMEOUT = 1.0

pytestmark = [
    pytest.mark.skipif(upstreams.squid_binary() is None,
                       reason="squid with basic_ncsa_auth is needed (apt-get install squid)"),
    pytest.mark.skipif(upstreams.microsocks_binary() is None,
                       reason="microsocks is not installed (apt-get install microsocks)"),
]


class Hello(Quiet):
    def do_GET(self) -> None:
        self.reply(200, b"hello from the origin")


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    with LoopbackServer(Hello, "origin") as server:
        yield int(server.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def squid_auth() -> Iterator[int]:
    """A Squid that forwards only for USER with SENTINEL (an Apache MD5 password file)."""
    with tempfile.TemporaryDirectory(prefix="fleet-squid-auth-") as d:
        os.chmod(d, 0o755)
        port = free_port()
        with upstreams.auth_squid(os.path.join(d, "squid"), port, USER, SENTINEL):
            yield port


@pytest.fixture(scope="module")
def socks() -> Iterator[int]:
    """microsocks asking USER / SENTINEL of every client (RFC 1929)."""
    port = free_port()
    with upstreams.microsocks(port, USER, SENTINEL):
        yield port


@pytest.fixture
def secrets(tmp_path: Path) -> Path:
    """The secrets directory: `right` (USER, SENTINEL) and `wrong` (USER, WRONG), as mounted Secrets."""
    for ref, password in (("right", SENTINEL), ("wrong", WRONG)):
        (tmp_path / ref).mkdir()
        (tmp_path / ref / "username").write_text(USER + "\n")
        (tmp_path / ref / "password").write_text(password + "\n")
    return tmp_path


def _dial(kind: str, upstream: Upstream, target: Target) -> Channel | DialError:
    async def go() -> Channel | DialError:
        dialers = Dialers.default(TIMEOUT, 64 * 1024)
        return await (dialers.tunnel if kind == "tunnel" else dialers.forward)(upstream, target)
    return asyncio.run(go())


def _get(upstream: Upstream, target: Target, tunnel: bool = True) -> bytes:
    """A GET for target through a dialed channel, its whole answer."""
    async def go() -> bytes:
        dialers = Dialers.default(TIMEOUT, 64 * 1024)
        ch = await (dialers.tunnel if tunnel else dialers.forward)(upstream, target)
        assert isinstance(ch, Channel), ch
        head = decide.Head("GET", target.path, "HTTP/1.1", (("Host", target.authority),))
        ch.writer.write(decide.upstream_head(head, target, absolute=ch.absolute_form, extra=ch.head_fields))
        try:
            return await asyncio.wait_for(ch.reader.read(-1), 5)
        finally:
            ch.close()
    return asyncio.run(go())


def _no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# -- the dialers, directly ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tunnel", [True, False], ids=["tunnel", "forward"])
def test_an_authenticated_squid_carries_a_tunnel_and_a_plain_request(squid_auth, origin, tunnel):
    got = _get(Upstream("buy/a", "127.0.0.1", squid_auth, "http", RIGHT), Target("127.0.0.1", origin, "/"), tunnel)
    assert got.startswith(b"HTTP/1.") and got.endswith(b"hello from the origin")


@pytest.mark.parametrize("tunnel", [True, False], ids=["tunnel", "forward"])
def test_a_socks5_proxy_carries_a_tunnel_and_a_plain_request_by_name_and_by_address(socks, origin, tunnel):
    for host in ("127.0.0.1", "localhost"):  # an IP literal, and a name the proxy resolves
        got = _get(Upstream("buy/s", "127.0.0.1", socks, "socks5", RIGHT), Target(host, origin, "/"), tunnel)
        assert got.startswith(b"HTTP/1.0 200") and got.endswith(b"hello from the origin")


@pytest.mark.parametrize("scheme", ["http", "socks5"])
@pytest.mark.parametrize("credentials", [BAD, None], ids=["wrong", "none"])
def test_wrong_or_missing_credentials_are_upstream_auth(squid_auth, socks, origin, scheme, credentials):
    port = squid_auth if scheme == "http" else socks
    upstream = Upstream("buy/a", "127.0.0.1", port, scheme, credentials)
    got = _dial("tunnel", upstream, Target("127.0.0.1", origin, "/"))
    assert isinstance(got, DialError) and got.why == decide.UPSTREAM_AUTH
    _no_secret(repr(upstream), str(upstream), repr(got), got.detail)


@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_an_upstream_that_is_down_is_refused(scheme):
    got = _dial("tunnel", Upstream("buy/a", "127.0.0.1", free_port(), scheme, RIGHT), Target("127.0.0.1", 80, "/"))
    assert got == DialError(decide.REFUSED)


def test_a_socks5_proxy_that_cannot_reach_the_target_says_so(socks):
    got = _dial("tunnel", Upstream("buy/s", "127.0.0.1", socks, "socks5", RIGHT), Target("127.0.0.1", free_port(), "/"))
    assert isinstance(got, DialError) and got.why == decide.CONNECT_ERROR
    assert "the SOCKS5 proxy answered" in got.detail


@pytest.mark.skipif(NC is None, reason="netcat-openbsd is not installed")
def test_a_socks5_upstream_that_answers_garbage_is_a_connect_error():
    """netcat listening with an SSH banner to say: not SOCKS5."""
    assert NC is not None
    port = free_port()
    proc = subprocess.Popen([NC, "-l", "127.0.0.1", str(port)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"SSH-2.0-OpenSSH_9.2\r\n")
        proc.stdin.flush()
        wait_for(lambda: _listening_once(proc, port), 10, "nc to listen")
        got = _dial("tunnel", Upstream("buy/s", "127.0.0.1", port, "socks5", RIGHT), Target("example.test", 443, "/"))
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdin is not None:
            proc.stdin.close()
    assert got == DialError(decide.CONNECT_ERROR, "the upstream is not a SOCKS5 proxy")


def _listening_once(proc: subprocess.Popen[bytes], port: int) -> bool:
    """nc serves one connection: its listening socket seen in /proc, not connected to."""
    assert proc.poll() is None
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == f"0100007F:{port:04X}" and line.split()[3] == "0A" for line in f.readlines()[1:])


@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_an_upstream_that_never_answers_times_out_within_the_connect_timeout(scheme):
    with socket.socket() as mute:  # accepted by the kernel's backlog, never read or answered
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        started = time.monotonic()
        got = _dial("tunnel", Upstream("buy/s", "127.0.0.1", mute.getsockname()[1], scheme, RIGHT),
                    Target("example.test", 443, "/"))
        took = time.monotonic() - started
    assert got == DialError(decide.TIMEOUT) and TIMEOUT * 0.9 < took < TIMEOUT + 1.0


def test_an_unknown_kind_is_no_dial():
    got = _dial("tunnel", Upstream("buy/a", "127.0.0.1", 1, "gopher"), Target("example.test", 443, "/"))
    assert isinstance(got, DialError) and got.why == decide.CONNECT_ERROR


# -- through the gateway ---------------------------------------------------------------------------------------

def _through_gateway(endpoints: dict[str, tuple], secrets: Path, raw: bytes) -> tuple[bytes, FakeLeases, dict]:
    async def go():
        leases = FakeLeases(endpoints)
        config = GatewayConfig(max_attempts=3, connect_timeout=TIMEOUT, header_timeout=2.0, body_timeout=2.0,
                               idle_timeout=5.0, response_timeout=5.0)
        gw = await Running.start(leases, config, credentials=Credentials(str(secrets)))
        try:
            # no half close: microsocks ends both ways at the first EOF
            got, _ = await gw.exchange(raw, half_close=raw.startswith(b"GET "))
        finally:
            await gw.close()
        return got, leases, dict(gw.gateway.series.retries)
    return asyncio.run(go())


def _plain(origin: int) -> bytes:
    return (f"GET http://127.0.0.1:{origin}/ HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\nProxy-Authorization: {auth()}"
            f"\r\nConnection: close\r\n\r\n").encode()


def _connect(origin: int) -> bytes:
    return (f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\nProxy-Authorization: {auth()}\r\n\r\n"
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\nConnection: close\r\n\r\n").encode()


@pytest.mark.parametrize("scheme", ["http", "socks5"])
@pytest.mark.parametrize("request_of", [_plain, _connect], ids=["plain", "connect"])
def test_wrong_credentials_on_one_proxy_are_reported_and_the_next_proxy_serves(squid_auth, socks, origin, secrets,
                                                                               caplog, scheme, request_of):
    port = squid_auth if scheme == "http" else socks
    endpoints = {"buy/a": ("127.0.0.1", port, {"scheme": scheme, "credentials": "wrong"}),
                 "buy/b": ("127.0.0.1", port, {"scheme": scheme, "credentials": "right"})}
    with caplog.at_level(logging.DEBUG):
        got, leases, retries = _through_gateway(endpoints, secrets, request_of(origin))
    assert status_of(got) == 200 and got.endswith(b"hello from the origin"), got[:300]
    assert b"X-Fleet-Proxy: buy/b" in got
    assert ("buy/a", "127.0.0.1", "error") in leases.reports and ("buy/b", "127.0.0.1", "ok") in leases.reports
    assert retries[decide.UPSTREAM_AUTH] == 1
    _no_secret(caplog.text, got.decode("latin-1"))


def test_every_proxy_refusing_the_credentials_is_a_502_that_names_the_reason(squid_auth, origin, secrets, caplog):
    endpoints = {"buy/a": ("127.0.0.1", squid_auth, {"credentials": "wrong"})}
    with caplog.at_level(logging.DEBUG):
        got, leases, retries = _through_gateway(endpoints, secrets, _plain(origin))
    assert status_of(got) == 502 and b"407" not in got.split(b"\r\n", 1)[0]
    assert leases.reports == [("buy/a", "127.0.0.1", "error")] and retries[decide.UPSTREAM_AUTH] == 1
    _no_secret(caplog.text, got.decode("latin-1"))


def test_a_proxy_whose_credentials_are_missing_is_skipped_not_dialed(squid_auth, origin, secrets):
    endpoints = {"buy/a": ("127.0.0.1", squid_auth, {"credentials": "absent"}),
                 "buy/b": ("127.0.0.1", squid_auth, {"credentials": "right"})}
    got, leases, _ = _through_gateway(endpoints, secrets, _plain(origin))
    assert status_of(got) == 200 and b"X-Fleet-Proxy: buy/b" in got
    assert [r[0] for r in leases.reports] == ["buy/b"]  # buy/a: released, nothing reported


# -- credentials ------------------------------------------------------------------------------------------------

def test_credentials_are_read_by_reference_and_reread_when_they_change(secrets):
    now = [0.0]
    creds = Credentials(str(secrets), clock=lambda: now[0])
    assert creds.get("right") == RIGHT and creds.get("wrong") == BAD
    (secrets / "right" / "password").write_text("rotated-password-x\n")
    assert creds.get("right") == RIGHT  # looked at most every RECHECK s
    now[0] = 10.0
    assert creds.get("right") == Auth(USER, "rotated-password-x")
    for ref in ("absent", "../right", "./right", "right/.", "wrong/../right", "", "Right", "a/b"):  # names, never paths
        assert creds.get(ref) is None
    assert Credentials(None).get("right") is None


def test_no_repr_or_str_shows_a_password():
    up = Upstream("buy/a", "127.0.0.1", 1, "socks5", RIGHT)
    _no_secret(repr(RIGHT), str(RIGHT), repr(up), str(up), f"{up}", f"{RIGHT!r}")
    assert USER in repr(RIGHT)


# -- the prober asks them the same way (fleet.upstream's handshakes) ----------------------------------------------

@pytest.mark.parametrize("scheme", ["http", "socks5"])
def test_the_prober_probes_through_them_with_the_same_handshakes(squid_auth, socks, origin, scheme):
    from fleet.prober.probe import probe
    from fleet.prober.target import Target as ProbeTarget

    port = squid_auth if scheme == "http" else socks
    target = ProbeTarget("127.0.0.1", origin, "/")
    good = asyncio.run(probe("127.0.0.1", port, target, 5.0, scheme=scheme, auth=RIGHT))
    assert good.ok and good.message.startswith("GET 200 in "), good.message
    bad = asyncio.run(probe("127.0.0.1", port, target, 5.0, scheme=scheme, auth=BAD))
    assert not bad.ok and ("407" in bad.message if scheme == "http" else "refused the credentials" in bad.message)
    _no_secret(bad.message, good.message)
