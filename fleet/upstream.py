"""How to ask an upstream proxy for a tunnel, on the wire: HTTP `CONNECT` (with Basic credentials) and SOCKS5
(RFC 1928 CONNECT, RFC 1929 username/password). A leaf (no fleet feature imported): the gateway's dialers
(`fleet.gateway.dialers`) use it, and the prober can, as both are feature packages that may not import each other.

No policy here: a failed handshake raises `UpstreamError` naming why (`REFUSED`, `TIMEOUT`, `CONNECT_ERROR`,
`AUTH`, the gateway's retries-metric reasons) with a detail that never holds a secret; the caller bounds the time
(one `asyncio.timeout` around connect and handshake) and closes the connection. Reads are bounded: a SOCKS5 reply
is read field by field (at most 4 + 1 + 255 + 2 bytes), an HTTP answer's head by the reader's limit.

The SOCKS5 encoders and parsers are pure (table-tested in tests/fleet/test_upstream.py).
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the prober's target (and so the CLI's parser) imports the messages, not asyncio
    import asyncio

HTTP, SOCKS5 = "http", "socks5"
SCHEMES = (HTTP, SOCKS5)
# Why a handshake failed (the same words as fleet.gateway.decide's reasons).
REFUSED, TIMEOUT, CONNECT_ERROR, AUTH = "refused", "timeout", "connect_error", "upstream_auth"

NO_AUTH, USER_PASS, NO_METHOD = 0x00, 0x02, 0xFF
ATYP_IPV4, ATYP_DOMAIN, ATYP_IPV6 = 0x01, 0x03, 0x04
REPLIES = {1: "general SOCKS server failure", 2: "connection not allowed by ruleset", 3: "network unreachable",
           4: "host unreachable", 5: "connection refused", 6: "TTL expired", 7: "command not supported",
           8: "address type not supported"}


@dataclass(frozen=True, slots=True)
class Auth:
    """An upstream's username and password; its repr and str show the username only."""

    username: str
    password: str = field(repr=False)

    def __str__(self) -> str:
        return f"{self.username}:***"

    def basic(self) -> str:
        """The value of a `Proxy-Authorization` header."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")


class UpstreamError(Exception):
    """A handshake that failed: `why` (a reason above) and `detail` (the message; never a credential)."""

    def __init__(self, why: str, detail: str) -> None:
        super().__init__(detail)
        self.why, self.detail = why, detail


# -- SOCKS5, pure -------------------------------------------------------------------------------------------------

def socks5_greeting(auth: bool) -> bytes:
    """The methods offered: no authentication, and username/password when there are credentials."""
    return bytes([5, 2, NO_AUTH, USER_PASS]) if auth else bytes([5, 1, NO_AUTH])


def socks5_method(reply: bytes, auth: bool) -> int:
    """The method the server chose (2 bytes); UpstreamError when it is none we offered."""
    if len(reply) != 2 or reply[0] != 5:
        raise UpstreamError(CONNECT_ERROR, "the upstream is not a SOCKS5 proxy")
    method = reply[1]
    if method == NO_AUTH or (method == USER_PASS and auth):
        return method
    if method == NO_METHOD:
        raise UpstreamError(AUTH, "the SOCKS5 proxy accepts none of the offered methods"
                                  + ("" if auth else " (it wants credentials)"))
    raise UpstreamError(CONNECT_ERROR, f"the SOCKS5 proxy chose method {method}, which was not offered")


def socks5_userpass(auth: Auth) -> bytes:
    """RFC 1929's request; UpstreamError when a field is empty or over 255 bytes."""
    user, password = auth.username.encode(), auth.password.encode()
    if not 0 < len(user) < 256 or not 0 < len(password) < 256:
        raise UpstreamError(AUTH, "SOCKS5 credentials are 1 to 255 bytes each")
    return bytes([1, len(user)]) + user + bytes([len(password)]) + password


def socks5_auth_ok(reply: bytes) -> None:
    """RFC 1929's answer (2 bytes): status 0, else UpstreamError AUTH."""
    if len(reply) != 2 or reply[0] != 1:
        raise UpstreamError(CONNECT_ERROR, "the SOCKS5 proxy's authentication answer is malformed")
    if reply[1] != 0:
        raise UpstreamError(AUTH, "the SOCKS5 proxy refused the credentials")


