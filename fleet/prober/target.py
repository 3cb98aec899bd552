"""What a probe asks of a proxy (pure): the `--probe-target`, parsed once,
and the bytes of the requests it sends; and the readings of what comes back
(status lines, the egress address in a body). No I/O here.

- `host:port`: `CONNECT host:port HTTP/1.1` through the proxy; a `200`
  status line is a good probe.
- `http://host[:port]/path`: the same CONNECT, then `GET /path HTTP/1.1`
  inside the tunnel; a `2xx` is a good probe, and a body that is an IP
  address (or JSON with an `ip` or `origin` field holding one, as
  api.ipify.org?format=json and httpbin's /ip answer) is the proxy's egress
  address as the target saw it.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from fleet.settings import probe_target_problem, redact_url
from fleet.upstream import Auth, connect_request
from providers.text import show

MAX_HEAD = 16 * 1024  # a status line plus headers, per response
MAX_BODY = 4 * 1024  # the part of the target's body read for an egress address
USER_AGENT = "fleet-prober"


class TargetError(ValueError):
    """A --probe-target that cannot be used; the message says why."""


@dataclass(frozen=True)
class Target:
    host: str  # as written, without brackets
    port: int
    path: str | None = None  # None: CONNECT only; else the GET's path inside the tunnel

    @property
    def authority(self) -> str:
        """host:port for the CONNECT line and Host headers ([v6]:port)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def connect_request(self, auth: Auth | None = None) -> bytes:
        """fleet.upstream's CONNECT (the gateway's dialers send the same), with the prober's User-Agent."""
        return connect_request(self.authority, auth, (("User-Agent", USER_AGENT),))

    def get_request(self) -> bytes:
        assert self.path is not None
        host = self.authority if self.port != 80 else (f"[{self.host}]" if ":" in self.host else self.host)
        return (f"GET {self.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\n"
                "Connection: close\r\n\r\n").encode("ascii")

    def __str__(self) -> str:
        return self.authority if self.path is None else f"http://{self.authority}{self.path}"


def parse_target(text: str) -> Target:
    """`host:port` or `http://host[:port]/path` (the settings' rule,
    `fleet.settings.probe_target_problem`); raises TargetError."""
    problem = probe_target_problem(text)
    if problem:
        raise TargetError(f"--probe-target {problem}, got {show(redact_url(text))}")
    text = text.strip()
    if text.startswith("http://"):
        parts = urlsplit(text)
        assert parts.hostname is not None
        path = parts.path or "/"
        if not path.isascii() or any(c.isspace() or not c.isprintable() for c in path):
            raise TargetError(f"--probe-target's path must be printable ASCII without spaces, got {show(path)}")
        return Target(parts.hostname, parts.port or 80, path)
    host, _, port = text.rpartition(":")
    return Target(host.strip("[]"), int(port))


# --- reading answers ---------------------------------------------------------------


def status_code(line: bytes) -> int | None:
    """The code of an `HTTP/1.x NNN reason` status line, or None when it is not one."""
    parts = line.rstrip(b"\r\n").split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def describe_status(line: bytes) -> str:
    """A status line fit for a message: printable ASCII, at most 80 characters."""
    text = line.rstrip(b"\r\n").decode("ascii", "replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:80]


def content_length(headers: bytes) -> int | None:
    """Content-Length from a header block (None when absent or unreadable)."""
    for raw in headers.split(b"\r\n"):
        name, sep, value = raw.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            value = value.strip()
            return int(value) if value.isdigit() and len(value) < 12 else None
    return None


def is_chunked(headers: bytes) -> bool:
    for raw in headers.split(b"\r\n"):
        name, sep, value = raw.partition(b":")
        if sep and name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


def dechunk(body: bytes) -> bytes:
    """The data of a chunked body, as far as `body` holds whole chunks (bounded input)."""
    out, rest = [], body
    while rest:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            break
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            break
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2:]
    return b"".join(out)


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def egress_ip(body: bytes) -> str | None:
    """The address a target echoed: the body itself, or JSON's `ip` / `origin`
    (the first of a comma-separated `origin`, the client as the target saw
    it); None when the body holds none. `body` is at most MAX_BODY bytes."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return None
    found = _ip(text)
    if found:
        return found
    if not text.startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    for field in ("ip", "origin"):
        value = doc.get(field)
        if isinstance(value, str) and len(value) <= 200:
            found = _ip(value.split(",", 1)[0])
            if found:
                return found
    return None
