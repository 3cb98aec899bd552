"""How the gateway reaches a target through a leased proxy: the upstream transport seam (as httpx's transports).

`fleet.gateway.core` asks a `Dialer` for a `Channel` to a target through one upstream and gets either the channel
or a `DialError` naming why it failed (refused, timeout, connect_error, upstream_auth: reported `error` for that
proxy and host, and the next proxy tried). What the crawler sees (the `200 Connection established` of an HTTP
front-end, a SOCKS5 reply) is the front-end's; what the upstream is asked (a CONNECT to a Squid) is the dialer's.

An upstream has a kind (`Upstream.scheme`) and maybe credentials (`Upstream.auth`); `Dialers` picks the dialer
of its kind:

- `http` (`HttpProxyDialer`): fleet's own Squids and bought HTTP proxies. A tunnel is a TCP connection to the
  proxy and a `CONNECT host:port` it answers 200; a plain HTTP request is sent to the proxy itself in absolute form
  (`Channel.absolute_form`), with the channel's `Proxy-Authorization` (`Channel.head_fields`) in its head.
- `socks5` (`Socks5Dialer`): RFC 1928 CONNECT (a host name sent as a name, resolved by the proxy), RFC 1929
  username/password when it has credentials; a plain HTTP request goes down such a tunnel in origin form.

A 407 (or a SOCKS5 proxy refusing the credentials) is `upstream_auth`: the member's fault, not the target's.
Credentials never live in Redis: a proxy's endpoint names a credentials *reference* (its provider) and
`Credentials` (fleet.credentials: files under --gateway-upstream-secrets-dir, read in this process) resolves it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from fleet import upstream as wire
from fleet.credentials import Credentials
from fleet.gateway import decide
from fleet.gateway.decide import Target
from fleet.upstream import Auth

__all__ = ["Auth", "Channel", "Credentials", "DialError", "Dialer", "Dialers", "HttpProxyDialer", "Socks5Dialer",
           "Upstream"]

log = logging.getLogger("fleet.gateway")


@dataclass(frozen=True, slots=True)
class Upstream:
    """A leased proxy: its key (namespace/name), where it listens, its kind (`http`, `socks5`) and its credentials
    (None: it asks for none; the repr shows the username only)."""

    proxy: str
    ip: str
    port: int
    scheme: str = wire.HTTP
    auth: Auth | None = None


@dataclass(eq=False, slots=True)
class Channel:
    """An open connection through an upstream. `absolute_form`: a plain HTTP request on it names the absolute URI
    (the upstream is an HTTP proxy that forwards it) and carries `head_fields` (its Proxy-Authorization; never in
    the repr); False: the channel reaches the target itself (a tunnel)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    absolute_form: bool = False
    head_fields: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class DialError:
    """Why a dial failed: decide.REFUSED, decide.TIMEOUT, decide.CONNECT_ERROR, decide.UPSTREAM_AUTH or
    decide.UNTRUSTED_ORIGIN (the retries metric's reason); `detail`: what the crawler is told beside it (never a
    secret)."""

    why: str
    detail: str = ""


class Dialer(Protocol):
    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        """A byte stream to target host:port through `upstream`."""
        ...

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        """A connection that takes one plain HTTP request for `target` (absolute form when the channel says so)."""
        ...


async def _open(upstream: Upstream, limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(upstream.ip, upstream.port, limit=limit)


class HttpProxyDialer:
    """Through an HTTP forward proxy (Squid, a bought one): a TCP connection within `connect_timeout`, for a tunnel
    its CONNECT answered 200 within the same timeout. `limit`: the StreamReader's bound (a response head over it is
    refused)."""

    def __init__(self, connect_timeout: float, limit: int) -> None:
        self.connect_timeout = connect_timeout
        self.limit = limit

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        try:
            reader, writer = await asyncio.wait_for(_open(upstream, self.limit), self.connect_timeout)
        except TimeoutError:
            return DialError(decide.TIMEOUT)
        except OSError:
            return DialError(decide.REFUSED)
        fields = (("Proxy-Authorization", upstream.auth.basic()),) if upstream.auth is not None else ()
        return Channel(reader, writer, absolute_form=True, head_fields=fields)

    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        opened = await self.forward(upstream, target)  # the TCP connection to the proxy
        if isinstance(opened, DialError):
            return opened
        try:
            async with asyncio.timeout(self.connect_timeout):
                await wire.http_handshake(opened.reader, opened.writer, target.authority, upstream.auth)
        except wire.UpstreamError as exc:
            opened.close()
            return DialError(exc.why, exc.detail)
        except TimeoutError:
            opened.close()
            return DialError(decide.TIMEOUT)
        except OSError:
            opened.close()
            return DialError(decide.CONNECT_ERROR)
        return Channel(opened.reader, opened.writer, absolute_form=False)


class Socks5Dialer:
    """Through a SOCKS5 proxy: the TCP connection and the whole handshake (greeting, credentials, CONNECT) within
    `connect_timeout`. A plain request goes down a tunnel to the target, in origin form."""

    def __init__(self, connect_timeout: float, limit: int) -> None:
        self.connect_timeout = connect_timeout
        self.limit = limit

    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(self.connect_timeout):
                try:
                    reader, writer = await _open(upstream, self.limit)
                except OSError:
                    return DialError(decide.REFUSED)
                await wire.socks5_handshake(reader, writer, target.host, target.port, upstream.auth)
        except wire.UpstreamError as exc:
            assert writer is not None
            writer.close()
            return DialError(exc.why, exc.detail)
        except TimeoutError:
            if writer is not None:
                writer.close()
            return DialError(decide.TIMEOUT)
        except OSError:
            assert writer is not None
            writer.close()
            return DialError(decide.CONNECT_ERROR)
        return Channel(reader, writer, absolute_form=False)

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        return await self.tunnel(upstream, target)


class Dialers:
    """The dialer of each upstream kind (`Upstream.scheme`): one `Dialer` to the core."""

    def __init__(self, by_scheme: dict[str, Dialer]) -> None:
        self.by_scheme = by_scheme

    @classmethod
    def default(cls, connect_timeout: float, limit: int) -> Dialers:
        return cls({wire.HTTP: HttpProxyDialer(connect_timeout, limit), wire.SOCKS5: Socks5Dialer(connect_timeout, limit)})

    def _of(self, upstream: Upstream) -> Dialer | DialError:
        got = self.by_scheme.get(upstream.scheme)
        return got if got is not None else DialError(decide.CONNECT_ERROR, f"no dialer for {upstream.scheme!r}")

    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        dialer = self._of(upstream)
        return dialer if isinstance(dialer, DialError) else await dialer.tunnel(upstream, target)

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        dialer = self._of(upstream)
        return dialer if isinstance(dialer, DialError) else await dialer.forward(upstream, target)
