"""What the gateway decides without I/O (pure, table-tested in tests/fleet/gateway/test_decide.py):
the proxy username's options, the client's credentials, a request's head, target and body framing,
the ban signature (statuses, a body pattern), when to try another proxy.

**The username grammar.** `CLIENT` then any of `-session-ID`, `-sesstime-MINUTES`, `-pool-NAME`, `-provider-P`,
`-region-R`, `-zone-Z`, each at most once and in this order. CLIENT is a client of the clients file (letters,
digits, `_` and `.`: no `-`). A value runs up to the next `-KEYWORD-` of a keyword that may still follow, so
every username has exactly one reading: `acme-region-us-east-1-zone-us-east-1a` is region `us-east-1`, zone
`us-east-1a`. What this cannot express is a value containing `-K-` for a keyword K later in the order (a session
id `a-zone-b`); such a value is never needed for a provider, region or zone name, and a session id is the
client's to choose. Values: a session id is 1 to 64 of `[A-Za-z0-9_.-]`; sesstime is a session's longest life in
minutes, 1 to 1440; a pool is a ProxyPool's name (a DNS-1123 label; its members in the client's namespaces);
provider, region and zone as the lease API takes them. A keyword out of order is part of the value before it
(`acme-zone-z-region-r` is zone `z-region-r`). Examples: `acme`, `acme-session-s1`,
`acme-session-s1-pool-crawl-eu`, `acme-provider-hetzner-region-fsn1`.

The password is the client's token (compared in constant time by the server).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import zlib
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from fleet import upstream
from providers import names
from providers.text import show

KEYWORDS = ("session", "sesstime", "pool", "provider", "region", "zone")
MAX_SESSTIME = 1440  # minutes: -sesstime-M, a session's longest life (a day)
CLIENT_PATTERN = r"[A-Za-z0-9_.]{1,64}"
_CLIENT = re.compile(CLIENT_PATTERN, re.ASCII)
_VALUES = {
    "session": re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII),
    "sesstime": re.compile(r"[1-9][0-9]{0,3}", re.ASCII),  # minutes, at most MAX_SESSTIME
    "pool": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII),  # a ProxyPool's name
    "provider": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII),
    "region": re.compile(r"[A-Za-z0-9._-]{1,128}", re.ASCII),
    "zone": re.compile(r"[A-Za-z0-9._-]{1,128}", re.ASCII),
}
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)  # a clients file's namespaces
# A host name or IPv4 address as the lease API's target (RFC 1123 labels), at most 253 characters.
_HOST = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\.?",
                   re.ASCII)
DEFAULT_BAN_STATUSES = (403, 429, 503)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
HOP_BY_HOP = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
                        "te", "trailer", "upgrade"})
RETRY_BODY_MAX = 64 * 1024  # a request body up to this size is kept to be sent again to another proxy
BAN_WINDOW = 64 * 1024  # the start of a response body read (and, decoded, searched) for --gateway-ban-pattern
MAX_BAN_PATTERN = 1000  # characters of --gateway-ban-pattern
MAX_TRAILERS = 100  # trailer fields of a chunked request body (dropped, not forwarded)
MAX_INTERIM = 10  # interim (1xx) responses read and dropped before a final one; more: a broken exchange
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Refused(Exception):
    """The gateway's own answer to the crawler (the HTTP/1.1 front-end's): status, reason (the X-Fleet-Reason
    header), message; `retry_after` (seconds, a Retry-After header) and `label` (the requests metric's outcome;
    '' is bad_request) when it translates one of the core's outcomes."""

    def __init__(self, status: int, reason: str, message: str, *, retry_after: int | None = None,
                 label: str = "") -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.retry_after, self.label = retry_after, label


@dataclass(frozen=True)
class Options:
    client: str
    session: str = ""
    sesstime: str = ""  # minutes: the session's longest life, as the vendors spell it ('' the rules')
    pool: str = ""
    provider: str = ""
    region: str = ""
    zone: str = ""


