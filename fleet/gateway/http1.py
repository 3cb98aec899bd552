"""The gateway's HTTP/1.1 front-end: crawlers' proxy requests in, the core's calls (`fleet.gateway.core`) and
the core's outcomes translated into HTTP answers (`refusal`). Called by `fleet.gateway.server` for each accepted
connection the guard admitted.

Per connection: the first byte of each request within the idle timeout, its head within the header timeout and
`max_header_bytes` (the StreamReader's limit: nothing is buffered past it), parsed by `decide.parse_head`. Per
request: `Proxy-Authorization: Basic` → `Core.admit`, the request target → `Core.permit`, then:

- CONNECT: `Core.open_tunnel` (a proxy leased and dialed, retried elsewhere), then `200 Connection established`
  (this front-end's reply, naming the proxy) and `Core.relay_tunnel`.
- plain HTTP: an `Expect: 100-continue` met here (a 100 once the head passed its checks; no Expect sent on), the
  request (its body, Content-Length or chunked, kept up to 64 KiB for a resend, else streamed; bounded by
  `max_body` and `body_timeout`) sent with `Connection: close` on a channel of `Core.attempts`, the final
  response head read past interim 1xx ones (and the start of its body, up to 64 KiB, when it may be a ban); a
  ban status or the ban pattern is reported `blocked` and an idempotent request goes to another proxy (the core
  decides, `Attempts.failed`); otherwise the response is relayed as framed, each read within the idle timeout (a
  body cut off or stalled closes the crawler's connection: outcome `broken`).

The crawler sees the gateway's own answer (`X-Fleet-Reason`) when a check refuses the request or the core gave
up: 502 when every attempt failed, 504 when every one timed out, 503 when no proxy could be leased.

The framing is the gateway's own (`decide.parse_head`, `request_framing`, `chunk_size`, the readers below), not
llhttp's (httptools) or h11's: llhttp refuses the request-smuggling cases too (tests/fleet/gateway/test_smuggling.py)
and parses a head faster, but it refuses what crawlers send and the gateway relays (raw UTF-8 in a request
target, extension methods), accepts request lines the gateway refuses (`HTTP/2.0`, two spaces), and, callback-
driven with no offset of where a message ended, cannot give the pull-model bounds here (a body kept or streamed
under its deadline, a response relayed byte for byte past a 64 KiB window); h11 accepts five of the ten cases
(both framings, a Content-Length list, obs-fold, a chunk size past 64 bits, a bare LF) and is slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import cast

from opentelemetry import trace

from fleet import httpguard, tracing
from fleet.gateway import decide
from fleet.gateway.clients import Client
from fleet.gateway.config import GatewayConfig
from fleet.gateway.core import (
    CHUNK,
    Attempt,
    Conn,
    Core,
    Forbidden,
    NoProxy,
    Paced,
    Refusal,
    TunnelLimit,
    Unauthorized,
    UnknownProxy,
    UntrustedOrigin,
    UpstreamFailed,
    UpstreamTimeout,
)
from fleet.gateway.decide import Head, Options, Refused, Target
from fleet.gateway.rules import Rule
from fleet.logs import kv

log = logging.getLogger("fleet.gateway")

PROXY_AUTHENTICATE = (("Proxy-Authenticate", 'Basic realm="fleet"'),)
CONTROL_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def refusal(outcome: Refusal) -> Refused:
    """The HTTP answer to one of the core's refusals: status, X-Fleet-Reason, message (and Retry-After)."""
    if isinstance(outcome, Unauthorized):
        reason = "auth-required" if outcome.missing else "bad-credentials"
        return Refused(407, reason, outcome.message, label=outcome.label)
    if isinstance(outcome, Forbidden):
        return Refused(403, "port-not-allowed", f"this client may not reach port {outcome.port}", label=outcome.label)
    if isinstance(outcome, TunnelLimit):
        if outcome.per_client:
            return Refused(503, "client-tunnel-limit", f"this client holds {outcome.limit} tunnels (its limit)",
                           label=outcome.label)
        return Refused(503, "tunnel-limit", f"the gateway holds {outcome.limit} tunnels (its limit)",
                       label=outcome.label)
    if isinstance(outcome, Paced):
        return Refused(429, "politeness", "this site's rule allows no more requests now (its concurrentPerClient "
                       "or perProxyPerSecond); try again later", retry_after=outcome.retry_after, label=outcome.label)
    if isinstance(outcome, UntrustedOrigin):
        return Refused(502, "untrusted-origin", f"the origin's certificate does not verify ({outcome.detail})",
                       label=outcome.label)
    if isinstance(outcome, UpstreamTimeout):
        return Refused(504, "upstream-timeout", f"{outcome.tries} proxies did not answer in time", label=outcome.label)
    if isinstance(outcome, UpstreamFailed):
        failures = outcome.failures
        return Refused(502, "upstream-failed", f"{len(failures)} proxies failed ({', '.join(sorted(set(failures)))})",
                       label=outcome.label)
    assert isinstance(outcome, NoProxy)
    reason, message = NO_PROXY.get(outcome.why, NO_PROXY["none"])
    return Refused(503, reason, message, retry_after=outcome.retry_after, label=outcome.label)


