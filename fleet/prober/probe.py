"""One probe through one proxy (asyncio I/O; the readings are
`fleet.prober.target`'s pure functions).

Open TCP to the proxy's ip:port, send `CONNECT target`, read the answer's
head (status line and headers, at most 16 KiB); a `200` is a good CONNECT.
With an http:// target, send `GET path` inside the tunnel, read its head the
same way and at most 4 KiB of its body: a `2xx` is a good probe, and an IP
address in the body is the proxy's egress address. An upstream of another
kind (`scheme` socks5) or one that asks for credentials (`auth`) is asked the
way the gateway's dialers ask it: `fleet.upstream`'s handshakes, shared by
both. The whole probe has one time limit. The connection is reset (not closed) once the answer is in: at
2,000 probes a second an orderly close would leave 120,000 sockets in
TIME_WAIT on the prober.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import struct

from fleet import upstream
from fleet.durations import format_duration
from fleet.prober.decide import Outcome, bounded
from fleet.prober.target import (
    MAX_BODY,
    MAX_HEAD,
    Target,
    content_length,
    dechunk,
    describe_status,
    egress_ip,
    is_chunked,
    status_code,
)

_LINGER_RESET = struct.pack("ii", 1, 0)


class _Bad(Exception):
    """A probe that got an answer, and the answer is a failure (the message says which)."""


async def _head(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Bad(f"{what}: the answer's head is over {MAX_HEAD // 1024} KiB") from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Bad(f"{what}: the connection was closed without an answer") from None
        raise _Bad(f"{what}: the connection was closed in the answer's head ({_first(exc.partial)!r})") from None


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes | None:
    """At most MAX_BODY bytes of the body; None when it is longer (not read)."""
    length = content_length(head)
    if length is not None:
        if length > MAX_BODY:
            return None
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            return exc.partial
    data = b""
    while len(data) <= MAX_BODY:
        chunk = await reader.read(MAX_BODY + 1 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > MAX_BODY:
        return None
    return dechunk(data) if is_chunked(head) else data


def _os_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    name = errno.errorcode.get(exc.errno or 0, "")
    return (exc.strerror or type(exc).__name__) + (f" ({name})" if name else "")


async def probe(ip: str, port: int, target: Target, time_limit: float, *, scheme: str = upstream.HTTP,
                auth: upstream.Auth | None = None) -> Outcome:
    """Probe `target` through the proxy at ip:port (of kind `scheme`, with `auth` when it asks for credentials)
    within `time_limit` seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    proxy = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    stage = f"connect to {proxy}"
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(time_limit):
            reader, writer = await asyncio.open_connection(ip, port, limit=MAX_HEAD)
            if scheme == upstream.SOCKS5:
                stage = f"SOCKS5 CONNECT {target.authority}"
                try:
                    await upstream.socks5_handshake(reader, writer, target.host, target.port, auth)
                except upstream.UpstreamError as exc:
                    raise _Bad(f"{stage}: {exc.detail}") from None
            else:
                stage = f"CONNECT {target.authority}"
                writer.write(target.connect_request(auth))
                head = await _head(reader, stage)
                code = status_code(head)
                if code != 200:
                    raise _Bad(f"{stage}: the proxy answered {_first(head)!r}")
            if target.path is None:
                said = "CONNECT 200" if scheme == upstream.HTTP else "SOCKS5 CONNECT"
                return Outcome(True, f"{said} in {_ms(loop.time() - start)}", None, loop.time() - start)
            stage = f"GET {target}"
            writer.write(target.get_request())
            head = await _head(reader, stage)
            code = status_code(head)
            if code is None or not 200 <= code < 300:
                raise _Bad(f"{stage}: the target answered {_first(head)!r}")
            body = await _body(reader, head)
            took = loop.time() - start
            return Outcome(True, f"GET {code} in {_ms(took)}", egress_ip(body) if body else None, took)
    except _Bad as exc:
        return Outcome(False, bounded(str(exc)), None, loop.time() - start)
    except TimeoutError:
        return Outcome(False, f"{stage}: no answer within {format_duration(time_limit)}", None, loop.time() - start)
    except OSError as exc:
        return Outcome(False, bounded(f"{stage}: {_os_error(exc)}"), None, loop.time() - start)
    finally:
        if writer is not None:
            _reset(writer)


def _first(head: bytes) -> str:
    return describe_status(head.split(b"\r\n", 1)[0])


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.001 else "<1 ms"


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()
