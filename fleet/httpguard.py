"""Limits an HTTP server needs against the clients that reach its port, as
one uvicorn protocol (`guarded(limits)`, over uvicorn's httptools protocol).

uvicorn bounds none of what a hostile client can hold: nothing times a
connection before its first request, a header is read byte by byte for as
long as it comes, httptools buffers a header of any size (the 64 KiB bound
is h11's only), and connections past `limit_concurrency` turn every request
into a 503 — so 4,100 idle sockets took the lease API down. Here, per
connection and per process (`Guard`):

| what                                   | limit (`Limits`)                  | then                              |
|----------------------------------------|-----------------------------------|-----------------------------------|
| no request in progress (first or next) | `idle_timeout`                    | closed                            |
| a request's line and headers           | `header_timeout` from its 1st byte | 408, closed                       |
| its body                               | `body_timeout` after the headers  | 408, closed                       |
| request line + header bytes            | `max_header_bytes`, counted as fed | 431, closed (never buffered past) |
| header fields                          | `max_headers`                     | 431, closed                       |
| connections from one client address    | `max_connections_per_client`      | the new one: 503, closed          |
| connections in all                     | `max_connections`                 | the longest-idle one closed (room) |
|                                        |                                   | else the new one: 503, closed     |
| an unparsable request                  | —                                 | 400, closed                       |

Every answer from this layer is JSON (`{"error": …, "field": null}`), as the
application's are. Each closed or refused connection is counted
(`proxy_operator_http_connections_closed_total{reason}`) and logged at most
once per `LOG_EVERY` seconds as one summary line, so a flood writes no flood
of log lines. The application's own time (a Redis call) is not limited here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httptools
import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from fleet.logs import kv
from fleet.serving import HTTP_CONNECTIONS, HTTP_CONNECTIONS_CLOSED

log = logging.getLogger("fleet.http")

LOG_EVERY = 10.0  # seconds between two summary lines of closed connections
TIMER_SLACK = 0.001  # a timer this close to its deadline has reached it (uvloop rounds timers to ms)

# reasons (the counter's label values, all present from the start)
IDLE, HEADER_TIMEOUT, BODY_TIMEOUT, HEADER_TOO_LARGE, TOO_MANY_HEADERS, PER_CLIENT, TOTAL, EVICTED, BAD_REQUEST = (
    "idle", "header_timeout", "body_timeout", "header_too_large", "too_many_headers", "per_client_limit",
    "connection_limit", "evicted_idle", "bad_request")
TLS_HANDSHAKE = "tls_handshake"  # the gateway's intercepted connections: a TLS handshake late, refused or cut
REASONS = (IDLE, HEADER_TIMEOUT, BODY_TIMEOUT, HEADER_TOO_LARGE, TOO_MANY_HEADERS, PER_CLIENT, TOTAL, EVICTED, BAD_REQUEST,
           TLS_HANDSHAKE)


@dataclass(frozen=True)
class Limits:
    header_timeout: float = 10.0
    idle_timeout: float = 30.0
    body_timeout: float = 30.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_connections: int = 16_384
    max_connections_per_client: int = 1024


class Connection(Protocol):
    """What `Guard` needs of a connection (`GuardedProtocol`, the gateway's connections)."""

    counted: bool
    client_host: str

    def close(self, reason: str, status: int = 0, message: str = "") -> None: ...


class Guard(Collector):
    """What the connections of one process share: counts per client address,
    the idle ones oldest first (eviction), the counters and the log's pace."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.per_client: dict[str, int] = {}
        self.open = 0
        self.idle: OrderedDict[Connection, None] = OrderedDict()
        self.closed = dict.fromkeys(REASONS, 0)
        self._unlogged = dict.fromkeys(REASONS, 0)
        self._last_log = 0.0

    def admit(self, conn: Connection) -> str | None:
        """None when `conn` may stay (and is counted), else the reason it may not."""
        host = conn.client_host
        if self.per_client.get(host, 0) >= self.limits.max_connections_per_client:
            return PER_CLIENT
        if self.open >= self.limits.max_connections:
            if not self.idle:
                return TOTAL
            oldest = next(iter(self.idle))
            self.forget(oldest)
            oldest.close(EVICTED)
        self.per_client[host] = self.per_client.get(host, 0) + 1
        self.open += 1
        return None

    async def first_byte(self, conn: Connection, reader: asyncio.StreamReader, timeout: float) -> bytes:
        """A stream connection's next first byte, waited for while it counts as idle (so the oldest idle one is
        the one evicted for room); b"" when it ended or stayed silent for `timeout` (closed as IDLE)."""
        self.idle[conn] = None
        self.idle.move_to_end(conn)
        try:
            return await asyncio.wait_for(reader.read(1), timeout)
        except TimeoutError:
            conn.close(IDLE)
            return b""
        finally:
            self.idle.pop(conn, None)

    def forget(self, conn: Connection) -> None:
        if not conn.counted:
            return
        conn.counted = False
        self.idle.pop(conn, None)
        self.open -= 1
        host = conn.client_host
        left = self.per_client.get(host, 1) - 1
        if left > 0:
            self.per_client[host] = left
        else:
            self.per_client.pop(host, None)

    def note(self, reason: str) -> None:
        self.closed[reason] += 1
        self._unlogged[reason] += 1
        now = self.clock()
        if now - self._last_log >= LOG_EVERY:
            self._last_log = now
            counts = {k: v for k, v in self._unlogged.items() if v}
            self._unlogged = dict.fromkeys(REASONS, 0)
            log.warning("closed or refused HTTP connections", extra=kv(open=self.open, **counts))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield GaugeMetricFamily(HTTP_CONNECTIONS, "Open HTTP connections of this process.", value=self.open)
        c = CounterMetricFamily(HTTP_CONNECTIONS_CLOSED, "HTTP connections this process closed or refused, by reason.",
                                labels=["reason"])
        for reason in REASONS:
            c.add_metric([reason], self.closed[reason])
        yield c


def _answer(status: int, message: str) -> bytes:
    body = orjson.dumps({"error": message, "field": None})
    return b"".join((STATUS_LINE[status], b"content-type: application/json\r\ncontent-length: ",
                     str(len(body)).encode(), b"\r\nconnection: close\r\n\r\n", body))


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the module's limits. Each stage sets
    its deadline: idle → headers → body → (the application runs, untimed) →
    idle. One timer per connection, moved only when a deadline comes before
    it: when it fires early it re-arms for the stage's deadline then. While
    idle it fires within the shortest request timeout, so the headers' and
    the body's deadlines (later than that) move no timer: a keep-alive request
    costs no timer of its own."""

    guard: Guard  # set by `guarded`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counted = False
        self.client_host = ""
        self._timer: asyncio.TimerHandle | None = None
        self._fires = 0.0  # when the timer fires (loop time)
        self._deadline = 0.0  # when the stage's time runs out (loop time; the app stage has none)
        self._stage = IDLE
        self._header_bytes = 0
        self._header_count = 0
        self._closed = False
        limits = self.guard.limits
        self._wake = min(limits.header_timeout, limits.body_timeout, limits.idle_timeout)

    # -- the connection ---------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override, unused-ignore]
        super().connection_made(transport)
        self.client_host = self.client[0] if self.client else ""
        refused = self.guard.admit(self)
        if refused is not None:
            self.close(refused, 503, "too many connections from this address" if refused == PER_CLIENT
                       else "the server holds too many connections; try again")
            return
        self.counted = True
        self._to_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.guard.forget(self)
        super().connection_lost(exc)

    def close(self, reason: str, status: int = 0, message: str = "") -> None:
        """Answer `status` (when the client is owed one) and close, counted by `reason` (once)."""
        if self._closed:
            return
        self._closed = True
        self._cancel()
        self.guard.forget(self)
        self.guard.note(reason)
        if self.transport is not None and not self.transport.is_closing():
            if status:
                self.transport.write(_answer(status, message))
            self.transport.close()

    # -- stages and their timer ---------------------------------------------------

    def _arm(self, stage: str, seconds: float) -> None:
        self._stage = stage
        now = self.loop.time()
        self._deadline = now + seconds
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        """Have the timer fire by the stage's deadline (while idle: also within `_wake`)."""
        due = min(self._deadline, now + self._wake) if self._stage == IDLE else self._deadline
        if self._timer is not None:
            if self._fires <= due:
                return
            self._timer.cancel()
        self._fires = due
        self._timer = self.loop.call_at(due, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _to_idle(self) -> None:
        self._header_bytes = self._header_count = 0
        self._arm(IDLE, self.guard.limits.idle_timeout)
        if self.counted:
            self.guard.idle[self] = None
            self.guard.idle.move_to_end(self)

    def _busy(self) -> None:
        if self.counted:
            self.guard.idle.pop(self, None)

    def _expired(self) -> None:
        self._timer = None
        if self._stage == "app":  # untimed: the next stage arms again
            return
        now = self.loop.time()
        if now < self._deadline - TIMER_SLACK:  # fired early (for an earlier stage's deadline, or while idle)
            self._schedule(now)
            return
        if self._stage == IDLE:
            self.close(IDLE)
        elif self._stage == HEADER_TIMEOUT:
            self.close(HEADER_TIMEOUT, 408, f"the request's headers took longer than {self.guard.limits.header_timeout:g} s")
        elif self._stage == BODY_TIMEOUT:
            answered = self.cycle is not None and self.cycle.response_complete  # the app answered without the body
            self.close(BODY_TIMEOUT, 0 if answered else 408, f"the request's body took longer than {self.guard.limits.body_timeout:g} s")

    # -- data -------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.parser is None or self.transport.is_closing():
            return
        if self._stage == IDLE:
            # a request begins with its first byte, whatever the parser makes of it
            self._busy()
            self._arm(HEADER_TIMEOUT, self.guard.limits.header_timeout)
        if self._stage != HEADER_TIMEOUT:
            super().data_received(data)
            return
        # feed at most what the header allowance still admits, so the parser never buffers past it
        room = self.guard.limits.max_header_bytes - self._header_bytes
        head, rest = data[:room + 1], data[room + 1:]
        self._header_bytes += len(head)
        super().data_received(head)
        if self._stage == HEADER_TIMEOUT and self._header_bytes > self.guard.limits.max_header_bytes:
            self.close(HEADER_TOO_LARGE, 431, f"the request line and headers are over {self.guard.limits.max_header_bytes} bytes")
            return
        if rest and self.parser is not None and not self.transport.is_closing():
            self.data_received(rest)

    def send_400_response(self, msg: str) -> None:  # uvicorn's is plain text and logs a WARNING each time
        self.close(BAD_REQUEST, 400, "not a valid HTTP/1.1 request")

    # -- parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._stage in (IDLE, "app"):  # pipelined behind one the application still runs: timed and bounded too
            self._busy()
            self._header_bytes = self._header_count = 0
            self._arm(HEADER_TIMEOUT, self.guard.limits.header_timeout)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.guard.limits.max_headers:
            self.close(TOO_MANY_HEADERS, 431, f"more than {self.guard.limits.max_headers} header fields")
            raise httptools.HttpParserCallbackError("too many headers")  # stops the parser
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._arm(BODY_TIMEOUT, self.guard.limits.body_timeout)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and not isinstance(cycle.transport, HeadWithBody):  # the request's own, new cycle
            _head_with_body(cycle)

    def on_message_complete(self) -> None:
        self._stage = "app"  # untimed; a timer still pending finds it so and stops
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline and self._stage == "app":
            self._to_idle()


class HeadWithBody:
    """The transport a request's response is written to: the status line and headers (uvicorn writes
    them at `http.response.start`) wait for the body's first write and go out with it, one write and
    one TCP segment for a small answer instead of two. Anything else asked of the transport (close,
    is_closing, …) sends what waits first."""

    __slots__ = ("_held", "_transport", "holding")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.holding = False
        self._held = b""

    def write(self, data: bytes) -> None:
        if self.holding:
            self._held += data
            return
        if self._held:
            data, self._held = self._held + data, b""
        self._transport.write(data)

    def flush(self) -> None:
        if self._held:
            data, self._held = self._held, b""
            self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._transport, name)


def _head_with_body(cycle: RequestResponseCycle) -> None:
    transport = HeadWithBody(cycle.transport)
    cycle.transport = transport  # type: ignore[assignment, unused-ignore]  # a Transport in what it is asked
    send = cycle.send

    async def send_head_with_body(message: Any) -> None:
        if message["type"] != "http.response.start":
            await send(message)
            return
        transport.holding = True
        try:
            await send(message)
        finally:
            transport.holding = False

    cycle.send = send_head_with_body  # type: ignore[method-assign, unused-ignore]  # run_asgi looks it up when it starts


def guarded(limits: Limits) -> tuple[type[GuardedProtocol], Guard]:
    """A protocol class for `uvicorn.Config(http=…)` and the guard its connections share."""
    guard = Guard(limits)
    return type("Guarded", (GuardedProtocol,), {"guard": guard}), guard
