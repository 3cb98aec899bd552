"""How the gateway reaches a target through a leased proxy: the upstream transport seam (as httpx's transports).

`fleet.gateway.core` asks a `Dialer` for a `Channel` to a target through one upstream and gets either the channel
or a `DialError` naming why it failed (refused, timeout, connect_error: reported `error` for that proxy and host,
and the next proxy tried). What the crawler sees (the `200 Connection established` of an HTTP front-end, a
SOCKS5 reply) is the front-end's; what the upstream is asked (a CONNECT to a Squid) is the dialer's.

One implementation today, `HttpProxyDialer`: the fleet's members are Squids, so a tunnel is a TCP connection to
the proxy and a `CONNECT host:port` it answers 200, and a plain HTTP request is sent to the proxy itself in
absolute form (`Channel.absolute_form`). Another upstream kind (an authenticated HTTP proxy, a SOCKS5 one) is
another class with the same two methods.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from fleet.gateway import decide
from fleet.gateway.decide import Target


@dataclass(frozen=True, slots=True)
class Upstream:
    """A leased proxy: its key (namespace/name) and where it listens."""

    proxy: str
    ip: str
    port: int


@dataclass(eq=False, slots=True)
class Channel:
    """An open connection through an upstream. `absolute_form`: a plain HTTP request on it names the absolute URI
    (the upstream is an HTTP proxy that forwards it); False: the channel reaches the target itself (a tunnel)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    absolute_form: bool = False

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class DialError:
    """Why a dial failed: decide.REFUSED, decide.TIMEOUT, decide.CONNECT_ERROR or decide.UNTRUSTED_ORIGIN (the
    retries metric's reason); `detail`: what the crawler is told beside it (never a secret)."""

    why: str
    detail: str = ""


class Dialer(Protocol):
    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        """A byte stream to target host:port through `upstream`."""
        ...

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        """A connection that takes one plain HTTP request for `target` (absolute form when the channel says so)."""
        ...


class HttpProxyDialer:
    """Through an HTTP forward proxy (Squid): a TCP connection within `connect_timeout`, for a tunnel its CONNECT
    answered 200 within the same timeout. `limit`: the StreamReader's bound (a response head over it is refused)."""

    def __init__(self, connect_timeout: float, limit: int) -> None:
        self.connect_timeout = connect_timeout
        self.limit = limit

    async def forward(self, upstream: Upstream, target: Target) -> Channel | DialError:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(upstream.ip, upstream.port,
                                                                            limit=self.limit), self.connect_timeout)
        except TimeoutError:
            return DialError(decide.TIMEOUT)
        except OSError:
            return DialError(decide.REFUSED)
        return Channel(reader, writer, absolute_form=True)

    async def tunnel(self, upstream: Upstream, target: Target) -> Channel | DialError:
        opened = await self.forward(upstream, target)  # the TCP connection to the proxy
        if isinstance(opened, DialError):
            return opened
        hostport = target.authority
        opened.writer.write(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode())
        failure = ""
        try:
            raw = await asyncio.wait_for(opened.reader.readuntil(b"\r\n\r\n"), self.connect_timeout)
            status, _ = decide.parse_status(raw)
            if status != 200:
                failure = decide.CONNECT_ERROR
        except TimeoutError:
            failure = decide.TIMEOUT
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            failure = decide.CONNECT_ERROR
        if failure:
            opened.close()
            return DialError(failure)
        return Channel(opened.reader, opened.writer, absolute_form=False)
