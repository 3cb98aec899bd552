"""The gateway's SOCKS5 front-end (RFC 1928, with RFC 1929 username/password authentication): crawlers that speak
SOCKS5 (curl --socks5-hostname, requests' socks5h://, httpx's SOCKS transport) get the same core as the HTTP/1.1
front-end (`fleet.gateway.http1`): the same clients, tokens and username options (`Core.admit`), port policy
(`Core.permit`), leases, cooldowns, retries before the first byte, rules' politeness, tunnels and their limits.
Called by `fleet.gateway.server` for each connection accepted on --gateway-socks-bind-address that the guard
admitted.

Per connection: the first byte within the idle timeout (the connection idle meanwhile: the guard may evict it), then
the whole handshake (greeting, authentication, request) within the header timeout. Each message is read with
`readexactly` by its own declared lengths (at most 4 + 1 + 255 + 2 bytes), so nothing past it is read: bytes a client
sends early after its request stay in the reader for the tunnel.

- greeting: only method 0x02 (username/password) is accepted; a client that offers none is answered 0xFF and
  closed (a gateway without credentials would be an open proxy);
- authentication: the username carries the HTTP proxy username's grammar (`acme-session-s1-pool-web`), the
  password the client's token; a failure is status 0x01, closed;
- request: CONNECT to a domain name (resolved by the proxy: socks5h semantics), an IPv4 or an IPv6 address; BIND
  and UDP ASSOCIATE are answered 0x07, an unknown address type 0x08; the core's refusals are mapped by `reply_of`
  (the table in docs/gateway.md); success is 0x00 with BND.ADDR 0.0.0.0:0 (the proxy's own address is not the
  crawler's business), then the core relays. `CONNECT fleet.gateway:PORT` opens the gateway's own API (ban
  reports) inside, as the HTTP front-end's control tunnel does.

Requests are counted as kind `connect`, protocol `socks5` (`proxy_operator_gateway_requests_total`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace

from fleet import httpguard, tracing
from fleet.gateway import decide
from fleet.gateway.clients import Client
from fleet.gateway.config import GatewayConfig
from fleet.gateway.core import (
    Attempt,
    Conn,
    Core,
    Forbidden,
    Refusal,
    Unauthorized,
    UpstreamFailed,
    UpstreamTimeout,
)
from fleet.gateway.decide import Options, Refused, Target
from fleet.logs import kv

log = logging.getLogger("fleet.gateway")

PROTOCOL = "socks5"
VERSION = 0x05
AUTH_VERSION = 0x01  # RFC 1929's sub-negotiation
USERNAME_PASSWORD, NO_ACCEPTABLE = 0x02, 0xFF
AUTH_OK, AUTH_FAILED = 0x00, 0x01
CONNECT, BIND, UDP_ASSOCIATE = 0x01, 0x02, 0x03
IPV4, DOMAIN, IPV6 = 0x01, 0x03, 0x04

# RFC 1928's replies
SUCCEEDED = 0x00
GENERAL_FAILURE = 0x01
NOT_ALLOWED = 0x02  # connection not allowed by ruleset
NETWORK_UNREACHABLE = 0x03
HOST_UNREACHABLE = 0x04
CONNECTION_REFUSED = 0x05
TTL_EXPIRED = 0x06
COMMAND_NOT_SUPPORTED = 0x07
ADDRESS_TYPE_NOT_SUPPORTED = 0x08


class SocksError(ValueError):
    """A message the gateway refuses: `reply` is the code to answer (None: close without one, as for a greeting of
    another version, to which SOCKS5 has no answer); `label`, the requests metric's outcome."""

    def __init__(self, message: str, reply: int | None = GENERAL_FAILURE, label: str = "bad_request") -> None:
        super().__init__(message)
        self.reply = reply
        self.label = label


@dataclass(frozen=True)
class Request:
    command: int
    target: Target


# -- the messages, read by their declared lengths (pure but for the reader) ---------------------------------------