def parse_username(text: str) -> Options:
    """The options of a proxy username (the module's grammar); ValueError saying what is wrong."""
    client, sep, rest = text.partition("-")
    if not _CLIENT.fullmatch(client):
        raise ValueError("the username must start with a client name (letters, digits, '_', '.'; at most 64)")
    got: dict[str, str] = {}
    parts = rest.split("-") if sep else []
    i, allowed = 0, 0  # allowed: the index in KEYWORDS from which keywords may still come
    while i < len(parts):
        word = parts[i]
        if word not in KEYWORDS[allowed:]:  # only at the start: a value ends at a keyword that may follow
            raise ValueError(f"unknown option {word[:40]!r} in the username (known: {', '.join(KEYWORDS)})")
        allowed = KEYWORDS.index(word) + 1
        j = i + 1
        while j < len(parts) and not (parts[j] in KEYWORDS[allowed:] and j + 1 < len(parts)):
            j += 1
        value = "-".join(parts[i + 1:j])
        if not _VALUES[word].fullmatch(value) or (word == "sesstime" and int(value) > MAX_SESSTIME):
            raise ValueError(f"bad {word} {value[:64]!r} in the username")
        got[word] = value
        i = j
    return Options(client, **got)


def parse_basic(header: bytes) -> tuple[str, str]:
    """(username, password) of a `Basic` Proxy-Authorization value; ValueError otherwise."""
    scheme, _, b64 = header.strip().partition(b" ")
    if scheme.lower() != b"basic" or not b64:
        raise ValueError("only Basic proxy authentication is accepted")
    try:
        raw = base64.b64decode(b64.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("the Basic credentials are not base64 of UTF-8 text") from None
    user, sep, password = raw.partition(":")
    if not sep:
        raise ValueError("the Basic credentials have no ':' between username and password")
    return user, password


@dataclass(frozen=True)
class Head:
    """A request's line and headers as the crawler sent them."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def get(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name]

    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for v in self.get("connection") + self.get("proxy-connection") for t in v.split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", re.ASCII)
# A control character a field value may not hold (RFC 9110 5.5: VCHAR, obs-text, SP and HTAB only); CR and LF are
# the line ends. `Transfer-Encoding: chunked\x0b` must not be read as chunked by one parser and not by another.
_CTL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def parse_head(raw: bytes, max_headers: int = 100) -> Head:
    """The request line and headers (ending in CRLF CRLF); Refused 400/431 when they are not HTTP/1.x."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes anything
        raise Refused(400, "bad-request", "not an HTTP/1.1 request") from None
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise Refused(400, "bad-request", "an empty request")
    if _CTL.search(text):
        raise Refused(400, "bad-request", "a control character in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1]:
        raise Refused(400, "bad-request", "not an HTTP/1.1 request line")
    if len(lines) - 1 > max_headers:
        raise Refused(431, "too-many-headers", f"more than {max_headers} header fields")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or any(c in value for c in "\r\n\0"):
            raise Refused(400, "bad-request", "a malformed header line")
        headers.append((name, value.strip(" \t")))
    return Head(parts[0], parts[1], parts[2], tuple(headers))


def split_host_port(text: str, default_port: int | None) -> tuple[str, int]:
    """host:port (or host alone with a default port) → (normalised host, port); Refused 400 otherwise. The host is
    a host name, an IPv4 address, or an IPv6 literal in brackets (`[::1]:443`; returned without them, compressed;
    no zone id); an IPv6 address without brackets is refused (which colon starts the port?)."""
    if text.startswith("["):
        close = text.find("]")
        literal, after = (text[1:close], text[close + 1:]) if close > 0 else ("", "")
        if close < 0 or "%" in literal or not literal or not re.fullmatch(r"[0-9A-Fa-f:.]+", literal, re.ASCII):
            raise Refused(400, "bad-target", f"a bracketed host must be an IPv6 address, got {text[:100]!r}")
        try:
            host = ipaddress.IPv6Address(literal).compressed
        except ValueError:
            raise Refused(400, "bad-target", f"not an IPv6 address: {literal[:100]!r}") from None
        if after and not after.startswith(":"):
            raise Refused(400, "bad-target", f"only :port may follow an IPv6 literal, got {text[:100]!r}")
        return host, _port(after[1:] if after else "", default_port, text)
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, ""
    if ":" in host:
        raise Refused(400, "bad-target", f"an IPv6 address goes in brackets ([::1]:443), got {text[:100]!r}")
    port_n = _port(port, default_port, text)
    if len(host) > 253 or not _HOST.fullmatch(host):
        raise Refused(400, "bad-target", f"the target must be a host name, an IPv4 address or a bracketed IPv6 "
                                         f"address, got {host[:100]!r}")
    return host.rstrip(".").lower(), port_n


def _port(port: str, default_port: int | None, text: str) -> int:
    if not port:
        if default_port is None:
            raise Refused(400, "bad-target", "CONNECT needs host:port")
        return default_port
    if port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535:
        return int(port)
    raise Refused(400, "bad-target", f"bad port in {text[:100]!r}")


@dataclass(frozen=True)
class Target:
    host: str  # an IPv6 address without brackets
    port: int
    path: str  # origin-form (plain HTTP), '' for CONNECT

    @property
    def authority(self) -> str:
        """host:port as a request line carries it (an IPv6 address in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def target_of(head: Head) -> Target:
    """Where a proxy request goes: CONNECT host:port, or an absolute http:// URI; Refused otherwise."""
    if head.method == "CONNECT":
        host, port = split_host_port(head.target, None)
        return Target(host, port, "")
    if not head.target.lower().startswith("http://"):
        if head.target.lower().startswith("https://"):
            raise Refused(400, "bad-target", "https:// URIs go through CONNECT (set the proxy for https too)")
        raise Refused(400, "not-a-proxy-request", "this is a forward proxy: send CONNECT host:port or an absolute "
                                                  "http:// URI")
    rest = head.target[len("http://"):]
    slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:slash], rest[slash:] or "/"
    if path.startswith("?"):
        path = "/" + path
    if "@" in authority:
        raise Refused(400, "bad-target", "credentials in the URI are not forwarded")
    host, port = split_host_port(authority, 80)
    return Target(host, port, path)


def inner_target(head: Head, tunnel: Target) -> Target:
    """Where a request inside an intercepted tunnel goes: the tunnel's host and port (the certificate the client
    accepted names that host), the path from the origin-form target, or from an absolute https:// URI naming that
    same host and port; Refused 400 otherwise (a CONNECT inside, another host)."""
    text = head.target
    if head.method != "CONNECT" and text.startswith("/"):
        return Target(tunnel.host, tunnel.port, text)
    if head.method != "CONNECT" and text[:8].lower() == "https://":
        rest = text[8:]
        slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        path = rest[slash:] or "/"
        if split_host_port(rest[:slash], 443) == (tunnel.host, tunnel.port) and "@" not in rest[:slash]:
            return Target(tunnel.host, tunnel.port, path if path.startswith("/") else "/" + path)
    raise Refused(400, "bad-target", f"inside a tunnel to {tunnel.authority} a request names a path there "
                                     f"(got {text[:100]!r})")


# Requests to this host are the gateway's own API, never forwarded (a name no DNS answers, as `.invalid` would be, but
# one a crawler's proxy setting sends to the gateway like any other http:// URI).
CONTROL_HOST = "fleet.gateway"
BANS_PATH = "/v1/bans"


@dataclass(frozen=True)
class Ban:
    """`POST http://fleet.gateway/v1/bans?host=H[&proxy=NAMESPACE/NAME]`: `host` banned `proxy` ('' the session's)."""

    host: str
    proxy: str


def parse_ban(head: Head, target: Target) -> Ban:
    """The crawler's ban report, in-band for a tunnel the gateway cannot see into; Refused 404/405/400 otherwise."""
    path, _, query = target.path.partition("?")
    if path != BANS_PATH:
        raise Refused(404, "not-found", f"the gateway's API has {BANS_PATH} only")
    if head.method != "POST":
        raise Refused(405, "method-not-allowed", f"{BANS_PATH} takes POST")
    if declares_body(head):
        raise Refused(400, "bad-request", f"{BANS_PATH} takes its arguments in the query, no body")
    try:
        args = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=4)
    except ValueError as exc:
        raise Refused(400, "bad-request", f"the query: {exc}") from None
    if set(args) - {"host", "proxy"} or any(len(v) > 1 for v in args.values()):
        raise Refused(400, "bad-request", "the query takes host (required) and proxy, each once")
    host, proxy = args.get("host", [""])[0].lower(), args.get("proxy", [""])[0]
    if not (names.is_hostname(host) or is_ip(host)):
        raise Refused(400, "bad-request", f"host must be the banning site's host name, got {show(host)}")
    ns, _, name = proxy.partition("/")
    if proxy and not (names.is_label(ns) and names.is_subdomain(name)):
        raise Refused(400, "bad-request", f"proxy must be NAMESPACE/NAME (X-Fleet-Proxy), got {show(proxy)}")
    return Ban(host, proxy)


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def ban_answer(proxy: str, host: str, until: float | None, keep_alive: bool) -> bytes:
    """The 200 of a ban report: which proxy now cools down for which host, until when (null: no cooldown set)."""
    body = json.dumps({"proxy": proxy, "host": host, "cooldownUntil": until}).encode()
    lines = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}",
             "Connection: keep-alive" if keep_alive else "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def port_allowed(port: int, allowed: frozenset[int] | None) -> bool:
    """None: any port."""
    return allowed is None or port in allowed


