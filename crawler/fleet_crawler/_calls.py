"""The lease API's calls without I/O (table-tested): what each request says, what each answer means, and when a
call is sent again. `LeaseClient` and `AsyncLeaseClient` are thin loops around these, one blocking and one async,
so both behave alike.

The paths, fields and statuses are the server's OpenAPI document's (`GET /openapi.json`, docs/leases.md):
POST /v1/leases, /v1/leases/{id}/renew, /v1/leases/{id}/release, /v1/reports; GET /v1/proxies.

**Retries.** A call is sent again after a connection that never opened (nothing reached the server), a 429 or a
503 (Redis away, no proxy yet, recovering), at most `Policy.retries` times, waiting the answer's Retry-After (or
`retryAfter`) when it gives one and otherwise backing off exponentially with jitter; a Retry-After longer than
`Policy.max_delay` is not waited for (the error says it). A lease request's 409 (every matching proxy busy) is
waited out for up to `Policy.busy_wait` seconds in all. Renewals and releases are idempotent on the server, so
they are also sent again after an answer lost mid-way (a read timeout, a dropped connection); a lease request or
a report is not (a second lease or a second error report would count).
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import httpx

from fleet_crawler._errors import ApiError, LeaseEnded, NoProxy, Unauthorized, Unreachable

log = logging.getLogger("fleet_crawler")

Outcome = Literal["ok", "blocked", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "blocked", "error")
RETRY_STATUSES = frozenset({429, 503})
BUSY_POLL = 5.0  # seconds between two lease requests waiting out 409 at most (a proxy may free up before freeAt)
MAX_ANSWER = 1024 * 1024  # bytes of an answer read at most
# Nothing was sent: always safe to send again.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol, httpx.ProxyError)
TRANSPORT_ERRORS = (httpx.TransportError, httpx.InvalidURL)


@dataclass(frozen=True)
class Policy:
    """How hard a client tries (see the module's docstring)."""

    retries: int = 3
    backoff: float = 0.5  # seconds before the first re-send; doubled each time
    max_delay: float = 30.0  # the longest wait between two tries
    busy_wait: float = 0.0  # seconds a lease request waits out 409 (busy) in all

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_delay < 0 or self.busy_wait < 0:
            raise ValueError("retries, backoff, max_delay and busy_wait must not be negative")


@dataclass(frozen=True)
class Call:
    kind: Literal["lease", "renew", "release", "report", "proxies"]
    method: str
    path: str
    body: dict[str, Any] | None
    what: str  # for messages: "lease for example.com"

    @property
    def idempotent(self) -> bool:
        return self.kind in ("renew", "release", "proxies")


@dataclass(frozen=True)
class Grant:
    """A lease as the API granted (or renewed) it."""

    id: str
    proxy: str  # NAMESPACE/NAME
    url: str  # http://IP:PORT, the proxy to send requests through
    ip: str
    port: int
    ttl: int
    expires_at: datetime
    target: str  # the host it was leased for (as asked, lower case, no trailing dot)
    egress_ip: str | None = None  # the address the prober saw its requests come from, when known
    provider: str | None = None
    region: str | None = None
    zone: str | None = None
    pool: str | None = None
    recreated: bool = False  # a renewal re-created a lease Redis had lost


@dataclass(frozen=True)
class Released:
    """A release's answer: `released`, or `revoked` with its reason (gone, replaced, unhealthy)."""

    lease: str
    status: Literal["released", "revoked"]
    reason: str | None = None


@dataclass(frozen=True)
class Cooldown:
    scope: Literal["target", "global"]
    until: datetime


@dataclass(frozen=True)
class Report:
    """A report's answer: the cooldown it started, if any, and the proxy's errors in a row."""

    proxy: str
    target: str
    outcome: Outcome
    cooldown: Cooldown | None = None
    errors_in_a_row: int = 0


@dataclass(frozen=True)
class ProxyInfo:
    """One Running, healthy proxy of GET /v1/proxies."""

    proxy: str
    ip: str
    port: int
    leases: int
    capacity: int
    egress_ip: str | None = None
    provider: str | None = None
    region: str | None = None
    zone: str | None = None
    pool: str | None = None
    cooling_until: datetime | None = None


def base_url(url: str) -> str:
    """The API's URL without a trailing slash; ValueError unless http(s)://HOST[:PORT]."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the lease API's URL must be http(s)://HOST:PORT, not {url!r}")
    return url.rstrip("/")


def normal_target(target: str) -> str:
    """Targets compare case-insensitively and without a trailing dot (as the server normalises them)."""
    return target.rstrip(".").lower()


# -- the requests -----------------------------------------------------------------------------------------------

def lease_call(target: str, *, ttl: int | None = None, sticky: str | None = None, provider: str | None = None,
               region: str | None = None, zone: str | None = None, pool: str | None = None) -> Call:
    body: dict[str, Any] = {"target": target}
    for name, value in (("ttl", ttl), ("sticky", sticky), ("provider", provider), ("region", region), ("zone", zone),
                        ("pool", pool)):
        if value is not None:
            body[name] = value
    return Call("lease", "POST", "/v1/leases", body, f"lease for {target}")


def renew_call(grant: Grant, ttl: int | None = None) -> Call:
    """A renewal naming the lease's proxy, target, ip and port: after a loss of Redis data it re-creates the lease
    (docs/leases.md, Durability)."""
    body: dict[str, Any] = {"proxy": grant.proxy, "target": grant.target, "ip": grant.ip, "port": grant.port}
    if ttl is not None:
        body["ttl"] = ttl
    return Call("renew", "POST", f"/v1/leases/{_id(grant.id)}/renew", body, f"renewal of lease {grant.id}")


def release_call(lease_id: str) -> Call:
    return Call("release", "POST", f"/v1/leases/{_id(lease_id)}/release", None, f"release of lease {lease_id}")


def report_call(outcome: Outcome, *, lease: str | None = None, proxy: str | None = None,
                target: str | None = None) -> Call:
    """By an open lease (target defaults to the lease's), or by proxy with a target (also after a release)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    if (lease is None) == (proxy is None):
        raise ValueError("report by lease or by proxy (with a target), one of them")
    if proxy is not None and not target:
        raise ValueError("a report by proxy needs the target")
    body: dict[str, Any] = {"lease": lease} if lease is not None else {"proxy": proxy}
    if target:
        body["target"] = target
    body["outcome"] = outcome
    return Call("report", "POST", "/v1/reports", body, f"{outcome} report on {lease or proxy}")


def proxies_call(**filters: str | None) -> Call:
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in filters.items() if v)
    return Call("proxies", "GET", "/v1/proxies" + (f"?{query}" if query else ""), None, "proxy list")


def _id(lease_id: str) -> str:
    return quote(lease_id, safe="")


# -- the answers ------------------------------------------------------------------------------------------------

def decode(raw: bytes) -> dict[str, Any]:
    """The answer's JSON object ({"error": text} when it is not one)."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {"error": raw[:200].decode("utf-8", "replace")}
    return doc if isinstance(doc, dict) else {"value": doc}


def answer_error(call: Call, status: int, body: dict[str, Any]) -> ApiError:
    """The error a non-200 answer to `call` is (the module docstring of _errors draws the tree)."""
    reason = str(body.get("error") or "")
    field = body.get("field") if isinstance(body.get("field"), str) else None
    message = f"{call.what}: {status}" + (f" {reason}" if reason else "")
    kw: dict[str, Any] = {"status": status, "reason": reason, "field": field, "body": body}
    if status == 401:
        return Unauthorized(message, **kw)
    if call.kind == "lease" and status in (409, 503) and "freeAt" in body:
        return NoProxy(message, **kw)
    if call.kind in ("renew", "release") and status in (404, 410, 409):
        return LeaseEnded(message, **kw)
    if call.kind == "report" and (status == 410 or (status == 404 and field == "lease")):
        return LeaseEnded(message, **kw)
    return ApiError(message, **kw)


def unreachable(call: Call, url: str, exc: Exception) -> Unreachable:
    return Unreachable(f"{call.what}: no answer from the lease API at {url}: {type(exc).__name__}: {exc}".rstrip(": "))


def retry_after(headers: httpx.Headers, body: dict[str, Any], now: datetime | None = None) -> float | None:
    """Seconds the answer asks to wait: its Retry-After (seconds or an HTTP date), else the body's retryAfter."""
    value = headers.get("retry-after")
    if value is not None:
        value = value.strip()
        if value.isdigit():
            return float(value)
        from email.utils import parsedate_to_datetime  # rare (fleet sends seconds); 13 ms of import saved

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            return max(0.0, (when - (now or datetime.now(when.tzinfo))).total_seconds())
    got = body.get("retryAfter")
    if isinstance(got, int | float) and not isinstance(got, bool) and math.isfinite(got) and got >= 0:
        return float(got)
    return None


def next_try(call: Call, policy: Policy, *, status: int | None, sent: bool, attempt: int, waited: float,
             after: float | None, jitter: float) -> float | None:
    """Seconds to wait before sending `call` again, or None: the answer (or the error) stands.

    status: the answer's, None when there was none (`sent`: the request may have reached the server); attempt:
    re-sends so far for retryable answers; waited: seconds spent waiting out 409s so far; after: the answer's
    Retry-After; jitter: a number in [0, 1) (the backoff's random part)."""
    if status == 409 and call.kind == "lease":
        wait = after if after is not None else 1.0
        left = policy.busy_wait - waited
        return min(max(wait, 0.1), BUSY_POLL, policy.max_delay, left) if left > 0 else None
    retryable = (status in RETRY_STATUSES) or (status is None and (not sent or call.idempotent))
    if not retryable or attempt >= policy.retries:
        return None
    if after is not None:
        return after if after <= policy.max_delay else None
    return min(policy.max_delay, policy.backoff * 2.0 ** attempt * (0.5 + jitter / 2))


class Tries:
    """One call's sending, as both clients loop over it: after each try, `failed` or `answered` says how long
    to wait before the next, or raises the error that stands (the sync and async loops hold no logic)."""

    def __init__(self, call: Call, policy: Policy, url: str, *, jitter: Callable[[], float] = random.random) -> None:
        self.call, self.policy, self.url, self.jitter = call, policy, url, jitter
        self.attempt, self.waited = 0, 0.0

    def failed(self, error: Exception, *, sent: bool) -> float:
        """No answer: `sent` when the request may have reached the server."""
        delay = self._next(status=None, sent=sent, after=None)
        if delay is None:
            raise unreachable(self.call, self.url, error)
        return delay

    def answered(self, status: int, doc: dict[str, Any], headers: httpx.Headers) -> float:
        """An answer other than 200."""
        delay = self._next(status=status, sent=True, after=retry_after(headers, doc))
        if delay is None:
            raise answer_error(self.call, status, doc)
        return delay

    def _next(self, *, status: int | None, sent: bool, after: float | None) -> float | None:
        delay = next_try(self.call, self.policy, status=status, sent=sent, attempt=self.attempt, waited=self.waited,
                         after=after, jitter=self.jitter())
        if delay is not None:
            if status == 409:
                self.waited += delay
            else:
                self.attempt += 1
            log.debug("fleet: %s: %s, again in %.2fs", self.call.what, status or "no answer", delay)
        return delay


# -- the results ------------------------------------------------------------------------------------------------

def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _opt(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    return value if isinstance(value, str) and value else None


def grant_of(call: Call, doc: dict[str, Any], target: str) -> Grant:
    try:
        expires = _time(doc["expiresAt"])
        if expires is None:
            raise ValueError("expiresAt")
        return Grant(id=str(doc["lease"]), proxy=str(doc["proxy"]), url=str(doc["url"]), ip=str(doc["ip"]),
                     port=int(doc["port"]), ttl=int(doc["ttl"]), expires_at=expires, target=target,
                     egress_ip=_opt(doc, "egressIP"), provider=_opt(doc, "provider"), region=_opt(doc, "region"),
                     zone=_opt(doc, "zone"), pool=_opt(doc, "pool"), recreated=doc.get("recreated") is True)
    except (KeyError, TypeError, ValueError) as exc:
        raise ApiError(f"{call.what}: the API answered a lease without a valid {exc}", status=200, body=doc) from None


def released_of(call: Call, doc: dict[str, Any]) -> Released:
    status = doc.get("status")
    if status not in ("released", "revoked"):
        raise ApiError(f"{call.what}: the API answered status {status!r}", status=200, body=doc)
    return Released(lease=str(doc.get("lease", "")), status=status, reason=_opt(doc, "reason"))


def report_of(call: Call, doc: dict[str, Any]) -> Report:
    cooldown = None
    cool = doc.get("cooldown")
    if isinstance(cool, dict):
        until = _time(cool.get("until"))
        if cool.get("scope") in ("target", "global") and until is not None:
            cooldown = Cooldown(scope=cool["scope"], until=until)
    outcome = doc.get("outcome")
    if outcome not in OUTCOMES:
        raise ApiError(f"{call.what}: the API answered outcome {outcome!r}", status=200, body=doc)
    errors = doc.get("errorsInARow")
    return Report(proxy=str(doc.get("proxy", "")), target=str(doc.get("target", "")), outcome=outcome,
                  cooldown=cooldown, errors_in_a_row=errors if isinstance(errors, int) else 0)


def proxies_of(call: Call, doc: dict[str, Any]) -> list[ProxyInfo]:
    items = doc.get("proxies")
    if not isinstance(items, list):
        raise ApiError(f"{call.what}: the API answered no proxies list", status=200, body=doc)
    out = []
    for item in items:
        try:
            out.append(ProxyInfo(proxy=str(item["proxy"]), ip=str(item["ip"]), port=int(item["port"]),
                                 leases=int(item["leases"]), capacity=int(item["capacity"]),
                                 egress_ip=_opt(item, "egressIP"), provider=_opt(item, "provider"),
                                 region=_opt(item, "region"), zone=_opt(item, "zone"), pool=_opt(item, "pool"),
                                 cooling_until=_time(item.get("coolingUntil"))))
        except (KeyError, TypeError, ValueError) as exc:
            raise ApiError(f"{call.what}: a proxy without a valid {exc}", status=200, body=doc) from None
    return out