async def read_greeting(reader: asyncio.StreamReader, first: bytes = b"") -> bytes:
    """The methods a greeting offers (`first`: its first byte, already read); SocksError for another version,
    IncompleteReadError when it ends short."""
    head = first + await reader.readexactly(2 - len(first))
    if head[0] != VERSION:
        raise SocksError(f"not SOCKS5 (version byte {head[0]:#04x})", reply=None)
    if head[1] == 0:
        raise SocksError("a greeting that offers no method", reply=None)
    return await reader.readexactly(head[1])


def method_of(offered: bytes) -> int:
    """The method chosen from those a greeting offers: username/password, or none acceptable."""
    return USERNAME_PASSWORD if USERNAME_PASSWORD in offered else NO_ACCEPTABLE


async def read_credentials(reader: asyncio.StreamReader) -> tuple[str, str]:
    """RFC 1929's (username, password), UTF-8 (as the HTTP front-end's Basic credentials); SocksError otherwise."""
    version, ulen = await reader.readexactly(2)
    if version != AUTH_VERSION:
        raise SocksError(f"not RFC 1929 authentication (version byte {version:#04x})", reply=AUTH_FAILED,
                         label="unauthorized")
    raw_user = await reader.readexactly(ulen)
    (plen,) = await reader.readexactly(1)
    raw_password = await reader.readexactly(plen)
    try:
        return raw_user.decode("utf-8"), raw_password.decode("utf-8")
    except UnicodeDecodeError:
        raise SocksError("the username or password is not UTF-8", reply=AUTH_FAILED, label="unauthorized") from None


async def read_request(reader: asyncio.StreamReader) -> Request:
    """The request: its command and target (a domain name as the crawler sent it, lower-cased; an address as
    text); SocksError with the reply to send when it cannot be served."""
    version, command, _reserved, atyp = await reader.readexactly(4)
    if version != VERSION:
        raise SocksError(f"a request of version {version:#04x}")
    if atyp == IPV4:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif atyp == IPV6:
        host = ipaddress.IPv6Address(await reader.readexactly(16)).compressed
    elif atyp == DOMAIN:
        (n,) = await reader.readexactly(1)
        raw = await reader.readexactly(n)
        try:
            host, _ = decide.split_host_port(f"{raw.decode('ascii')}:1", None)
        except (UnicodeDecodeError, Refused):
            raise SocksError(f"not a host name: {raw[:100]!r}", reply=HOST_UNREACHABLE) from None
    else:
        raise SocksError(f"address type {atyp:#04x}", reply=ADDRESS_TYPE_NOT_SUPPORTED)
    port = int.from_bytes(await reader.readexactly(2), "big")
    if command != CONNECT:
        raise SocksError(f"command {command:#04x} (only CONNECT is served)", reply=COMMAND_NOT_SUPPORTED)
    if port == 0:
        raise SocksError("port 0", reply=HOST_UNREACHABLE)
    return Request(command, Target(host, port, ""))


def reply(code: int) -> bytes:
    """A request's reply: BND.ADDR 0.0.0.0:0 whatever the code (the leased proxy's address is not the crawler's)."""
    return bytes((VERSION, code, 0x00, IPV4, 0, 0, 0, 0, 0, 0))


def reply_of(outcome: Refusal) -> int:
    """The reply to one of the core's refusals (docs/gateway.md's table): the port policy is the ruleset's; every
    proxy timing out is TTL expired, every one failing is host unreachable (a Squid answers a CONNECT it cannot
    make with 503 whether the name did not resolve or the host refused, so 0x05 is never claimed); no proxy, a
    tunnel limit or a rule's politeness is a general failure."""
    if isinstance(outcome, Forbidden):
        return NOT_ALLOWED
    if isinstance(outcome, UpstreamTimeout):
        return TTL_EXPIRED
    if isinstance(outcome, UpstreamFailed):
        return HOST_UNREACHABLE
    return GENERAL_FAILURE


# -- the front-end ------------------------------------------------------------------------------------------------