def compile_ban_pattern(text: str, *, matches_empty: bool = False) -> re.Pattern[str] | None:
    """--gateway-ban-pattern: '' none, else a Python regular expression (searched, not matched); ValueError saying
    what is wrong. `matches_empty`: one that finds the empty string is allowed (a header value's pattern, where
    `.*` means any value); a body's is not."""
    if not text:
        return None
    if len(text) > MAX_BAN_PATTERN:
        raise ValueError(f"the pattern is over {MAX_BAN_PATTERN} characters")
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc})") from None
    if not matches_empty and pattern.search(""):
        raise ValueError("the pattern matches an empty body, so every response would be a ban")
    return pattern


def ban_window(body: bytes, content_encoding: str, limit: int = BAN_WINDOW) -> str | None:
    """The text --gateway-ban-pattern is searched in: the first `limit` bytes of a body's start (`body`, already
    without its chunked framing), decompressed when Content-Encoding is gzip or deflate (at most `limit` bytes
    out, whatever the ratio), as UTF-8 (bad bytes replaced). None when the coding is one the gateway does not
    decode (br, zstd, a chain): no pattern ban then."""
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        out = body[:limit]
    elif coding in ("gzip", "x-gzip", "deflate"):
        # wbits 47: gzip or zlib by the header; a raw deflate stream (what some servers send) as a fallback
        out = b""
        for wbits in ((47, -15) if coding == "deflate" else (47,)):
            try:
                out = zlib.decompressobj(wbits).decompress(body, limit)
                break
            except zlib.error:
                continue
        else:
            return None
    else:
        return None
    return out.decode("utf-8", errors="replace")


