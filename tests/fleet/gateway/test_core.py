"""The gateway's core (fleet.gateway.core) at its seams: credentials to a client and options, the lease store's
answers to outcome values, and a fake `Dialer` at the Protocol boundary showing that a failed dial is reported,
released and tried on another proxy, within max_attempts; then the same seam under the HTTP/1.1 front-end (an
in-process gateway whose dialer is the fake: the crawler gets a tunnel through the second proxy)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from fleet.gateway import decide
from fleet.gateway.config import GatewayConfig
from fleet.gateway.core import (
    Admitted,
    Attempt,
    Core,
    Forbidden,
    NoProxy,
    TunnelLimit,
    Unauthorized,
    UpstreamFailed,
    UpstreamTimeout,
)
from fleet.gateway.decide import Options, Target
from fleet.gateway.dialers import Channel, DialError, Upstream
from fleet.store import StoreError
from fleet.store.leases import Busy, Grace, Granted
from fleet.store.leases import NoProxy as NoneLeasable
from tests.fleet.gateway.harness import TOKEN, FakeClients, FakeLeases, Running, auth, status_of

TARGET = Target("origin.test", 443, "")


class _Writer:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeDialer:
    """A `Dialer`: the proxies in `fail` fail with their reason; every other dial opens `opened()`'s channel."""

    fail: dict[str, str] = field(default_factory=dict)
    dials: list[tuple[str, str, str]] = field(default_factory=list)  # (tunnel|forward, proxy, host)
    opened: object = None

    async def _dial(self, kind: str, upstream: Upstream, target: Target) -> Channel | DialError:
        self.dials.append((kind, upstream.proxy, target.host))
        if upstream.proxy in self.fail:
            return DialError(self.fail[upstream.proxy])
        if callable(self.opened):
            return await self.opened(upstream, target)
        return Channel(None, _Writer())  # type: ignore[arg-type]

    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        return await self._dial("tunnel", upstream, target)

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        return await self._dial("forward", upstream, target)


def core_of(leases, dialer: FakeDialer | None = None, **config) -> Core:
    return Core(leases, FakeClients(), GatewayConfig(**config), dialer or FakeDialer(), clock=lambda: 1000.0,
                rand=lambda: 0.5)


THREE = {"crawl/a": ("10.0.0.1", 3128), "crawl/b": ("10.0.0.2", 3128), "crawl/c": ("10.0.0.3", 3128)}
ACME = FakeClients().clients["acme"]


def test_a_failed_dial_is_reported_released_and_another_proxy_is_dialed():
    leases = FakeLeases(dict(THREE))
    dialer = FakeDialer(fail={"crawl/a": decide.REFUSED})
    core = core_of(leases, dialer)

    got = asyncio.run(core.open_tunnel(ACME, Options("acme"), TARGET))

    assert isinstance(got, Attempt) and got.upstream == Upstream("crawl/b", "10.0.0.2", 3128) and got.number == 2
    assert dialer.dials == [("tunnel", "crawl/a", "origin.test"), ("tunnel", "crawl/b", "origin.test")]
    assert [c.skip for c in leases.leased] == [(), ("crawl/a",)]  # the failed one is never leased again
    assert leases.released == [leases.leased[0].lease_id]  # its lease released, the tunnel's held
    assert ("crawl/a", "origin.test", "error") in leases.reports
    assert core.series.retries[decide.REFUSED] == 1


@pytest.mark.parametrize(("fail", "max_attempts", "want", "dials"), [
    ({p: decide.TIMEOUT for p in THREE}, 3, UpstreamTimeout(3), 3),
    ({"crawl/a": decide.TIMEOUT, "crawl/b": decide.CONNECT_ERROR, "crawl/c": decide.REFUSED}, 3,
     UpstreamFailed((decide.TIMEOUT, decide.CONNECT_ERROR, decide.REFUSED)), 3),
    ({p: decide.REFUSED for p in THREE}, 2, UpstreamFailed((decide.REFUSED, decide.REFUSED)), 2),  # the bound
])
def test_when_every_dial_fails_the_outcome_says_how(fail, max_attempts, want, dials):
    leases = FakeLeases(dict(THREE))
    dialer = FakeDialer(fail=fail)
    got = asyncio.run(core_of(leases, dialer, max_attempts=max_attempts).open_tunnel(ACME, Options("acme"), TARGET))
    assert got == want and len(dialer.dials) == dials
    assert len(leases.released) == dials
    assert got.label in ("upstream_timeout", "upstream_failed")


class _Answers:
    """A lease store that answers `answer` (or raises it) to every lease call."""

    def __init__(self, answer) -> None:
        self.answer = answer

    async def lease(self, call, now, rand):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer, None, None


@pytest.mark.parametrize(("fail", "keep_sticky"), [
    ({"crawl/a": decide.TIMEOUT}, [False, True]),
    ({"crawl/a": decide.REFUSED}, [False, False]),
    ({"crawl/a": decide.CONNECT_ERROR}, [False, False]),
    ({"crawl/a": decide.TIMEOUT, "crawl/b": decide.TIMEOUT}, [False, True, True]),
    ({"crawl/a": decide.TIMEOUT, "crawl/b": decide.REFUSED}, [False, True, False]),
    ({"crawl/a": decide.REFUSED, "crawl/b": decide.TIMEOUT}, [False, False, False]),  # every failure, not the last
], ids=["timeout", "refused", "connect-error", "timeout-timeout", "timeout-refused", "refused-timeout"])
def test_a_sessions_retry_keeps_it_bound_to_its_proxy_only_when_every_dial_before_timed_out(fail, keep_sticky):
    """The lease call's keep_sticky: the first attempt's never; a retry's only when every failed dial before it
    timed out (the origin behind the proxy may be the slow one), so a refusal or a CONNECT error moves the session."""
    leases = FakeLeases(dict(THREE))
    dialer = FakeDialer(fail=fail)
    options = decide.parse_username("acme-session-s1")

    async def go():
        attempts = core_of(leases, dialer).attempts(ACME, options, TARGET, tunnel=True)
        return await attempts.next()

    got = asyncio.run(go())
    assert isinstance(got, Attempt) and got.number == len(fail) + 1
    assert [d[1] for d in dialer.dials] == list(THREE)[:len(fail) + 1]
    assert [c.sticky for c in leases.leased] == ["gw/acme/s1"] * len(keep_sticky)
    assert [c.keep_sticky for c in leases.leased] == keep_sticky


