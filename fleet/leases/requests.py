"""What a request to the lease API may say (pure, table-tested): the JSON
bodies of POST /v1/leases and POST /v1/reports, the filters of GET
/v1/proxies and lease ids. Each refusal is a `BadRequest` naming the field;
nothing is sent to Redis before a request passed here.

POST /v1/leases/{id}/renew takes an empty body too (the lease's own ttl).

The rules are the OpenAPI document's (`fleet.leases.openapi` builds its
schemas from the same constants), so a client generated from it and this
module agree on every field.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson

from providers import names
from providers.text import show

MAX_BODY = 64 * 1024  # bytes of a request body read at most
DEFAULT_TTL = 300  # seconds, when a lease request names none (capped by --lease-max-ttl)
OUTCOMES = ("ok", "blocked", "error")

# A host name (RFC 1123 labels, dot-separated, an optional trailing dot), at most 253 characters.
HOST_PATTERN = names.anchored(names.HOSTNAME + r"\.?")
HOST_MAX = names.MAX_HOSTNAME
STICKY_PATTERN = r"^[!-~]{1,128}$"  # printable ASCII, no spaces
PROVIDER_PATTERN = names.anchored(names.LABEL)  # a provider name (DNS-1123 label, at most 63)
POOL_PATTERN = names.anchored(names.LABEL)  # a ProxyPool's name (DNS-1123 label): its members' endpoints say it
PLACE_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"  # a region or zone
LEASE_ID_PATTERN = r"^[0-9a-f]{32}$"
PROXY_PATTERN = names.anchored(f"{names.LABEL}/{names.SUBDOMAIN}")  # namespace/name

_HOST = re.compile(HOST_PATTERN[1:-1], re.ASCII)
_STICKY = re.compile(STICKY_PATTERN[1:-1], re.ASCII)
_PROVIDER = re.compile(PROVIDER_PATTERN[1:-1], re.ASCII)
_POOL = re.compile(POOL_PATTERN[1:-1], re.ASCII)
_PLACE = re.compile(PLACE_PATTERN[1:-1], re.ASCII)
_LEASE_ID = re.compile(LEASE_ID_PATTERN[1:-1], re.ASCII)
_PROXY = re.compile(PROXY_PATTERN[1:-1], re.ASCII)

FILTERS = ("provider", "region", "zone", "pool")
LEASE_FIELDS = ("target", "ttl", "sticky", *FILTERS)
REPORT_FIELDS = ("lease", "proxy", "target", "outcome")
RENEW_FIELDS = ("ttl", "proxy", "target", "ip", "port")


class BadRequest(Exception):
    """A 4xx answer: `{"error": message, "field": field}`."""

    def __init__(self, message: str, field: str | None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.field, self.status = message, field, status

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "field": self.field}


@dataclass(frozen=True)
class Filters:
    provider: str = ""
    region: str = ""
    zone: str = ""
    pool: str = ""  # a ProxyPool's name: only its members

    def asked(self) -> tuple[tuple[str, str], ...]:
        """(filter, value) of each filter given."""
        return tuple((n, v) for n, v in (("provider", self.provider), ("region", self.region), ("zone", self.zone),
                                         ("pool", self.pool)) if v)

    def matches(self, endpoint: dict[str, Any]) -> bool:
        return all(endpoint.get(name) == want for name, want in self.asked())


@dataclass(frozen=True)
class LeaseRequest:
    target: str
    ttl: int
    sticky: str = ""
    filters: Filters = Filters()


@dataclass(frozen=True)
class RenewRequest:
    ttl: int | None = None  # None: the lease's own
    proxy: str = ""  # with target (and ip, port): what re-creates a lease Redis lost
    target: str = ""
    ip: str = ""
    port: int | None = None


@dataclass(frozen=True)
class ReportRequest:
    outcome: str
    lease: str = ""
    proxy: str = ""
    target: str = ""


def is_host(text: str) -> bool:
    return len(text) <= HOST_MAX and _HOST.fullmatch(text) is not None


def normal_host(text: str) -> str:
    """Targets compare case-insensitively and without the trailing dot."""
    return text.rstrip(".").lower()


def decode_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or BadRequest (field `body`)."""
    if not body.strip():
        raise BadRequest("the body must be a JSON object, got nothing", "body")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {show(str(exc), 120)}", "body") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the body must be a JSON object, got {show(value)}", "body")
    return value