BY_STATUS, BY_BODY = "status", "body"  # why a response is a ban (`ban_reason`)


def ban_reason(status: int, ban_statuses: frozenset[int], pattern: re.Pattern[str] | None = None,
               window: str | None = None) -> str | None:
    """BY_STATUS for a ban status, else BY_BODY when (at any status) the pattern is found in the body's window,
    else None."""
    if status in ban_statuses:
        return BY_STATUS
    if pattern is not None and window is not None and pattern.search(window) is not None:
        return BY_BODY
    return None


def is_ban(status: int, ban_statuses: frozenset[int], pattern: re.Pattern[str] | None = None,
           window: str | None = None) -> bool:
    """A ban status, or (any status) the pattern found in the body's window."""
    return ban_reason(status, ban_statuses, pattern, window) is not None


def may_resend(method: str, body_kept: bool) -> bool:
    """A plain HTTP request may be sent again to another proxy: idempotent, and its body kept."""
    return method in IDEMPOTENT and body_kept


# Why one attempt on a proxy failed (the upstream_retries label, and what is reported for it). The dial's own
# (refused, timeout, connect_error, upstream_auth: the upstream wanted other credentials, the member's fault) are
# fleet.upstream's, where the handshakes raise them.
REFUSED, TIMEOUT, CONNECT_ERROR, UPSTREAM_AUTH = upstream.REFUSED, upstream.TIMEOUT, upstream.CONNECT_ERROR, upstream.AUTH
BANNED, BROKEN = "banned", "broken"
# An intercepted request's origin showed a certificate its name does not verify: not the proxy's fault (reported
# nothing), and another proxy would reach the same origin (never retried).
UNTRUSTED_ORIGIN = "untrusted_origin"
WATERFALL = "waterfall"  # a rule's pools: the next pool asked (the retries metric's reason; no failure)
REPORT_OF = {REFUSED: "error", TIMEOUT: "error", CONNECT_ERROR: "error", UPSTREAM_AUTH: "error", BROKEN: "error",
             BANNED: "blocked", UNTRUSTED_ORIGIN: ""}


def retry(failure: str, attempt: int, max_attempts: int, resendable: bool) -> bool:
    """Try another proxy after `attempt` (1-based) failed with `failure`? Connection failures and CONNECT errors
    happen before the request left (an upstream's 407 too: it forwarded nothing): always retriable within the
    bound; a ban or a broken exchange only when the request can be sent again."""
    if attempt >= max_attempts or failure == UNTRUSTED_ORIGIN:
        return False
    if failure in (REFUSED, TIMEOUT, CONNECT_ERROR, UPSTREAM_AUTH):
        return True
    return resendable


