"""The gateway's data plane: one asyncio server (uvloop when installed) speaking HTTP/1.1 to crawlers.

Per connection: the connection limits of `fleet.httpguard.Guard` (per client address, in all, the
longest-idle one evicted to make room), the first byte of each request within the idle timeout, its
head within the header timeout and `max_header_bytes` (the StreamReader's limit: nothing is buffered
past it). Per request: Basic credentials (`fleet.gateway.clients`), the username's options
(`fleet.gateway.decide`), then up to `max_attempts` proxies, each leased by the lease script
(`fleet.store.leases`: capacity, cooldowns, stickiness, the client's namespaces, the pool, the proxies already tried skipped):

- CONNECT: a TCP connection to the Squid, its CONNECT answered 200, then `200 Connection established`
  to the crawler and a relay both ways (read a chunk, write it, wait for the writer to drain: a slow
  reader stops the other side's reads, so nothing is buffered without bound). The lease lasts as long
  as the tunnel, renewed at half its TTL, released at the close; a revoked lease ends the tunnel.
- plain HTTP: an `Expect: 100-continue` met by the gateway (a 100 once the head passed its checks; no Expect
  sent on), the request (its body, Content-Length or chunked, kept up to 64 KiB for a resend, else
  streamed; bounded by `max_body` and `body_timeout`) sent with `Connection: close`, the final response
  head read past interim 1xx ones (and the start of its body, up to 64 KiB, when it may be a ban); a ban
  status or the ban pattern is reported `blocked` (the cooldown for that proxy and host) and an idempotent
  request goes to another proxy; otherwise the response is relayed as framed, each read within the idle
  timeout (a body cut off or stalled closes the crawler's connection: outcome `broken`).

A proxy that refuses, times out or answers the CONNECT with an error is reported `error` for that host
and the next one is tried; the crawler sees an error only when every attempt failed (502, or 504 when
every one timed out) or when no proxy could be leased (503), each with `X-Fleet-Reason`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry import trace

from fleet import httpguard, tracing
from fleet.gateway import decide
from fleet.gateway.clients import Client, ClientsFile
from fleet.gateway.decide import Head, Options, Refused, Target
from fleet.gateway.metrics import GatewaySeries
from fleet.logs import kv
from fleet.store import StoreError
from fleet.store.leases import (
    AsyncLeases,
    Busy,
    Grace,
    Granted,
    LeaseCall,
    NoProxy,
    RenewCall,
    Renewed,
    ReportCall,
)

log = logging.getLogger("fleet.gateway")

_Unavailable = (StoreError, OSError, asyncio.TimeoutError)
PROXY_AUTHENTICATE = (("Proxy-Authenticate", 'Basic realm="fleet"'),)
CHUNK = 64 * 1024
SWEEP_EVERY = 1.0


@dataclass(frozen=True)
class GatewayConfig:
    max_per_proxy: int = 1
    lease_ttl: float = 60.0
    session_ttl: float = 600.0
    max_attempts: int = 3
    connect_timeout: float = 5.0
    response_timeout: float = 30.0
    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    tunnel_max_duration: float = 3600.0
    max_tunnels: int = 10_000
    max_tunnels_per_client: int = 1000
    ban_statuses: frozenset[int] = frozenset(decide.DEFAULT_BAN_STATUSES)
    cooldown_blocked: float = 600.0
    cooldown_errors: int = 3
    cooldown_global: float = 300.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body: int = 10 * 1024 * 1024
    body_timeout: float = 30.0
    ban_pattern: re.Pattern[str] | None = None


class Conn:
    """One crawler connection as `httpguard.Guard` counts it."""

    def __init__(self, guard: httpguard.Guard, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self.client_host = peer[0] if peer else ""
        self.counted = False
        self.guard = guard
        self.writer = writer
        self._closed = False

    def close(self, reason: str, status: int = 0, message: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        self.guard.forget(self)
        if reason:
            self.guard.note(reason)
        if status and not self.writer.is_closing():
            self.writer.write(decide.answer(status, reason.replace("_", "-"), message))
        self.writer.close()


@dataclass(eq=False)
class Tunnel:
    client: str
    proxy: str
    target: str
    ip: str
    port: int
    lease_id: str
    started: float
    renew_at: float
    last: float
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    ended: str = ""  # why the gateway ended it (idle, max_duration, revoked)

    def end(self, why: str) -> None:
        if not self.ended:
            self.ended = why
        for w in self.writers:
            w.close()


@dataclass
class Attempted:
    """How the attempts of one request went."""

    failures: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    lease_answer: str = ""  # what the last lease call said when it granted nothing
    retry_after: int | None = None


class Gateway:
    def __init__(self, leases: AsyncLeases, clients: ClientsFile, config: GatewayConfig, guard: httpguard.Guard,
                 clock: Callable[[], float] = time.time, rand: Callable[[], float] = random.random) -> None:
        self.leases = leases
        self.clients = clients
        self.config = config
        self.guard = guard
        self.clock = clock
        self.rand = rand
        self.series = GatewaySeries()
        self.tunnels: set[Tunnel] = set()
        self.per_client: dict[str, int] = {}
        self._tracer = tracing.tracer()
        self._background: set[asyncio.Task[Any]] = set()

    # -- the connection ----------------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(self.guard, writer)
        refused = self.guard.admit(conn)
        if refused is not None:
            conn.close(refused, 503, "too many connections from this address" if refused == httpguard.PER_CLIENT
                       else "the gateway holds too many connections; try again")
            return
        conn.counted = True
        try:
            while await self._one(conn, reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except Exception:  # a bug must not end the server; the connection goes
            log.exception("the gateway failed on a connection")
        finally:
            conn.close("")
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request; True when the connection stays for another."""
        c = self.config
        self.guard.idle[conn] = None
        self.guard.idle.move_to_end(conn)
        try:
            first = await asyncio.wait_for(reader.read(1), c.idle_timeout)
        except TimeoutError:
            conn.close(httpguard.IDLE)
            return False
        finally:
            self.guard.idle.pop(conn, None)
        if not first:
            return False
        try:
            rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), c.header_timeout)
        except TimeoutError:
            await _refuse(conn, reader, writer, httpguard.HEADER_TIMEOUT, 408,
                          f"the request's headers took longer than {c.header_timeout:g} s")
            return False
        except asyncio.LimitOverrunError:
            await _refuse(conn, reader, writer, httpguard.HEADER_TOO_LARGE, 431,
                          f"the request line and headers are over {c.max_header_bytes} bytes")
            return False
        except asyncio.IncompleteReadError:
            return False
        try:
            head = decide.parse_head(first + rest, c.max_headers)
        except Refused as exc:
            await _refuse(conn, reader, writer, httpguard.TOO_MANY_HEADERS if exc.status == 431 else httpguard.BAD_REQUEST,
                          exc.status, exc.message)
            return False
        kind = "connect" if head.method == "CONNECT" else "http"
        with self._tracer.start_as_current_span(f"gateway {kind}", kind=trace.SpanKind.SERVER) as span:
            client_name = "-"
            try:
                client, opts, target = self._admit(head)
                client_name = client.name
                span.set_attribute("fleet.gateway.client", client.name)
                span.set_attribute("server.address", target.host)
                span.set_attribute("server.port", target.port)
                if kind == "connect":
                    outcome = await self._connect(client, opts, target, reader, writer)
                    again = False
                else:
                    outcome, again = await self._plain(client, opts, target, head, reader, writer)
            except Refused as exc:
                outcome = _outcome_of(exc)
                extra = PROXY_AUTHENTICATE if exc.status == 407 else ()
                # refused before its body was read (credentials, port, framing, expectation): the body must not be
                # read as the next request, so the connection closes after it
                unread = kind == "http" and exc.status in (400, 403, 407, 417, 501) and decide.declares_body(head)
                if exc.status in (408, 413) or exc.reason == "bad-chunk" or unread:  # a body the crawler may still send
                    await _answer_and_linger(reader, writer, decide.answer(exc.status, exc.reason, exc.message, extra))
                    conn.close(httpguard.BODY_TIMEOUT if exc.status == 408 else "")
                    span.set_attribute("fleet.gateway.outcome", outcome)
                    self.series.request(client_name, kind, outcome)
                    return False
                if exc.status == 503 and exc.reason == "proxies-busy" and getattr(exc, "retry_after", None):
                    extra = (("Retry-After", str(exc.retry_after)),)  # type: ignore[attr-defined]
                again = exc.status in (407, 403, 503, 502, 504) and head.keep_alive() and kind == "http"
                writer.write(decide.answer(exc.status, exc.reason, exc.message, extra, keep_alive=again))
                await writer.drain()
            span.set_attribute("fleet.gateway.outcome", outcome)
            self.series.request(client_name, kind, outcome)
        return again

    def _admit(self, head: Head) -> tuple[Client, Options, Target]:
        """Who asks, with which options, for where: Refused 400/403/407."""
        auth = head.get("proxy-authorization")
        if len(auth) > 1:
            raise Refused(400, "bad-request", "more than one Proxy-Authorization header")
        if not auth:
            raise Refused(407, "auth-required", "proxy credentials are required (username CLIENT[-session-ID]..., "
                                                "password: the client's token)")
        try:
            user, password = decide.parse_basic(auth[0].encode("latin-1"))
            opts = decide.parse_username(user)
        except ValueError as exc:
            raise Refused(407, "bad-credentials", str(exc)) from None
        client = self.clients.check(opts.client, password)
        if client is None:
            raise Refused(407, "bad-credentials", "unknown client or wrong token")
        target = decide.target_of(head)
        if not decide.port_allowed(target.port, client.ports):
            raise Refused(403, "port-not-allowed", f"this client may not reach port {target.port}")
        return client, opts, target

    # -- leasing ------------------------------------------------------------------------------------

    def _sticky(self, client: Client, opts: Options) -> str:
        return f"gw/{client.name}/{opts.session}" if opts.session else ""

    async def _lease(self, client: Client, opts: Options, target: Target, tried: Attempted) -> tuple[str, str, int, str] | None:
        """(lease id, proxy, ip, port) of a leasable proxy not tried yet, or None (tried.lease_answer says why)."""
        c = self.config
        now = self.clock()
        lease_id = uuid.uuid4().hex
        call = LeaseCall(lease_id=lease_id, target=target.host, expires=now + c.lease_ttl, max_per_proxy=c.max_per_proxy,
                         sticky=self._sticky(client, opts), sticky_ttl=c.session_ttl, provider=opts.provider,
                         region=opts.region, zone=opts.zone, ttl=c.lease_ttl, namespaces=client.namespaces or (),
                         skip=tuple(tried.skip), pool=opts.pool)
        try:
            got, _, _ = await self.leases.lease(call, now, self.rand())
        except _Unavailable as exc:
            log.warning("Redis does not answer", extra=kv(error=type(exc).__name__))
            tried.lease_answer = "unavailable"
            return None
        if isinstance(got, Granted):
            ep = _decode(got.endpoint)
            ip, port = ep.get("ip"), ep.get("port")
            if not isinstance(ip, str) or not isinstance(port, int):
                tried.skip.append(got.proxy)
                self._spawn(self._release(lease_id))
                tried.lease_answer = "none"
                return None
            return lease_id, got.proxy, port, ip
        if isinstance(got, Busy):
            tried.lease_answer = "busy"
            tried.retry_after = max(1, int(got.free_at - now + 0.999))
        elif isinstance(got, Grace):
            tried.lease_answer = "grace"
        else:
            assert isinstance(got, NoProxy)
            tried.lease_answer = "none"
        return None

    async def _release(self, lease_id: str) -> None:
        with contextlib.suppress(*_Unavailable):
            await self.leases.release(lease_id, self.clock())

    async def _report(self, proxy: str, host: str, outcome: str) -> None:
        c = self.config
        try:
            got = await self.leases.report(ReportCall(outcome=outcome, proxy=proxy, target=host), self.clock(),
                                           c.cooldown_blocked, c.cooldown_errors, c.cooldown_global)
        except _Unavailable:
            return
        if got and got[0] == "cooldown":
            log.info("cooldown", extra=kv(proxy=got[1], target=got[2], scope=got[3]))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _failed(self, tried: Attempted, proxy: str, host: str, lease_id: str, failure: str) -> None:
        """Report and release before the next attempt (a failing path: one round trip more), so the crawler's next
        request already finds the cooldown."""
        tried.failures.append(failure)
        tried.skip.append(proxy)
        await asyncio.gather(self._report(proxy, host, decide.REPORT_OF[failure]), self._release(lease_id))

    def _give_up(self, tried: Attempted) -> Refused:
        status, reason, message = decide.give_up(tried.failures, tried.lease_answer)
        exc = Refused(status, reason, message)
        exc.retry_after = tried.retry_after  # type: ignore[attr-defined]
        return exc

    async def _open(self, ip: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        try:
            return await asyncio.wait_for(asyncio.open_connection(ip, port, limit=self.config.max_header_bytes),
                                          self.config.connect_timeout)
        except TimeoutError:
            return decide.TIMEOUT
        except OSError:
            return decide.REFUSED

    # -- CONNECT ------------------------------------------------------------------------------------

    async def _connect(self, client: Client, opts: Options, target: Target, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> str:
        c = self.config
        most = client.max_tunnels or c.max_tunnels_per_client
        if self.per_client.get(client.name, 0) >= most:
            raise Refused(503, "client-tunnel-limit", f"this client holds {most} tunnels (its limit)")
        if len(self.tunnels) >= c.max_tunnels:
            raise Refused(503, "tunnel-limit", f"the gateway holds {c.max_tunnels} tunnels (its limit)")
        tried = Attempted()
        hostport = target.authority
        request = f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode()
        for attempt in range(1, c.max_attempts + 1):
            got = await self._lease(client, opts, target, tried)
            if got is None:
                break
            lease_id, proxy, port, ip = got
            opened = await self._open(ip, port)
            failure = ""
            if isinstance(opened, str):
                failure = opened
            else:
                up_reader, up_writer = opened
                up_writer.write(request)
                try:
                    raw = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), c.connect_timeout)
                    status, _ = decide.parse_status(raw)
                    if status != 200:
                        failure = decide.CONNECT_ERROR
                except TimeoutError:
                    failure = decide.TIMEOUT
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                    failure = decide.CONNECT_ERROR
                if failure:
                    up_writer.close()
            if failure:
                await self._failed(tried, proxy, target.host, lease_id, failure)
                if decide.retry(failure, attempt, c.max_attempts, True):
                    self.series.retry(failure)
                    continue
                break
            self._spawn(self._report(proxy, target.host, "ok"))
            await self._tunnel(client, proxy, target, ip, port, lease_id, reader, writer, up_reader, up_writer)
            return "ok"
        raise self._give_up(tried)

    async def _tunnel(self, client: Client, proxy: str, target: Target, ip: str, port: int, lease_id: str,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                      up_writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        tunnel = Tunnel(client.name, proxy, target.host, ip, port, lease_id, now, now + self.config.lease_ttl / 2, now,
                        (writer, up_writer))
        self.tunnels.add(tunnel)
        self.per_client[client.name] = self.per_client.get(client.name, 0) + 1
        self.series.tunnels_open = len(self.tunnels)
        try:
            writer.write(decide.established(proxy))
            await writer.drain()
            await asyncio.gather(self._pump(reader, up_writer, tunnel, "up"), self._pump(up_reader, writer, tunnel, "down"))
        finally:
            self.tunnels.discard(tunnel)
            left = self.per_client.get(client.name, 1) - 1
            if left > 0:
                self.per_client[client.name] = left
            else:
                self.per_client.pop(client.name, None)
            self.series.tunnels_open = len(self.tunnels)
            self.series.tunnel_closed(loop.time() - tunnel.started)
            up_writer.close()
            writer.close()
            await self._release(lease_id)
            if tunnel.ended:
                log.debug("tunnel ended by the gateway", extra=kv(client=client.name, proxy=proxy, why=tunnel.ended))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, tunnel: Tunnel, direction: str) -> None:
        loop = asyncio.get_running_loop()
        counts = self.series.bytes
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    break
                dst.write(data)
                counts[direction] += len(data)
                tunnel.last = loop.time()
                await dst.drain()
            if dst.can_write_eof() and not dst.is_closing():
                dst.write_eof()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            tunnel.end("broken")
        except asyncio.CancelledError:
            tunnel.end("cancelled")
            raise

    # -- plain HTTP -----------------------------------------------------------------------------------

    async def _plain(self, client: Client, opts: Options, target: Target, head: Head, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> tuple[str, bool]:
        c = self.config
        framing = decide.request_framing(head, c.max_body)
        if decide.expects_continue(head, framing):  # the head passed every check: the crawler may send its body
            writer.write(decide.CONTINUE)
            await writer.drain()
        deadline = asyncio.get_running_loop().time() + c.body_timeout
        body = b""  # the body when kept (all of it, at most RETRY_BODY_MAX), else its start
        rest: AsyncIterator[bytes] | None = None  # the body still to read from the crawler, when not kept
        sent = framing
        if framing.kind == "length" and framing.length <= decide.RETRY_BODY_MAX:
            body = await _within(reader.readexactly(framing.length), deadline, c.body_timeout)
        elif framing.kind == "length":
            rest = _length_body(reader, framing.length, deadline, c.body_timeout)
        elif framing.kind == "chunked":
            pieces = _chunked_body(reader, deadline, c.body_timeout, c.max_body)
            got: list[bytes] = []
            size = 0
            while size <= decide.RETRY_BODY_MAX:
                try:
                    piece = await pieces.__anext__()
                except StopAsyncIteration:
                    break
                got.append(piece)
                size += len(piece)
            else:
                rest = pieces  # over the bound: sent on as chunks while it comes
            body = b"".join(got)
            sent = decide.Framing("chunked") if rest is not None else decide.Framing("length", len(body))
        kept = rest is None
        resendable = decide.may_resend(head.method, kept)
        keep_alive = head.keep_alive()
        upstream_head = decide.upstream_head(head, target, sent)
        tried = Attempted()
        sent_unkept = False
        last_ban: tuple[bytes, bytes, str] | None = None
        for attempt in range(1, c.max_attempts + 1):
            got_lease = await self._lease(client, opts, target, tried)
            if got_lease is None:
                break
            lease_id, proxy, port, ip = got_lease
            released = False
            try:
                opened = await self._open(ip, port)
                if isinstance(opened, str):
                    released = True
                    await self._failed(tried, proxy, target.host, lease_id, opened)
                    if decide.retry(opened, attempt, c.max_attempts, True):
                        self.series.retry(opened)
                        continue
                    break
                up_reader, up_writer = opened
                try:
                    if rest is None:
                        up_writer.write(upstream_head + body)
                        self.series.bytes["up"] += len(body)
                    else:
                        if sent_unkept:
                            raise Refused(502, "upstream-failed", "the request body cannot be sent again")
                        sent_unkept = True
                        up_writer.write(upstream_head)
                        await _send_body(body, rest, up_writer, sent.kind == "chunked", self.series.bytes)
                    try:
                        raw, status, headers = await self._final_head(up_reader)
                        framing_down = decide.response_framing(head.method, status, headers)
                        start = await self._body_start(up_reader, framing_down, status)
                    except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                        released = True
                        await self._failed(tried, proxy, target.host, lease_id, decide.BROKEN)
                        if decide.retry(decide.BROKEN, attempt, c.max_attempts, resendable):
                            self.series.retry(decide.BROKEN)
                            continue
                        break
                    window = None
                    if c.ban_pattern is not None and start.raw:
                        encodings = [v for k, v in headers if k.lower() == "content-encoding"]
                        window = decide.ban_window(start.decoded, encodings[-1] if encodings else "")
                    banned = decide.is_ban(status, c.ban_statuses, c.ban_pattern, window)
                    if banned and start.complete and decide.retry(decide.BANNED, attempt, c.max_attempts, resendable):
                        # kept (bounded) to be relayed when no other proxy does better
                        last_ban = (raw, start.raw, proxy)
                        released = True
                        await self._failed(tried, proxy, target.host, lease_id, decide.BANNED)
                        self.series.retry(decide.BANNED)
                        continue
                    if banned:  # the last attempt: the cooldown is in place before the crawler has the answer
                        await self._report(proxy, target.host, "blocked")
                    else:
                        self._spawn(self._report(proxy, target.host, "ok"))
                    again = keep_alive and framing_down.kind != "close"

                    async def done(lease_id: str = lease_id) -> None:  # before the crawler has the last byte: its next request finds room
                        nonlocal released
                        if not released:
                            released = True
                            await self._release(lease_id)

                    if start.complete:
                        await done()
                    writer.write(decide.client_head(raw, again, proxy) + start.raw)
                    self.series.bytes["down"] += len(raw) + len(start.raw)
                    try:
                        if not start.complete:
                            await _relay_body(up_reader, writer, framing_down, self.series.bytes, done, c.idle_timeout,
                                              start)
                        await writer.drain()
                    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                        # cut off, stalled past the idle timeout, or malformed (or the crawler went): the crawler's
                        # connection closes, so it sees the response end short (a chunked one without its last chunk)
                        log.info("a response broke off mid-body", extra=kv(proxy=proxy, error=type(exc).__name__))
                        return "broken", False
                    return ("banned" if banned else "ok"), again
                finally:
                    up_writer.close()
            finally:
                if not released:
                    await self._release(lease_id)
        if last_ban is not None:  # every proxy tried was banned (or failed after a ban): the origin's answer
            raw, ban_body, proxy = last_ban
            writer.write(decide.client_head(raw, keep_alive, proxy) + ban_body)
            await writer.drain()
            return "banned", keep_alive
        raise self._give_up(tried)

    async def _final_head(self, src: asyncio.StreamReader) -> tuple[bytes, int, list[tuple[str, str]]]:
        """The final response head (raw, status, headers) within the response timeout, past interim 1xx ones (read and
        dropped, at most MAX_INTERIM); ValueError for a 101 or too many 1xx, TimeoutError when late."""
        c = self.config
        deadline = asyncio.get_running_loop().time() + c.response_timeout
        for _ in range(decide.MAX_INTERIM + 1):
            raw = await _within(src.readuntil(b"\r\n\r\n"), deadline, c.response_timeout, upstream=True)
            status, headers = decide.parse_status(raw)
            if not decide.interim(status):
                return raw, status, headers
        raise ValueError(f"more than {decide.MAX_INTERIM} interim responses")

    async def _body_start(self, src: asyncio.StreamReader, framing: decide.Framing, status: int) -> BodyStart:
        """The start of a response body, read before anything is relayed when the gateway may want another proxy's
        answer instead: all of it up to BAN_WINDOW bytes when a ban status may be retried or a ban pattern is
        set (bounded), else nothing."""
        c = self.config
        start = BodyStart()
        if framing.kind == "none":
            start.complete = True
            return start
        if c.ban_pattern is None and status not in c.ban_statuses:
            return start
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.response_timeout
        limit = decide.BAN_WINDOW
        if framing.kind == "length":
            n = min(framing.length, limit)
            start.raw = start.decoded = await _within(src.readexactly(n), deadline, c.response_timeout, upstream=True)
            start.consumed = n
            start.complete = n == framing.length
        elif framing.kind == "close":
            parts = []
            size = 0
            while size < limit:
                data = await _within(src.read(limit - size), deadline, c.response_timeout, upstream=True)
                if not data:
                    start.complete = True
                    break
                parts.append(data)
                size += len(data)
            start.raw = start.decoded = b"".join(parts)
        else:  # chunked: whole chunks (the last one perhaps in part) up to the bound
            raw: list[bytes] = []
            decoded: list[bytes] = []
            size = 0
            while size < limit:
                line = await _within(src.readuntil(b"\r\n"), deadline, c.response_timeout, upstream=True)
                raw.append(line)
                size += len(line)
                n = decide.chunk_size(line)
                if n == 0:
                    while True:
                        trailer = await _within(src.readuntil(b"\r\n"), deadline, c.response_timeout, upstream=True)
                        raw.append(trailer)
                        if trailer == b"\r\n":
                            break
                    start.complete = True
                    break
                take = min(n, max(1, limit - size))
                data = await _within(src.readexactly(take), deadline, c.response_timeout, upstream=True)
                raw.append(data)
                decoded.append(data)
                size += take
                if take < n:
                    start.pending = n - take + 2  # the rest of this chunk and its CRLF
                    break
                tail = await _within(src.readexactly(2), deadline, c.response_timeout, upstream=True)
                if tail != b"\r\n":
                    raise ValueError("a chunk without its CRLF")
                raw.append(tail)
                size += 2
            start.raw, start.decoded = b"".join(raw), b"".join(decoded)
        return start


@dataclass
class BodyStart:
    """What of a response body was read before relaying: `raw` as framed (relayed as is), `decoded` (without the
    chunked framing), `complete` when it is all of it; `consumed`: body bytes of a Content-Length body read,
    `pending`: bytes of the current chunk (and its CRLF) still to come."""

    raw: bytes = b""
    decoded: bytes = b""
    complete: bool = False
    consumed: int = 0
    pending: int = 0


async def _within(aw: Awaitable[bytes], deadline: float, timeout: float, upstream: bool = False) -> bytes:
    """`aw` by the loop-time `deadline`: a crawler's body late is Refused 408; a proxy's answer late, TimeoutError."""
    left = deadline - asyncio.get_running_loop().time()
    try:
        if left <= 0:
            if isinstance(aw, Coroutine):
                aw.close()
            raise TimeoutError
        return await asyncio.wait_for(aw, left)
    except TimeoutError:
        if upstream:
            raise
        raise Refused(408, "body-timeout", f"the request body did not arrive within {timeout:g} s") from None


async def _length_body(reader: asyncio.StreamReader, n: int, deadline: float, timeout: float) -> AsyncIterator[bytes]:
    while n > 0:
        data = await _within(reader.read(min(CHUNK, n)), deadline, timeout)
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(data)
        yield data


async def _chunked_body(reader: asyncio.StreamReader, deadline: float, timeout: float,
                        max_body: int) -> AsyncIterator[bytes]:
    """The data of a chunked request body; Refused 400 (malformed), 408 (not ended by the deadline), 413 (over
    `max_body` bytes of data). Chunk extensions and trailers are dropped."""
    total = 0
    while True:
        try:
            line = await _within(reader.readuntil(b"\r\n"), deadline, timeout)
        except asyncio.LimitOverrunError:
            raise Refused(400, "bad-chunk", "a chunk-size line over 64 KiB") from None
        try:
            size = decide.chunk_size(line)
        except ValueError as exc:
            raise Refused(400, "bad-chunk", str(exc)) from None
        if size == 0:
            for _ in range(decide.MAX_TRAILERS + 1):
                try:
                    trailer = await _within(reader.readuntil(b"\r\n"), deadline, timeout)
                except asyncio.LimitOverrunError:
                    raise Refused(400, "bad-chunk", "a trailer line over 64 KiB") from None
                if trailer == b"\r\n":
                    return
            raise Refused(400, "bad-chunk", f"more than {decide.MAX_TRAILERS} trailer fields")
        total += size
        if total > max_body:
            raise Refused(413, "body-too-large", f"the request body is over {max_body} bytes")
        left = size
        while left:
            data = await _within(reader.read(min(CHUNK, left)), deadline, timeout)
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            yield data
        if await _within(reader.readexactly(2), deadline, timeout) != b"\r\n":
            raise Refused(400, "bad-chunk", "a chunk's data is not followed by CRLF")


async def _send_body(start: bytes, rest: AsyncIterator[bytes], dst: asyncio.StreamWriter, chunked: bool,
                     counts: dict[str, int]) -> None:
    """A body the gateway does not keep: its start, then the rest while it comes (each piece drained before the
    next is read), as chunks when `chunked`."""
    async def pieces() -> AsyncIterator[bytes]:
        if start:
            yield start
        async for piece in rest:
            yield piece

    async for piece in pieces():
        dst.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
        counts["up"] += len(piece)
        await dst.drain()
    if chunked:
        dst.write(b"0\r\n\r\n")
        await dst.drain()


LINGER_SECONDS, LINGER_BYTES = 2.0, 1024 * 1024


async def _refuse(conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str, status: int,
                  message: str) -> None:
    await _answer_and_linger(reader, writer, decide.answer(status, reason.replace("_", "-"), message))
    conn.close(reason)


async def _answer_and_linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes) -> None:
    """Answer and close without losing the answer: the client may still be sending (a header of a megabyte, a
    body), and closing a socket with unread data resets it, which can discard the answer on the way. So the
    answer goes first, then our side shuts, then up to LINGER_BYTES of what still comes are read and dropped for
    at most LINGER_SECONDS."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(Exception):
        writer.write(answer)
        await asyncio.wait_for(writer.drain(), LINGER_SECONDS)
        if writer.can_write_eof():
            writer.write_eof()
        end, dropped = loop.time() + LINGER_SECONDS, 0
        while dropped < LINGER_BYTES and loop.time() < end:
            data = await asyncio.wait_for(reader.read(CHUNK), max(0.01, end - loop.time()))
            if not data:
                break
            dropped += len(data)


Done = Callable[[], Awaitable[None]]


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int, counts: dict[str, int],
                direction: str, idle: float, before_last: Done | None = None) -> None:
    while n > 0:
        data = await asyncio.wait_for(src.read(min(CHUNK, n)), idle)
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(data)
        if n == 0 and before_last is not None:
            await before_last()
        dst.write(data)
        counts[direction] += len(data)
        await dst.drain()


async def _relay_body(src: asyncio.StreamReader, dst: asyncio.StreamWriter, framing: decide.Framing,
                      counts: dict[str, int], done: Done, idle: float, start: BodyStart | None = None) -> None:
    """The response body as framed, after what `start` read of it; `done` is awaited once the proxy has sent all
    of it, before the crawler has its last bytes (close-delimited: the crawler's end is our close, after this
    returns). Each read waits at most `idle` seconds (TimeoutError); a proxy's close before the end is
    IncompleteReadError."""
    start = start or BodyStart()
    if framing.kind == "length":
        left = framing.length - start.consumed
        if left == 0:
            await done()
        await _copy(src, dst, left, counts, "down", idle, done)
    elif framing.kind == "close":
        while data := await asyncio.wait_for(src.read(CHUNK), idle):
            dst.write(data)
            counts["down"] += len(data)
            await dst.drain()
    elif framing.kind == "chunked":
        if start.pending:
            await _copy(src, dst, start.pending, counts, "down", idle)
        while True:
            line = await asyncio.wait_for(src.readuntil(b"\r\n"), idle)
            dst.write(line)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ConnectionError("a malformed chunk size from the proxy") from None
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = await asyncio.wait_for(src.readuntil(b"\r\n"), idle)
                    if trailer == b"\r\n":
                        await done()
                    dst.write(trailer)
                    if trailer == b"\r\n":
                        return
            await _copy(src, dst, size + 2, counts, "down", idle)


def _decode(raw: bytes | str) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _outcome_of(exc: Refused) -> str:
    return {407: "unauthorized", 403: "forbidden", 502: "upstream_failed", 504: "upstream_timeout"}.get(exc.status) or (
        {"proxies-busy": "busy", "no-proxy": "no_proxy", "recovering": "no_proxy", "store-unavailable": "unavailable",
         "tunnel-limit": "limited", "client-tunnel-limit": "limited"}.get(exc.reason, "bad_request"))


# -- the sweeper: idle and too-long tunnels, renewals -------------------------------------------------

async def sweep(gw: Gateway) -> None:
    c = gw.config
    loop = asyncio.get_running_loop()
    every = sweep_every(c.lease_ttl)
    while True:
        await asyncio.sleep(every)
        now = loop.time()
        for t in list(gw.tunnels):
            if now - t.last > c.idle_timeout:
                t.end("idle")
            elif now - t.started > c.tunnel_max_duration:
                t.end("max_duration")
            elif now >= t.renew_at:
                t.renew_at = now + c.lease_ttl / 2
                gw._spawn(_renew(gw, t))


def sweep_every(lease_ttl: float) -> float:
    """A renewal falls due at half the TTL and is seen at the next tick: ticks of a quarter TTL or less leave the
    renewal a quarter TTL to reach Redis before the lease runs out (at a 2 s TTL a 1 s tick saw it at 2 s)."""
    return min(SWEEP_EVERY, lease_ttl / 4)


async def _renew(gw: Gateway, t: Tunnel) -> None:
    c = gw.config
    call = RenewCall(lease_id=t.lease_id, ttl=c.lease_ttl, default_ttl=c.lease_ttl, max_per_proxy=c.max_per_proxy,
                     proxy=t.proxy, target=t.target, ip=t.ip, port=t.port, sticky_keep=c.session_ttl)
    try:
        got, _, _ = await gw.leases.renew(call, gw.clock())
    except _Unavailable:
        t.renew_at = asyncio.get_running_loop().time() + 5  # the lease runs on; again soon
        return
    if not isinstance(got, Renewed):
        log.info("a tunnel's lease is not renewed: the tunnel ends", extra=kv(proxy=t.proxy, kind=got.kind,
                                                                              reason=got.reason))
        t.end("revoked")