NO_PROXY = {"busy": ("proxies-busy", "every matching proxy is in use to capacity or cooling down for this host"),
            "grace": ("recovering", "Redis lost lease data: no new leases until the grace period ends"),
            "unavailable": ("store-unavailable", "the gateway cannot reach Redis"),
            "none": ("no-proxy", "no Running, healthy proxy matches")}


def answer(status: int, reason: str, message: str) -> bytes:
    """The gateway's own answer on a connection it closes (`Conn.close`)."""
    return decide.answer(status, reason, message)


class Http1:
    def __init__(self, core: Core, config: GatewayConfig, guard: httpguard.Guard) -> None:
        self.core = core
        self.config = config
        self.guard = guard
        self.series = core.series
        self._tracer = tracing.tracer()

    async def serve(self, conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    inside: Inside | None = None) -> None:
        """Requests on one connection until one ends it (`inside`: the connection is an intercepted tunnel)."""
        while await self._one(conn, reader, writer, inside):
            pass

    async def _one(self, conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   inside: Inside | None) -> bool:
        """One request; True when the connection stays for another."""
        head = await self._head(conn, reader, writer)
        if head is None:
            return False
        kind = "connect" if head.method == "CONNECT" else "https" if inside else "http"
        with self._tracer.start_as_current_span(f"gateway {kind}", kind=trace.SpanKind.SERVER) as span:
            client_name = "-"
            try:
                if inside is not None:  # admitted by the CONNECT; the origin is the CONNECT's
                    client, opts = inside.client, inside.options
                    target = decide.inner_target(head, inside.target)
                else:
                    client, opts, target = self._admit(head)
                client_name = client.name
                span.set_attribute("fleet.gateway.client", client.name)
                span.set_attribute("server.address", target.host)
                span.set_attribute("server.port", target.port)
                if kind == "connect" and target.host == decide.CONTROL_HOST:
                    outcome, again = await self.control_tunnel(client, opts, conn, reader, writer,
                                                               established=CONTROL_ESTABLISHED), False
                elif kind == "connect" and self.core.intercepts(client):
                    outcome, again = await self._intercept(conn, client, opts, target, reader, writer), False
                elif target.host == decide.CONTROL_HOST:
                    outcome, again = await self._control(client, opts, head, target, writer)
                else:
                    async with self.core.turn(client, target.host) as paced:  # the site's rule's concurrency
                        if paced is not None:
                            raise refusal(paced)
                        if kind == "connect":
                            outcome, again = await self._connect(client, opts, target, reader, writer), False
                        else:
                            outcome, again = await self._plain(client, opts, target, head, reader, writer, inside)
            except Refused as exc:
                outcome = exc.label or "bad_request"
                extra = PROXY_AUTHENTICATE if exc.status == 407 else ()
                # refused before its body was read (credentials, port, framing, expectation): the body must not be
                # read as the next request, so the connection closes after it
                unread = kind != "connect" and exc.status in (400, 403, 407, 417, 501) and decide.declares_body(head)
                if exc.status in (408, 413) or exc.reason == "bad-chunk" or unread:  # a body the crawler may still send
                    await _answer_and_linger(reader, writer, decide.answer(exc.status, exc.reason, exc.message, extra))
                    conn.close(httpguard.BODY_TIMEOUT if exc.status == 408 else "")
                    span.set_attribute("fleet.gateway.outcome", outcome)
                    self.series.request(client_name, kind, outcome, "http")
                    return False
                if exc.retry_after:
                    extra = (("Retry-After", str(exc.retry_after)),)
                again = exc.status in (407, 403, 503, 502, 504) and head.keep_alive() and kind != "connect"
                writer.write(decide.answer(exc.status, exc.reason, exc.message, extra, keep_alive=again))
                await writer.drain()
            span.set_attribute("fleet.gateway.outcome", outcome)
            self.series.request(client_name, kind, outcome, "http")
        return again

    async def _head(self, conn: Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Head | None:
        """The next request's head: its first byte within the idle timeout, the rest within the header timeout and
        `max_header_bytes`; None when the connection ended (a refusal already answered)."""
        c = self.config
        first = await self.guard.first_byte(conn, reader, c.idle_timeout)
        if not first:
            return None
        try:
            rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), c.header_timeout)
        except TimeoutError:
            await _refuse(conn, reader, writer, httpguard.HEADER_TIMEOUT, 408,
                          f"the request's headers took longer than {c.header_timeout:g} s")
            return None
        except asyncio.LimitOverrunError:
            await _refuse(conn, reader, writer, httpguard.HEADER_TOO_LARGE, 431,
                          f"the request line and headers are over {c.max_header_bytes} bytes")
            return None
        except asyncio.IncompleteReadError:
            return None
        try:
            return decide.parse_head(first + rest, c.max_headers)
        except Refused as exc:
            await _refuse(conn, reader, writer, httpguard.TOO_MANY_HEADERS if exc.status == 431 else httpguard.BAD_REQUEST,
                          exc.status, exc.message)
            return None

    def _admit(self, head: Head) -> tuple[Client, Options, Target]:
        """Who asks, with which options, for where: Refused 400/403/407."""
        auth = head.get("proxy-authorization")
        if len(auth) > 1:
            raise Refused(400, "bad-request", "more than one Proxy-Authorization header")
        username, password = None, ""
        if auth:
            try:
                username, password = decide.parse_basic(auth[0].encode("latin-1"))
            except ValueError as exc:
                raise refusal(Unauthorized(False, str(exc))) from None
        admitted = self.core.admit(username, password)
        if isinstance(admitted, Unauthorized):
            raise refusal(admitted)
        target = decide.target_of(head)
        if target.host == decide.CONTROL_HOST:  # the gateway's own API: no port of the client's to check
            return admitted.client, admitted.options, target
        forbidden = self.core.permit(admitted.client, target.port)
        if forbidden is not None:
            raise refusal(forbidden)
        return admitted.client, admitted.options, target

    async def _connect(self, client: Client, opts: Options, target: Target, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> str:
        got = await self.core.open_tunnel(client, opts, target)
        if not isinstance(got, Attempt):
            raise refusal(got)
        await self.core.relay_tunnel(client, target, got, reader, writer, decide.established(got.upstream.proxy),
                                     session=opts.session)
        return "ok"

    async def _intercept(self, conn: Conn, client: Client, opts: Options, target: Target,
                         reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """A CONNECT of a client that asked for interception: `200 Connection established` (no proxy yet: each
        request inside leases its own), the crawler's TLS ended here with a leaf for the CONNECT's host (the
        handshake within the header timeout), then its requests served as plain HTTP ones (`serve` with `inside`),
        each sent on the gateway's own verified TLS to the origin through a leased proxy's tunnel."""
        assert self.core.authority is not None
        # Reading stops before the 200, so the client's hello stays in the socket for the TLS layer; bytes the
        # client sent before it had the 200 would be lost to it, and the connection is refused instead.
        cast(asyncio.ReadTransport, writer.transport).pause_reading()  # the socket's transport reads too
        if getattr(reader, "_buffer", b""):
            raise Refused(400, "bad-request", "bytes after the CONNECT before its answer (send TLS after the 200)")
        context = self.core.authority.context_for(target.host)
        writer.write(decide.established(""))
        await writer.drain()
        try:
            await writer.start_tls(context, ssl_handshake_timeout=self.config.header_timeout)
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as exc:
            # a handshake late, refused (the client does not trust fleet's CA, a hello naming another host) or cut
            log.info("an intercepted connection's TLS handshake failed", extra=kv(client=client.name,
                     target=target.host, error=type(exc).__name__))
            conn.close(httpguard.TLS_HANDSHAKE)
            return httpguard.TLS_HANDSHAKE
        inside = Inside(client, opts, target)
        try:
            await self.serve(conn, reader, writer, inside)
        finally:
            await inside.drop(self.core)
        return "intercepted"

    async def _control(self, client: Client, opts: Options, head: Head, target: Target,
                       writer: asyncio.StreamWriter) -> tuple[str, bool]:
        """A request to the gateway itself (`decide.CONTROL_HOST`): a ban report, answered here, never forwarded."""
        ban = decide.parse_ban(head, target)
        got = await self.core.ban(client, opts, host=ban.host, proxy=ban.proxy)
        if isinstance(got, UnknownProxy):
            raise Refused(404, "unknown-proxy", f"no proxy {got.proxy} this client may use" if got.proxy else
                          "name the proxy (proxy=, the X-Fleet-Proxy of the tunnel's answer) or use a session",
                          label=got.label)
        if isinstance(got, NoProxy):
            raise refusal(got)
        again = head.keep_alive()
        writer.write(decide.ban_answer(got.proxy, got.host, got.until, keep_alive=again))
        await writer.drain()
        return got.label, again

    async def control_tunnel(self, client: Client, opts: Options, conn: Conn, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter, *, established: bytes) -> str:
        """`CONNECT fleet.gateway:PORT`, as clients that tunnel every proxied request send it (Node's agents,
        Playwright's request API; a SOCKS5 CONNECT too): the gateway answers it itself (`established`: the
        front-end's "tunnel open") and serves its API inside, on the CONNECT's credentials, until the client closes
        or a request is refused."""
        writer.write(established)
        await writer.drain()
        outcome = "ok"
        while (head := await self._head(conn, reader, writer)) is not None:
            try:
                target = decide.target_of(head) if head.target[:7].lower() == "http://" else \
                    Target(decide.CONTROL_HOST, 80, head.target)
                outcome, again = await self._control(client, opts, head, target, writer)
            except Refused as exc:
                writer.write(decide.answer(exc.status, exc.reason, exc.message))
                await writer.drain()
                return exc.label or "bad_request"
            if not again:
                break
        return outcome

    async def _plain(self, client: Client, opts: Options, target: Target, head: Head, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, inside: Inside | None = None) -> tuple[str, bool]:
        """One plain request (or one inside an intercepted connection, `inside`: on the gateway's TLS to the
        origin, whose connection and lease are kept for the next request when the response allows it)."""
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
        attempts = self.core.attempts(client, opts, target, tunnel=False, tls=inside is not None)
        rule = attempts.rule
        # an intercepted connection keeps its upstream for the next request, unless the site's pace must be
        # asked per request
        keeps = inside is not None and not rule.per_proxy_per_second
        sent_unkept = False
        last_ban: tuple[bytes, bytes, str] | None = None
        while True:
            held = await inside.take(self.core) if keeps and inside is not None else None
            attempt = attempts.adopt(held[0]) if held is not None else await attempts.next()
            if attempt is None:
                break
            since = held[1] if held is not None else asyncio.get_running_loop().time()
            proxy = attempt.upstream.proxy
            up_reader, up_writer = attempt.channel.reader, attempt.channel.writer
            upstream_head = decide.upstream_head(head, target, sent, absolute=attempt.channel.absolute_form,
                                                 close=not keeps, extra=attempt.channel.head_fields)
            kept = False
            try:
                if rest is None:
                    up_writer.write(upstream_head + body)
                    self.series.bytes["up"] += len(body)
                else:
                    if sent_unkept:
                        raise Refused(502, "upstream-failed", "the request body cannot be sent again",
                                      label=UpstreamFailed.label)
                    sent_unkept = True
                    up_writer.write(upstream_head)
                    await _send_body(body, rest, up_writer, sent.kind == "chunked", self.series.bytes)
                try:
                    sent_at = asyncio.get_running_loop().time()
                    raw, status, headers = await self._final_head(up_reader)
                    ttfb = asyncio.get_running_loop().time() - sent_at
                    framing_down = decide.response_framing(head.method, status, headers)
                    start = await self._body_start(up_reader, framing_down, status, rule)
                except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                    if held is not None and not sent_unkept:  # the origin closed the kept connection meanwhile
                        await attempts.forget(attempt)
                        continue
                    if await attempts.failed(attempt, decide.BROKEN, resendable):
                        continue
                    break
                if status == 407 and attempt.channel.absolute_form:
                    # the upstream proxy itself wants other credentials (it forwarded nothing): the member's fault,
                    # never the crawler's answer (it would read as the gateway asking for its own)
                    if await attempts.failed(attempt, decide.UPSTREAM_AUTH, resendable):
                        continue
                    break
                window = None
                if rule.body_pattern is not None and start.raw:
                    encodings = [v for k, v in headers if k.lower() == "content-encoding"]
                    window = decide.ban_window(start.decoded, encodings[-1] if encodings else "")
                banned = rule.is_ban(status, headers, window, ttfb) is not None
                if banned and start.complete and attempts.may_retry(decide.BANNED, resendable):
                    # kept (bounded) to be relayed when no other proxy does better
                    last_ban = (raw, start.raw, proxy)
                    await attempts.failed(attempt, decide.BANNED, resendable)
                    continue
                if banned:  # the last attempt: the cooldown is in place before the crawler has the answer
                    await attempts.blocked(attempt)
                else:
                    attempts.ok(attempt)
                again = keep_alive and framing_down.kind != "close"
                keep = keeps and again and not banned and decide.reusable(raw, headers, framing_down)

                async def done(attempt: Attempt = attempt, keep: bool = keep) -> None:
                    if not keep:  # released before the crawler has the last byte: its next request finds room
                        await attempts.release(attempt)

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
                if keep and inside is not None:
                    inside.kept = (attempt, since)
                    kept = True
                return ("banned" if banned else "ok"), again
            finally:
                if not kept:
                    attempt.channel.close()
                    await attempts.release(attempt)
        if last_ban is not None:  # every proxy tried was banned (or failed after a ban): the origin's answer
            raw, ban_body, proxy = last_ban
            writer.write(decide.client_head(raw, keep_alive, proxy) + ban_body)
            await writer.drain()
            return "banned", keep_alive
        raise refusal(attempts.outcome())

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

    async def _body_start(self, src: asyncio.StreamReader, framing: decide.Framing, status: int,
                          rule: Rule) -> BodyStart:
        """The start of a response body, read before anything is relayed when the gateway may want another proxy's
        answer instead: all of it up to BAN_WINDOW bytes when a ban status may be retried or a ban pattern is
        set (bounded), else nothing."""
        c = self.config
        start = BodyStart()
        if framing.kind == "none":
            start.complete = True
            return start
        if not rule.wants_body(status):
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


@dataclass(eq=False, slots=True)
class Inside:
    """An intercepted connection: its requests are the CONNECT client's, with its options, to the CONNECT's
    `target` (host and port); `kept`: the proxy leased and the TLS to the origin of its last request, kept for
    its next one (as a tunnel holds one proxy), with when it was leased."""

    client: Client
    options: Options
    target: Target
    kept: tuple[Attempt, float] | None = None

    async def take(self, core: Core) -> tuple[Attempt, float] | None:
        """The kept attempt (and when it was leased) while its lease is young (under half its TTL: never renewed)
        and its connection open; else None, an old one released."""
        if self.kept is None:
            return None
        attempt, since = self.kept
        self.kept = None
        fresh = asyncio.get_running_loop().time() - since < core.config.lease_ttl / 2
        if fresh and not attempt.channel.reader.at_eof() and not attempt.channel.writer.is_closing():
            return attempt, since
        attempt.channel.close()
        await core._release(attempt.lease_id)
        return None

    async def drop(self, core: Core) -> None:
        if self.kept is not None:
            attempt, _ = self.kept
            self.kept = None
            attempt.channel.close()
            await core._release(attempt.lease_id)


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


async def _read(src: asyncio.StreamReader, n: int, idle: float) -> bytes:
    """Up to `n` bytes within `idle` s (else TimeoutError): a timer on this task, not wait_for's task per read, on
    the relay's hot path."""
    async with asyncio.timeout(idle):
        return await src.read(n)


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int, counts: dict[str, int],
                direction: str, idle: float, before_last: Done | None = None) -> None:
    while n > 0:
        data = await _read(src, min(CHUNK, n), idle)
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
        while data := await _read(src, CHUNK, idle):
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