@dataclass(frozen=True)
class Framing:
    """How a response's body ends: `length` bytes, chunked, at the connection's close, or no body at all."""

    kind: str  # length | chunked | close | none
    length: int = 0


def response_framing(method: str, status: int, headers: list[tuple[str, str]]) -> Framing:
    """RFC 9112 6.3, for a response to `method` with `status`."""
    if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return Framing("none")
    te = [v.lower() for k, v in headers if k.lower() == "transfer-encoding"]
    if te:
        return Framing("chunked") if te[-1].split(",")[-1].strip() == "chunked" else Framing("close")
    lengths = {v.strip() for k, v in headers if k.lower() == "content-length"}
    if len(lengths) == 1:
        (value,) = lengths
        if value.isdigit() and len(value) <= 18:
            return Framing("length", int(value))
    return Framing("close")


def upstream_head(head: Head, target: Target, body: Framing | None = None, absolute: bool = True,
                  close: bool = True, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The request as sent to a Squid: absolute URI (origin-form when not `absolute`: on a tunnel to the origin),
    hop-by-hop headers (and every one Connection names) dropped, `Connection: close` (one exchange per upstream
    connection; not `close`: the connection stays for the next request, an intercepted one's); the body's framing
    as the gateway sends it
    (`body`: Content-Length n, chunked, or none) in place of the crawler's; no Expect (the gateway met it: the body
    is sent with the head, and no 100 is asked of the proxy); `extra`: the upstream's own fields (its
    Proxy-Authorization: the crawler's, for the gateway, is hop-by-hop and never sent on)."""
    named = {t.strip().lower() for v in head.get("connection") + head.get("proxy-connection") for t in v.split(",")}
    framing = {"content-length", "transfer-encoding", "expect"}  # expect: answered by the gateway
    uri = f"http://{target.authority}{target.path}" if absolute else target.path
    lines = [f"{head.method} {uri} {head.version}"]
    lines += [f"{k}: {v}" for k, v in head.headers
              if k.lower() not in HOP_BY_HOP and k.lower() not in named and k.lower() not in framing]
    lines += [f"{k}: {v}" for k, v in extra]
    if body is not None and body.kind == "length":
        lines.append(f"Content-Length: {body.length}")
    elif body is not None and body.kind == "chunked":
        lines.append("Transfer-Encoding: chunked")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reusable(raw: bytes, headers: list[tuple[str, str]], framing: Framing) -> bool:
    """May the upstream connection carry another request after this response: HTTP/1.1, its end known by its
    framing, and no `Connection: close`."""
    if not raw.startswith(b"HTTP/1.1 ") or framing.kind == "close":
        return False
    return not any(k.lower() == "connection" and "close" in v.lower() for k, v in headers)


def expects_continue(head: Head, body: Framing) -> bool:
    """Does the crawler wait for a `100 Continue` before it sends its body (RFC 9110 10.1.1)? The gateway answers
    the expectation itself (and drops Expect towards the proxy): True for `Expect: 100-continue` (any case) on an
    HTTP/1.1 request that has a body to send; an HTTP/1.0 request's expectation is ignored; any other
    expectation is Refused 417."""
    values = [t.strip().lower() for v in head.get("expect") for t in v.split(",") if t.strip()]
    if any(v != "100-continue" for v in values):
        raise Refused(417, "expectation-failed", "the only expectation the gateway meets is 100-continue")
    has_body = body.kind == "chunked" or (body.kind == "length" and body.length > 0)
    return bool(values) and head.version == "HTTP/1.1" and has_body


def declares_body(head: Head) -> bool:
    """The request says a body follows its head (a Transfer-Encoding, or a Content-Length other than 0): a refusal
    before the body is read must close the connection, or the body would be read as the next request."""
    return bool(head.get("transfer-encoding")) or any(v.strip() != "0" for v in head.get("content-length"))


def interim(status: int) -> bool:
    """A response head the gateway reads past for the final one: 1xx (100, 102, 103, ...), never relayed (the
    gateway answered any Expect itself). ValueError for 101: the gateway never asks for an upgrade (Upgrade is a
    hop-by-hop header it drops), so a 101 is a broken exchange."""
    if status == 101:
        raise ValueError("a 101 Switching Protocols to a request that asked for no upgrade")
    return 100 <= status < 200


def request_framing(head: Head, max_body: int) -> Framing:
    """How a request's body ends (RFC 9112 6.3 for requests): Content-Length n, chunked, or none. Refused: both
    framings at once or several lengths (400: a proxy that picks one reading can be smuggled past), chunked not
    the last coding or named twice (400), another coding (501), a length over `max_body` (413)."""
    te = [t.strip().lower() for v in head.get("transfer-encoding") for t in v.split(",") if t.strip()]
    lengths = {v.strip() for v in head.get("content-length")}
    if head.get("transfer-encoding"):
        if lengths:
            raise Refused(400, "bad-request", "both Transfer-Encoding and Content-Length")
        if not te or te[-1] != "chunked":
            raise Refused(400, "bad-request", "a request's Transfer-Encoding must end in chunked")
        if te.count("chunked") > 1:  # RFC 9112 6.1: chunked at most once
            raise Refused(400, "bad-request", "a request's Transfer-Encoding names chunked more than once")
        if te != ["chunked"]:
            raise Refused(501, "unsupported-transfer-coding", "only the chunked transfer coding is relayed")
        return Framing("chunked")
    if not lengths:
        return Framing("none")
    if len(lengths) > 1:
        raise Refused(400, "bad-request", "more than one Content-Length")
    (value,) = lengths
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise Refused(400, "bad-request", "a bad Content-Length")
    if int(value) > max_body:
        raise Refused(413, "body-too-large", f"the request body is over {max_body} bytes")
    return Framing("length", int(value))


_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(;[^\r\n\0]*)?\r\n", re.ASCII)


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (hex digits, an optional ;extension, CRLF); ValueError otherwise."""
    m = _CHUNK_SIZE.fullmatch(line)
    if m is None:
        raise ValueError("a malformed chunk-size line")
    return int(m.group(1), 16)


def parse_status(raw: bytes) -> tuple[int, list[tuple[str, str]]]:
    """A response head's status and headers; ValueError when it is not HTTP/1.x."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise ValueError("not an HTTP/1.x status line")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError("a malformed header line")
        headers.append((name, value.strip(" \t")))
    return int(parts[1]), headers


def client_head(raw: bytes, keep_alive: bool, proxy: str = "") -> bytes:
    """A response head as relayed to the crawler: its hop-by-hop headers replaced by ours, and `X-Fleet-Proxy`
    naming the proxy that fetched it (its key, namespace/name)."""
    lines = raw.decode("latin-1").split("\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if ln and ln.partition(":")[0].strip().lower() not in HOP_BY_HOP
                         and ln.partition(":")[0].strip().lower() != "x-fleet-proxy"]
    if proxy:
        kept.append(f"X-Fleet-Proxy: {proxy}")
    kept.append("Connection: keep-alive" if keep_alive else "Connection: close")
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


def parse_statuses(text: str) -> frozenset[int]:
    """--gateway-ban-statuses: comma-separated status codes 100..599 ('' none)."""
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 100 <= int(part) <= 599:
            raise ValueError(f"a status code is a number from 100 to 599, got {part[:20]!r}")
        out.add(int(part))
    return frozenset(out)


def established(proxy: str) -> bytes:
    """The CONNECT's 200 to the crawler, naming the proxy (its key) in `X-Fleet-Proxy` ('' none: an intercepted
    connection, where each request inside names its own)."""
    named = f"X-Fleet-Proxy: {proxy}\r\n" if proxy else ""
    return f"HTTP/1.1 200 Connection established\r\n{named}\r\n".encode()


def answer(status: int, reason: str, message: str, extra: tuple[tuple[str, str], ...] = (),
           keep_alive: bool = False) -> bytes:
    """A complete response of the gateway's own: the reason in X-Fleet-Reason and in the text body."""
    body = f"{status} {reason}: {message}\n".encode()
    phrase = PHRASES.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {phrase}", f"X-Fleet-Reason: {reason}", "Content-Type: text/plain; charset=utf-8",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in extra),
             "Connection: keep-alive" if keep_alive else "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


PHRASES = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           407: "Proxy Authentication Required", 408: "Request Timeout",
           411: "Length Required", 413: "Content Too Large", 417: "Expectation Failed",
           431: "Request Header Fields Too Large", 501: "Not Implemented", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}
