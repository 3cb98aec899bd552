"""One connection through an upstream proxy to a target: the handshake a
dialer makes, here for the health check (the gateway's own dialers come
with their change). HTTP: `CONNECT host:port` with Basic
`Proxy-Authorization`; SOCKS5: RFC 1928 with RFC 1929 username/password.

Bounded by the deadline as a whole, not per read: every socket operation
gets the time left as its timeout, so a server dripping a byte a second
still ends at the deadline; an HTTP answer's head is read up to
`MAX_HEAD` bytes. The credentials go on the wire and nowhere else: no
exception message holds them.
"""

from __future__ import annotations

import base64
import ipaddress
import socket

from providers.base import Deadline
from providers.upstream.config import Endpoint
from providers.upstream.credentials import Credentials

MAX_HEAD = 16 * 1024


class AuthFailed(Exception):
    """The upstream refused the credentials (a 407, a SOCKS5 auth failure,
    or no acceptable SOCKS5 method)."""


class Refused(Exception):
    """The upstream answered, and would not connect to the target (403, 5xx, a SOCKS5 reply code)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class ProtocolError(Exception):
    """The answer is not the protocol (garbage, or closed before an answer)."""


def connect(endpoint: Endpoint, creds: Credentials | None, host: str, port: int, deadline: Deadline) -> socket.socket:
    """A socket tunnelled to host:port through the upstream; the caller closes it."""
    left = deadline.remaining()
    if left <= 0:
        raise TimeoutError("deadline passed before dialling")
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=left)
    try:
        if endpoint.scheme == "http":
            _http(sock, creds, host, port, deadline)
        else:
            _socks5(sock, creds, host, port, deadline)
    except BaseException:
        sock.close()
        raise
    return sock


def _tick(sock: socket.socket, deadline: Deadline) -> None:
    left = deadline.remaining()
    if left <= 0:
        raise TimeoutError("no complete answer before the deadline")
    sock.settimeout(left)


def _send(sock: socket.socket, data: bytes, deadline: Deadline) -> None:
    _tick(sock, deadline)
    sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, deadline: Deadline) -> bytes:
    buf = b""
    while len(buf) < n:
        _tick(sock, deadline)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ProtocolError("the upstream closed the connection without a complete answer")
        buf += chunk
    return buf


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _http(sock: socket.socket, creds: Credentials | None, host: str, port: int, deadline: Deadline) -> None:
    target = _authority(host, port)
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if creds is not None:
        token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        lines.append(f"Proxy-Authorization: Basic {token}")
    _send(sock, ("\r\n".join(lines) + "\r\n\r\n").encode(), deadline)
    head = b""
    while b"\r\n\r\n" not in head:
        _tick(sock, deadline)
        chunk = sock.recv(4096)
        if not chunk:
            if not head:
                raise ProtocolError("the upstream closed the connection without an answer")
            break
        head += chunk
        if len(head) > MAX_HEAD:
            raise ProtocolError(f"an answer head longer than {MAX_HEAD} bytes")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP answer: {status[:60]!r}")
    code = int(parts[1])
    if code == 407:
        raise AuthFailed("the upstream answered 407 Proxy Authentication Required")
    if not 200 <= code < 300:
        raise Refused(f"the upstream answered {status[:80]!r} to CONNECT {target}", code)


SOCKS_REPLIES = {
    1: "general failure", 2: "not allowed by ruleset", 3: "network unreachable", 4: "host unreachable",
    5: "connection refused", 6: "TTL expired", 7: "command not supported", 8: "address type not supported",
}


def _socks5(sock: socket.socket, creds: Credentials | None, host: str, port: int, deadline: Deadline) -> None:
    methods = b"\x02" if creds is not None else b"\x00"
    _send(sock, b"\x05\x01" + methods, deadline)
    ver, method = _recv_exact(sock, 2, deadline)
    if ver != 5:
        raise ProtocolError(f"not a SOCKS5 answer (version byte {ver})")
    if method == 0xFF:
        raise AuthFailed("the upstream accepts none of our SOCKS5 methods" + ("" if creds else " (it wants credentials)"))
    if method != methods[0]:
        raise ProtocolError(f"the upstream chose SOCKS5 method {method}, which we did not offer")
    if creds is not None:
        user, password = creds.username.encode(), creds.password.encode()
        if not 0 < len(user) < 256 or not 0 < len(password) < 256:
            raise AuthFailed("SOCKS5 usernames and passwords are 1-255 bytes (RFC 1929)")
        _send(sock, b"\x01" + bytes([len(user)]) + user + bytes([len(password)]) + password, deadline)
        _, status = _recv_exact(sock, 2, deadline)
        if status != 0:
            raise AuthFailed("the upstream refused the SOCKS5 username and password")
    try:
        ip = ipaddress.ip_address(host)
        addr = (b"\x01" if ip.version == 4 else b"\x04") + ip.packed
    except ValueError:
        name = host.encode("idna")
        addr = b"\x03" + bytes([len(name)]) + name
    _send(sock, b"\x05\x01\x00" + addr + port.to_bytes(2, "big"), deadline)
    ver, rep, _, atyp = _recv_exact(sock, 4, deadline)
    if ver != 5:
        raise ProtocolError(f"not a SOCKS5 reply (version byte {ver})")
    if rep != 0:
        raise Refused(f"the upstream's SOCKS5 reply: {SOCKS_REPLIES.get(rep, f'code {rep}')}", rep)
    if atyp == 1:
        _recv_exact(sock, 4 + 2, deadline)
    elif atyp == 4:
        _recv_exact(sock, 16 + 2, deadline)
    elif atyp == 3:
        (n,) = _recv_exact(sock, 1, deadline)
        _recv_exact(sock, n + 2, deadline)
    else:
        raise ProtocolError(f"a SOCKS5 reply with address type {atyp}")