@pytest.mark.parametrize(("answer", "want"), [
    (NoneLeasable(), NoProxy("none")),
    (Busy(free_at=1002.2), NoProxy("busy", 3)),
    (Grace(), NoProxy("grace")),
    (StoreError("down"), NoProxy("unavailable")),
])
def test_what_the_lease_store_said_becomes_the_outcome(answer, want):
    dialer = FakeDialer()
    got = asyncio.run(core_of(_Answers(answer), dialer).open_tunnel(ACME, Options("acme"), TARGET))
    assert got == want and dialer.dials == []
    assert got.label == {"none": "no_proxy", "busy": "busy", "grace": "no_proxy", "unavailable": "unavailable"}[got.why]


def test_a_granted_proxy_without_an_address_is_skipped_and_released():
    class _NoAddress(FakeLeases):
        async def lease(self, call, now, rand):
            self.leased.append(call)
            return Granted("crawl/x", b'{"ip": 1}'), None, None

    leases = _NoAddress()
    got = asyncio.run(core_of(leases).open_tunnel(ACME, Options("acme"), TARGET))
    assert got == NoProxy("none")


def test_admit_and_permit():
    core = core_of(FakeLeases())
    assert core.admit(None, "") == Unauthorized(True, core.admit(None, "").message)
    assert core.admit("acme", "wrong") == Unauthorized(False, "unknown client or wrong token")
    assert core.admit("nobody", TOKEN) == Unauthorized(False, "unknown client or wrong token")
    bad = core.admit("acme-bogus-x", TOKEN)
    assert isinstance(bad, Unauthorized) and not bad.missing and "unknown option" in bad.message
    got = core.admit("acme-session-s1-region-eu-1", TOKEN)
    assert got == Admitted(ACME, Options("acme", session="s1", region="eu-1"))
    narrow = type(ACME)("narrow", b"t" * 16, None, frozenset({443}), 2)
    assert core.permit(narrow, 80) == Forbidden(80) and core.permit(narrow, 443) is None
    assert core.permit(ACME, 22) is None  # ports: any


def test_a_client_at_its_tunnel_limit_gets_no_lease():
    leases = FakeLeases(dict(THREE))
    core = core_of(leases, max_tunnels=5)
    narrow = type(ACME)("narrow", b"t" * 16, None, None, 2)
    core.per_client["narrow"] = 2
    assert asyncio.run(core.open_tunnel(narrow, Options("narrow"), TARGET)) == TunnelLimit(True, 2)
    core.tunnels.update(object() for _ in range(5))  # type: ignore[misc]
    assert asyncio.run(core.open_tunnel(ACME, Options("acme"), TARGET)) == TunnelLimit(False, 5)
    assert leases.leased == []


@pytest.mark.parametrize(("failure", "resendable", "again"), [
    (decide.BROKEN, True, True), (decide.BROKEN, False, False), (decide.BANNED, True, True),
    (decide.BANNED, False, False),
])
def test_an_exchange_that_failed_after_the_dial_is_retried_only_when_it_can_be_sent_again(failure, resendable, again):
    leases = FakeLeases(dict(THREE))
    core = core_of(leases)

    async def go():
        attempts = core.attempts(ACME, Options("acme"), Target("origin.test", 80, "/"), tunnel=False)
        first = await attempts.next()
        retry = await attempts.failed(first, failure, resendable)
        return first, retry, attempts

    first, retry, attempts = asyncio.run(go())
    assert retry is again and first.channel.writer.closed and first.released
    assert leases.reports == [("crawl/a", "origin.test", decide.REPORT_OF[failure])]
    assert core.series.retries[failure] == (1 if again else 0)
    assert attempts.outcome() == UpstreamFailed((failure,))


def test_the_http_front_end_dials_through_the_seam_and_the_crawler_sees_no_failed_dial():
    """CONNECT through the in-process gateway whose dialer is the fake: crawl/a fails, the crawler's tunnel goes
    through crawl/b (the fake's channel: an echo server), answered by the front-end's 200 naming crawl/b."""
    async def go():
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def opened(upstream, target):
            return Channel(*await asyncio.open_connection("127.0.0.1", port))

        dialer = FakeDialer(fail={"crawl/a": decide.CONNECT_ERROR}, opened=opened)
        leases = FakeLeases(dict(THREE))
        gw = await Running.start(leases, dialer=dialer)
        try:
            got, _ = await gw.exchange(f"CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n"
                                       f"Proxy-Authorization: {auth()}\r\n\r\nping through the tunnel".encode())
        finally:
            await gw.close()
            server.close()
        return got, dialer, leases

    got, dialer, leases = asyncio.run(go())
    assert status_of(got) == 200 and b"X-Fleet-Proxy: crawl/b\r\n" in got
    assert got.endswith(b"\r\n\r\nping through the tunnel")
    assert [d[1] for d in dialer.dials] == ["crawl/a", "crawl/b"]
    assert ("crawl/a", "origin.test", "error") in leases.reports and len(leases.released) == 2