class Socks5:
    def __init__(self, core: Core, config: GatewayConfig, guard: httpguard.Guard, control: Control) -> None:
        self.core = core
        self.config = config
        self.guard = guard
        self.control = control
        self.series = core.series
        self._tracer = tracing.tracer()

    async def serve(self, conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: the handshake, then its one tunnel."""
        c = self.config
        first = await self.guard.first_byte(conn, reader, c.idle_timeout)
        if not first:
            return
        try:
            async with asyncio.timeout(c.header_timeout):
                admitted = await self._handshake(reader, writer, first)
        except TimeoutError:
            conn.close(httpguard.HEADER_TIMEOUT)
            return
        except asyncio.IncompleteReadError:
            conn.close(httpguard.BAD_REQUEST)
            return
        if admitted is None:  # refused, answered and counted
            conn.close("")
            return
        client, opts, target = admitted
        with self._tracer.start_as_current_span("gateway socks5", kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("fleet.gateway.client", client.name)
            span.set_attribute("server.address", target.host)
            span.set_attribute("server.port", target.port)
            outcome = await self._connect(conn, client, opts, target, reader, writer)
            span.set_attribute("fleet.gateway.outcome", outcome)
        self.series.request(client.name, "connect", outcome, PROTOCOL)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         first: bytes) -> tuple[Client, Options, Target] | None:
        """Greeting, authentication and request: who asks, with which options, for where; None when refused (the
        refusal answered and counted)."""
        client_name = "-"
        try:
            offered = await read_greeting(reader, first)
            method = method_of(offered)
            writer.write(bytes((VERSION, method)))
            if method == NO_ACCEPTABLE:
                raise SocksError("no username/password method offered", reply=None, label="unauthorized")
            await writer.drain()
            try:
                username, password = await read_credentials(reader)
            except SocksError as exc:
                writer.write(bytes((AUTH_VERSION, AUTH_FAILED)))
                raise SocksError(str(exc), reply=None, label=exc.label) from None
            admitted = self.core.admit(username, password)
            if isinstance(admitted, Unauthorized):
                writer.write(bytes((AUTH_VERSION, AUTH_FAILED)))
                raise SocksError(admitted.message, reply=None, label=admitted.label)
            client_name = admitted.client.name
            writer.write(bytes((AUTH_VERSION, AUTH_OK)))
            await writer.drain()
            request = await read_request(reader)
        except SocksError as exc:
            if exc.reply is not None:
                writer.write(reply(exc.reply))
            log.debug("a SOCKS5 handshake refused", extra=kv(client=client_name, why=str(exc)))
            self.series.request(client_name, "connect", exc.label, PROTOCOL)
            await _drained(writer)
            return None
        return admitted.client, admitted.options, request.target

    async def _connect(self, conn: Conn, client: Client, opts: Options, target: Target, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> str:
        """The tunnel, or the reply that says why not; the requests metric's outcome."""
        if target.host == decide.CONTROL_HOST:  # the gateway's own API: no port of the client's to check
            return await self.control.control_tunnel(client, opts, conn, reader, writer, established=reply(SUCCEEDED))
        refused: Refusal | None = self.core.permit(client, target.port)
        if refused is None:
            async with self.core.turn(client, target.host) as paced:  # the site's rule's concurrency
                if paced is not None:
                    refused = paced
                else:
                    got = await self.core.open_tunnel(client, opts, target)
                    if isinstance(got, Attempt):
                        await self.core.relay_tunnel(client, target, got, reader, writer, reply(SUCCEEDED),
                                                     session=opts.session, protocol=PROTOCOL)
                        return "ok"
                    refused = got
        writer.write(reply(reply_of(refused)))
        await _drained(writer)
        return refused.label


class Control(Protocol):
    """What this front-end asks of the HTTP/1.1 one: its control tunnel (`Http1.control_tunnel`)."""

    async def control_tunnel(self, client: Client, opts: Options, conn: Conn, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter, *, established: bytes) -> str: ...


def answer(status: int, reason: str, message: str) -> bytes:
    """`Conn.close`'s answer on a SOCKS5 connection: none (a refusal by the guard comes before any SOCKS message,
    and SOCKS5 has no message a client could read then)."""
    return b""


async def _drained(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        await asyncio.wait_for(writer.drain(), 2.0)