def socks5_connect(host: str, port: int) -> bytes:
    """A CONNECT request: an IP literal as itself, a name as ATYP domain (the proxy resolves it)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        name = host.encode("ascii", "replace")  # the gateway's targets are RFC 1123 names
        if not 0 < len(name) < 256 or not host.isascii():
            raise UpstreamError(CONNECT_ERROR, "a host name is 1 to 255 ASCII characters") from None
        addr = bytes([ATYP_DOMAIN, len(name)]) + name
    else:
        addr = bytes([ATYP_IPV4 if ip.version == 4 else ATYP_IPV6]) + ip.packed
    if not 0 < port < 65536:
        raise UpstreamError(CONNECT_ERROR, f"port {port} is out of range")
    return bytes([5, 1, 0]) + addr + port.to_bytes(2, "big")


def socks5_reply(head: bytes) -> int:
    """The first 5 bytes of a CONNECT reply (VER REP RSV ATYP and the address's first byte): how many bytes of it
    are left (the rest of the bound address and its port); UpstreamError when the proxy did not connect."""
    if len(head) != 5 or head[0] != 5 or head[2] != 0:
        raise UpstreamError(CONNECT_ERROR, "the SOCKS5 proxy's CONNECT reply is malformed")
    if head[1] != 0:
        said = REPLIES.get(head[1], "an unknown reply code")
        raise UpstreamError(CONNECT_ERROR, f"the SOCKS5 proxy answered {said} ({head[1]})")
    atyp = head[3]
    if atyp == ATYP_IPV4:
        return 4 - 1 + 2
    if atyp == ATYP_IPV6:
        return 16 - 1 + 2
    if atyp == ATYP_DOMAIN:
        return head[4] + 2
    raise UpstreamError(CONNECT_ERROR, f"the SOCKS5 proxy's reply has address type {atyp}")


# -- handshakes on an open connection -----------------------------------------------------------------------------

async def _exactly(reader: asyncio.StreamReader, n: int, what: str) -> bytes:
    import asyncio

    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise UpstreamError(CONNECT_ERROR, f"the SOCKS5 proxy closed the connection in its {what}") from None


async def socks5_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int,
                           auth: Auth | None) -> None:
    """Greeting, RFC 1929 authentication when the proxy asks, CONNECT host:port; returns once the tunnel is open."""
    writer.write(socks5_greeting(auth is not None))
    method = socks5_method(await _exactly(reader, 2, "method choice"), auth is not None)
    if method == USER_PASS:
        assert auth is not None
        writer.write(socks5_userpass(auth))
        socks5_auth_ok(await _exactly(reader, 2, "authentication answer"))
    writer.write(socks5_connect(host, port))
    left = socks5_reply(await _exactly(reader, 5, "CONNECT reply"))
    await _exactly(reader, left, "CONNECT reply")


def connect_request(authority: str, auth: Auth | None, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """An HTTP CONNECT for `authority` (host:port), with `Proxy-Authorization` when there are credentials."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{k}: {v}" for k, v in extra]
    if auth is not None:
        lines.append(f"Proxy-Authorization: {auth.basic()}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def connect_status(head: bytes) -> int:
    """The status of a CONNECT answer's head; UpstreamError unless it is 200 (407: AUTH)."""
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise UpstreamError(CONNECT_ERROR, "the upstream's answer to CONNECT is not HTTP/1.x")
    status = int(parts[1])
    if status == 407:
        raise UpstreamError(AUTH, "the upstream proxy wants other credentials (407)")
    if status != 200:
        raise UpstreamError(CONNECT_ERROR, f"the upstream answered CONNECT with {status}")
    return status


async def http_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str,
                         auth: Auth | None) -> None:
    """CONNECT authority, its answer's head read (within the reader's limit) and a 200 required."""
    import asyncio

    writer.write(connect_request(authority, auth))
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise UpstreamError(CONNECT_ERROR, "the upstream's answer to CONNECT was cut or too long") from None
    connect_status(head)