def _unknown(doc: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in doc:
        if name not in allowed:
            raise BadRequest(f"unknown field {show(name)} (known: {', '.join(allowed)})", name[:60])


def _string(doc: dict[str, Any], name: str, pattern: re.Pattern[str], what: str, max_len: int = 1024) -> str:
    value = doc.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string ({what}), got {show(value)}", name)
    if len(value) > max_len or not pattern.fullmatch(value):
        raise BadRequest(f"{name} must be {what}, got {show(value)}", name)
    return value


def _target(doc: dict[str, Any], required: bool) -> str:
    value = doc.get("target")
    if value is None:
        if required:
            raise BadRequest("target is required: the host name the proxy will be used for", "target")
        return ""
    if not isinstance(value, str) or not is_host(value):
        raise BadRequest(f"target must be a host name (letters, digits, '-' and '.'; at most {HOST_MAX}), "
                         f"got {show(value)}", "target")
    return normal_host(value)


def _filters(get: dict[str, Any]) -> Filters:
    return Filters(
        provider=_string(get, "provider", _PROVIDER, "a provider name (a DNS-1123 label)", 63),
        region=_string(get, "region", _PLACE, "a region (letters, digits, '.', '_', '-'; at most 128)", 128),
        zone=_string(get, "zone", _PLACE, "a zone (letters, digits, '.', '_', '-'; at most 128)", 128),
        pool=_string(get, "pool", _POOL, "a ProxyPool's name (a DNS-1123 label)", 63),
    )


def parse_lease(body: bytes, max_ttl: float) -> LeaseRequest:
    """POST /v1/leases. `ttl`: whole seconds from 1 to `max_ttl` (default 300, or max_ttl when shorter)."""
    doc = decode_object(body)
    _unknown(doc, LEASE_FIELDS)
    target = _target(doc, required=True)
    ttl = _ttl(doc, max_ttl)
    if ttl is None:
        ttl = min(DEFAULT_TTL, int(max_ttl))
    sticky = _string(doc, "sticky", _STICKY, "1 to 128 printable ASCII characters without spaces", 128)
    return LeaseRequest(target, ttl, sticky, _filters(doc))


def _ttl(doc: dict[str, Any], max_ttl: float) -> int | None:
    high = int(max_ttl)
    ttl = doc.get("ttl")
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or (isinstance(ttl, float) and (
            not math.isfinite(ttl) or not ttl.is_integer())):
        raise BadRequest(f"ttl must be a whole number of seconds from 1 to {high}, got {show(ttl)}", "ttl")
    if not 1 <= int(ttl) <= high:
        raise BadRequest(f"ttl must be from 1 to {high} seconds (--lease-max-ttl), got {show(ttl)}", "ttl")
    return int(ttl)


def parse_renew(body: bytes, max_ttl: float) -> RenewRequest:
    """POST /v1/leases/{id}/renew: an empty body or an object of `ttl` (default: the lease's own) and, to
    re-create a lease Redis lost, `proxy` and `target` (together) with the lease's `ip` and `port`."""
    if not body.strip():
        return RenewRequest()
    doc = decode_object(body)
    _unknown(doc, RENEW_FIELDS)
    ttl = _ttl(doc, max_ttl)
    proxy = _string(doc, "proxy", _PROXY, "a proxy key namespace/name", 317)
    target = _target(doc, required=bool(proxy))
    if target and not proxy:
        raise BadRequest("target goes with proxy (both re-create a lost lease); give proxy too", "proxy")
    ip = doc.get("ip")
    if ip is not None:
        if not proxy:
            raise BadRequest("ip goes with proxy and target; give them too", "proxy")
        try:
            ip = ip if isinstance(ip, str) and len(ip) <= 45 and ipaddress.ip_address(ip) else None  # as answered
        except ValueError:
            ip = None
        if ip is None:
            raise BadRequest(f"ip must be an IPv4 or IPv6 address, got {show(doc.get('ip'))}", "ip")
    port = doc.get("port")
    if port is not None:
        if not proxy:
            raise BadRequest("port goes with proxy and target; give them too", "proxy")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise BadRequest(f"port must be a whole number from 1 to 65535, got {show(port)}", "port")
    return RenewRequest(ttl, proxy, target, ip or "", port)


def parse_report(body: bytes) -> ReportRequest:
    """POST /v1/reports: `lease` or `proxy` (one of them), `target` (required with `proxy`), `outcome`."""
    doc = decode_object(body)
    _unknown(doc, REPORT_FIELDS)
    lease = _string(doc, "lease", _LEASE_ID, "a lease id (32 lowercase hex digits)", 32)
    proxy = _string(doc, "proxy", _PROXY, "a proxy key namespace/name", 317)
    if lease and proxy:
        raise BadRequest("give lease or proxy, not both", "proxy")
    if not lease and not proxy:
        raise BadRequest("lease (an open lease's id) or proxy (namespace/name) is required", "lease")
    target = _target(doc, required=bool(proxy))
    outcome = doc.get("outcome")
    if outcome not in OUTCOMES:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOMES)}, got {show(outcome)}", "outcome")
    assert isinstance(outcome, str)
    return ReportRequest(outcome, lease, proxy, target)


def parse_filters(query: bytes | str) -> Filters:
    """GET /v1/proxies?provider=&region=&zone=&pool= (each at most once; nothing else)."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    if len(text) > 2048:
        raise BadRequest("the query string is longer than 2048 characters", "query")
    got: dict[str, Any] = {}
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError:
        raise BadRequest("the query string is not valid UTF-8", "query") from None
    for name, value in pairs:
        if name not in FILTERS:
            raise BadRequest(f"unknown query parameter {show(name)} (known: {', '.join(FILTERS)})", name[:60])
        if name in got:
            raise BadRequest(f"{name} is given more than once", name)
        got[name] = value
    return _filters(got)


def check_lease_id(text: str) -> str:
    """A lease id from the path; an impossible one is unknown (404) without asking Redis."""
    if not _LEASE_ID.fullmatch(text):
        raise BadRequest(f"unknown lease {show(text)} (a lease id is 32 lowercase hex digits)", "id", 404)
    return text
