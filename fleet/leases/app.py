"""The lease API as a plain ASGI application (served by uvicorn with
httptools and uvloop: `fleet.leases.process`). Thin I/O: each route reads a
bounded body, checks the token, hands the request to `fleet.leases.requests`
(pure validation) and to one Lua script (`fleet.store.leases`), and turns
the answer into JSON with `fleet.leases.decide` (pure).

Eight routes need no framework: a dict of paths and one prefix match cost
less per request than a router, and reading the body ourselves is what
bounds it (`Content-Length` over 64 KiB is refused before a byte is read; a
chunked body is read only up to the bound).

Every request gets one server span (`fleet.tracing`), a child of an incoming
W3C `traceparent`; without an exporter the span is the API's no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry import propagate, trace

from fleet import tracing
from fleet.leases import decide, openapi
from fleet.leases.guard import CHECK_EVERY, WHY, EpochView, should_wait
from fleet.leases.metrics import ApiSeries
from fleet.leases.requests import (
    DEFAULT_TTL,
    MAX_BODY,
    BadRequest,
    check_lease_id,
    parse_filters,
    parse_lease,
    parse_renew,
    parse_report,
)
from fleet.logs import kv
from fleet.store import StoreError
from fleet.store.leases import AsyncLeases, Busy, Epoch, Grace, Granted, LeaseCall, RenewCall, Renewed, ReportCall

log = logging.getLogger("fleet.api")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

STICKY_KEEP = 3600.0  # a sticky binding outlives its last lease by this long
JSON = (b"content-type", b"application/json")
WWW_AUTHENTICATE = (b"www-authenticate", b'Bearer realm="fleet"')
INSECURE_WARNING = "the API runs without authentication (--insecure-no-auth): anyone who reaches it can lease proxies"
_Unavailable = (StoreError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True)
class ApiConfig:
    token: bytes | None  # None: --insecure-no-auth
    max_ttl: float = 3600.0
    max_per_proxy: int = 1
    cooldown_blocked: float = 600.0
    cooldown_errors: int = 3
    cooldown_global: float = 300.0
    grace: float = 0.0  # after a loss of Redis data nothing new is leased for this long; 0: max_ttl
    replica_wait: float = 0.1  # a grant or renewal waits this long for a replica to have it (0: never)

    @property
    def grace_period(self) -> float:
        return self.grace or self.max_ttl

    @property
    def insecure(self) -> bool:
        return self.token is None


class Answer(Exception):
    """A finished answer raised from deep in a handler (413 while reading, 401)."""

    def __init__(self, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.status, self.body, self.headers = status, body, headers


class Api:
    def __init__(self, leases: AsyncLeases, config: ApiConfig, clock: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random) -> None:
        self.leases = leases
        self.config = config
        self.clock = clock
        self.rand = rand
        self.series = ApiSeries()
        self.view = EpochView(config.grace_period)
        self.replicas = 0  # connected to the master at the last check
        self._recovering = False  # what the recovering gauge says
        self._wait_ms = int(config.replica_wait * 1000)
        self._expected = b"Bearer " + config.token if config.token is not None else None
        self._openapi = orjson.dumps(openapi.document(config.max_ttl, 300, config.max_per_proxy, config.insecure))
        self._tracer = tracing.tracer()
        self._traced = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # tracing.setup ran
        self._tasks: list[asyncio.Task[None]] = []
        self._routes: dict[str, tuple[bytes, Callable[[Scope, Receive, dict[bytes, bytes]], Awaitable[tuple[int, Any]]]]] = {
            "/v1/leases": (b"POST", self.lease),
            "/v1/reports": (b"POST", self.report),
            "/v1/proxies": (b"GET", self.proxies),
            "/healthz": (b"GET", self.healthz),
        }

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                with contextlib.suppress(*_Unavailable):
                    await self.check()  # the epoch before the first grant (the loop retries when Redis is away)
                self._tasks = [asyncio.create_task(self.leases.keep_synced(self.clock, log), name="lease-sync"),
                               asyncio.create_task(self._guard_loop(), name="lease-epoch")]
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in self._tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await self.leases.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def check(self) -> None:
        """The epoch check and the replica count (every CHECK_EVERY s, and at start)."""
        now = self.clock()
        self._observe(await self.leases.check(now, self.view.call()), now)
        replicas = await self.leases.replicas()
        if replicas != self.replicas:
            log.info("replicas of the lease state", extra=kv(replicas=replicas, waits=bool(should_wait(replicas, self._wait_ms))))
        self.replicas = replicas

    async def _guard_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY)
            with contextlib.suppress(*_Unavailable):
                await self.check()

    def _observe(self, epoch: Epoch, now: float) -> None:
        was = self.view.in_grace(now)
        why = self.view.observe(epoch)
        recovering = self.view.in_grace(now)
        if recovering != self._recovering:
            self._recovering = recovering
            self.series.recovering(recovering)
        if why and not was:
            log.warning("Redis lost lease data: no new leases for the grace period, renewals re-create lost leases",
                        extra=kv(why=WHY.get(why, why), until=decide.timestamp(self.view.grace_until), epoch=epoch.id))

    def _waited(self, acked: int | None) -> None:
        if acked is not None and acked < 1:
            self.series.unreplicated()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        path: str = scope["path"]
        method: str = scope["method"]
        if self._traced:
            parent = propagate.extract({"traceparent": headers[b"traceparent"].decode("latin-1"),
                                        **({"tracestate": headers[b"tracestate"].decode("latin-1")}
                                           if b"tracestate" in headers else {})}) if b"traceparent" in headers else None
            route = self._route_name(path)
            with self._tracer.start_as_current_span(f"{method} {route}", context=parent, kind=trace.SpanKind.SERVER,
                                                    attributes={"http.request.method": method,
                                                                "http.route": route}) as span:
                status, body, extra = await self._answer(scope, receive, headers, path, method)
                span.set_attribute("http.response.status_code", status)
        else:  # no tracer provider: the no-op span is skipped, not made
            status, body, extra = await self._answer(scope, receive, headers, path, method)
        if isinstance(body, Raw):
            await _send(send, status, body.data, body.content_type, body.headers)
        else:
            if isinstance(body, dict) and body.get("retryAfter") is not None:
                extra = (*extra, (b"retry-after", str(body["retryAfter"]).encode()))
            await _send(send, status, orjson.dumps(body), JSON[1], extra)

    async def _answer(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes], path: str,
                      method: str) -> tuple[int, Any, tuple[tuple[bytes, bytes], ...]]:
        """The status, body and extra headers of one request (its lease and renewal counted)."""
        extra: tuple[tuple[bytes, bytes], ...] = ()
        try:
            status, body = await self._dispatch(scope, receive, headers, path, method)
        except Answer as ans:
            status, body, extra = ans.status, ans.body, ans.headers
        except BadRequest as exc:
            status, body = exc.status, exc.body()
        except _Unavailable as exc:
            log.warning("Redis does not answer", extra=kv(path=self._route_name(path), error=type(exc).__name__))
            status, body = 503, {"error": "cannot reach Redis", "field": None}
        if path == "/v1/leases":
            self.series.lease(_result(status, body))
        elif path.endswith("/renew") and path.startswith("/v1/leases/"):
            self.series.renewal(_renewal(status, body))
        return status, body, extra

    @staticmethod
    def _route_name(path: str) -> str:
        if path.startswith("/v1/leases/") and path.endswith("/release"):
            return "/v1/leases/{id}/release"
        if path.startswith("/v1/leases/") and path.endswith("/renew"):
            return "/v1/leases/{id}/renew"
        if path in ("/v1/leases", "/v1/reports", "/v1/proxies", "/healthz", "/metrics", "/openapi.json"):
            return path
        return "unknown"

    async def _dispatch(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes], path: str,
                        method: str) -> tuple[int, Any]:
        if path == "/metrics":
            _allow(method, "GET")
            return 200, await self.metrics()
        if path == "/openapi.json":
            _allow(method, "GET")
            return 200, Raw(self._openapi, b"application/json")
        if path.startswith("/v1/leases/") and path.endswith("/release"):
            _allow(method, "POST")
            self._auth(scope, headers)
            await _read_body(headers, receive)  # nothing is read from it; still bounded
            return await self.release(path[len("/v1/leases/"):-len("/release")])
        if path.startswith("/v1/leases/") and path.endswith("/renew"):
            _allow(method, "POST")
            self._auth(scope, headers)
            lease_id = check_lease_id(path[len("/v1/leases/"):-len("/renew")])
            return await self.renew(lease_id, await _read_body(headers, receive))
        found = self._routes.get(path)
        if found is None:
            return 404, {"error": f"no such path {path[:200]!r}", "field": None}
        want, handler = found
        _allow(method, want.decode())
        if path.startswith("/v1/"):
            self._auth(scope, headers)
        return await handler(scope, receive, headers)

    def _auth(self, scope: Scope, headers: dict[bytes, bytes]) -> None:
        # (a repeated header of any name makes the dict shorter than the list: only then count)
        if (b"authorization" in headers and len(headers) < len(scope["headers"])
                and sum(1 for name, _ in scope["headers"] if name == b"authorization") > 1):
            # Which one would count is the server's choice (the last, in a dict): refuse rather than guess.
            raise Answer(400, {"error": "more than one Authorization header; send one", "field": "authorization"})
        if self._expected is None:
            return
        given = headers.get(b"authorization")
        if given is not None and hmac.compare_digest(given, self._expected):
            return
        why = "missing bearer token" if given is None else "wrong bearer token"
        raise Answer(401, {"error": why + " (Authorization: Bearer <token>)", "field": "authorization"}, (WWW_AUTHENTICATE,))

    # -- routes -------------------------------------------------------------------------------------

    async def lease(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> tuple[int, Any]:
        req = parse_lease(await _read_body(headers, receive), self.config.max_ttl)
        now = self.clock()
        if self.view.in_grace(now):
            return decide.recovering(self.view.grace_until, now, self.view.lost)
        lease_id = os.urandom(16).hex()  # 32 lowercase hex digits (LEASE_ID_PATTERN)
        expires = now + req.ttl
        call = LeaseCall(lease_id=lease_id, target=req.target, expires=expires, max_per_proxy=self.config.max_per_proxy,
                         sticky=req.sticky, sticky_ttl=req.ttl + STICKY_KEEP, provider=req.filters.provider,
                         region=req.filters.region, zone=req.filters.zone, ttl=float(req.ttl), pool=req.filters.pool)
        got, epoch, acked = await self.leases.lease(call, now, self.rand(), self.view.call(),
                                                    should_wait(self.replicas, self._wait_ms))
        self._observe(epoch, now)
        if isinstance(got, Grace):
            return decide.recovering(self.view.grace_until, now, self.view.lost)
        if isinstance(got, Granted):
            self._waited(acked)
            endpoint = decide.decode(got.endpoint) or {}
            return 200, decide.granted(lease_id, got.proxy, endpoint, expires, req.ttl, got.egress_ip)
        if isinstance(got, Busy):
            status, body, _ = decide.busy(got.free_at, now)
            return status, body
        return decide.no_proxy(req.filters)

    async def renew(self, lease_id: str, body: bytes) -> tuple[int, Any]:
        req = parse_renew(body, self.config.max_ttl)
        now = self.clock()
        call = RenewCall(lease_id=lease_id, ttl=req.ttl, default_ttl=min(DEFAULT_TTL, int(self.config.max_ttl)),
                         max_per_proxy=self.config.max_per_proxy, proxy=req.proxy, target=req.target, ip=req.ip,
                         port=req.port, sticky_keep=STICKY_KEEP)
        got, epoch, acked = await self.leases.renew(call, now, self.view.call(), should_wait(self.replicas, self._wait_ms))
        self._observe(epoch, now)
        if isinstance(got, Renewed):
            self._waited(acked)
            if got.recreated:
                log.info("a lease Redis lost is re-created", extra=kv(lease=lease_id, proxy=got.proxy))
            endpoint = decide.decode(got.endpoint) or {}
            return 200, decide.renewed(lease_id, got.proxy, endpoint, got.expires, got.ttl, got.egress_ip, got.recreated)
        return decide.not_renewed(lease_id, got.kind, got.reason)

    async def release(self, raw_id: str) -> tuple[int, Any]:
        lease_id = check_lease_id(raw_id)
        return decide.released(lease_id, await self.leases.release(lease_id, self.clock()))

    async def report(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> tuple[int, Any]:
        req = parse_report(await _read_body(headers, receive))
        c = self.config
        call = ReportCall(outcome=req.outcome, lease_id=req.lease, proxy=req.proxy, target=req.target)
        got = await self.leases.report(call, self.clock(), c.cooldown_blocked, c.cooldown_errors, c.cooldown_global)
        status, body = decide.reported(got, req.outcome)
        if status == 200:
            self.series.report(req.outcome)
            if body.get("cooldown"):
                log.info("cooldown", extra=kv(proxy=body["proxy"], target=body["target"], **body["cooldown"]))
        return status, body

    async def proxies(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> tuple[int, Any]:
        filters = parse_filters(scope.get("query_string", b""))
        snap = await self.leases.snapshot()
        return 200, {"proxies": decide.listing(snap.endpoints, snap.verdicts, snap.loads, snap.cooling, filters,
                                              self.config.max_per_proxy, self.clock())}

    async def healthz(self, scope: Scope, receive: Receive, headers: dict[bytes, bytes]) -> tuple[int, Any]:
        body: dict[str, Any] = {"ok": True, "insecure": self.config.insecure}
        if self.config.insecure:
            body["warning"] = INSECURE_WARNING
        if self.view.in_grace(self.clock()):
            body["recovering"] = True
            body["graceUntil"] = decide.timestamp(self.view.grace_until)
        try:
            await self.leases.ping()
        except _Unavailable as exc:
            return 503, {**body, "ok": False, "error": f"cannot reach Redis: {type(exc).__name__}"}
        return 200, body

    async def metrics(self) -> Raw:
        try:
            gauges: tuple[int, int, int] | None = await self.leases.gauges(self.clock())
        except _Unavailable:
            gauges = None
        return Raw(self.series.render(gauges), b"text/plain; version=0.0.4; charset=utf-8")


@dataclass(frozen=True)
class Raw:
    data: bytes
    content_type: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def _result(status: int, body: Any) -> str:
    """The `result` label of a POST /v1/leases answer."""
    if status == 200:
        return "granted"
    if status == 409:
        return "none_free"
    if status == 503:
        if isinstance(body, dict) and body.get("recovering"):
            return "recovering"
        return "no_proxy" if isinstance(body, dict) and "freeAt" in body else "unavailable"
    return "unauthorized" if status == 401 else "bad_request"


def _renewal(status: int, body: Any) -> str:
    """The `result` label of a POST /v1/leases/{id}/renew answer."""
    if status == 200:
        return "recreated" if isinstance(body, dict) and body.get("recreated") else "renewed"
    if status == 410:
        return "revoked"
    if status == 409:
        return "lost"
    if status == 404:
        return "unknown" if isinstance(body, dict) and body.get("field") == "id" else "bad_request"
    if status == 503:
        return "unavailable"
    return "unauthorized" if status == 401 else "bad_request"


def _allow(method: str, want: str) -> None:
    if method != want:
        raise Answer(405, {"error": f"method {method[:20]} not allowed here; use {want}", "field": None},
                     ((b"allow", want.encode()),))


async def _read_body(headers: dict[bytes, bytes], receive: Receive) -> bytes:
    """The request body, at most MAX_BODY bytes: a larger Content-Length is refused unread (413)."""
    length = headers.get(b"content-length")
    if length is not None:
        if not length.isdigit() or len(length) > 18:
            raise Answer(400, {"error": "Content-Length must be a number", "field": "body"})
        if int(length) > MAX_BODY:
            raise Answer(413, {"error": f"the body is {int(length)} bytes; at most {MAX_BODY} are read", "field": "body"})
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Answer(400, {"error": "the client went away", "field": "body"})
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Answer(413, {"error": f"the body is over {MAX_BODY} bytes", "field": "body"})
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


async def _send(send: Send, status: int, data: bytes, content_type: bytes,
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *extra]})
    await send({"type": "http.response.body", "body": data})
