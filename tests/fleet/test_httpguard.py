"""fleet.httpguard's shared state without a server: admission per address and
in all, eviction of the longest-idle connection, one log line per interval;
and its deadlines on a real uvicorn server (uvloop, as `fleet api` serves):
each stage's time runs out when it should, whatever the one timer of the
connection was last set for."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import pytest

from fleet import httpguard
from fleet.httpguard import Guard, Limits


class Conn:
    """What the guard reads and calls on a connection."""

    def __init__(self, host: str) -> None:
        self.client_host, self.counted, self.closed = host, False, ""

    def close(self, reason: str) -> None:
        self.closed = reason


def admitted(guard: Guard, host: str) -> Conn | str:
    c = Conn(host)
    why = guard.admit(c)  # type: ignore[arg-type]
    if why is None:
        c.counted = True
        return c
    return why


def test_one_address_is_capped_others_are_not():
    g = Guard(Limits(max_connections=100, max_connections_per_client=2))
    assert isinstance(admitted(g, "10.0.0.1"), Conn) and isinstance(admitted(g, "10.0.0.1"), Conn)
    assert admitted(g, "10.0.0.1") == httpguard.PER_CLIENT
    assert isinstance(admitted(g, "10.0.0.2"), Conn) and g.open == 3


def test_at_the_limit_the_longest_idle_makes_room_and_busy_ones_are_kept():
    g = Guard(Limits(max_connections=16, max_connections_per_client=16))
    conns = [admitted(g, "10.0.0.1") for _ in range(16)]
    busy, oldest_idle, newer_idle = conns[0], conns[1], conns[2]
    g.idle[oldest_idle] = None  # type: ignore[index]
    g.idle[newer_idle] = None  # type: ignore[index]
    assert isinstance(admitted(g, "10.0.0.9"), Conn)
    assert oldest_idle.closed == httpguard.EVICTED and newer_idle.closed == "" and busy.closed == ""
    assert g.open == 16 and g.per_client == {"10.0.0.1": 15, "10.0.0.9": 1}
    g.idle.clear()
    assert admitted(g, "10.0.0.9") == httpguard.TOTAL  # nothing idle to close: the new one is refused


def test_forgetting_twice_counts_once():
    g = Guard(Limits())
    c = admitted(g, "10.0.0.1")
    g.forget(c)  # type: ignore[arg-type]
    g.forget(c)  # type: ignore[arg-type]
    assert g.open == 0 and g.per_client == {}


def test_closed_connections_are_counted_each_and_logged_once_per_interval(caplog):
    t = [1000.0]
    g = Guard(Limits(), clock=lambda: t[0])
    with caplog.at_level(logging.WARNING, logger="fleet.http"):
        for _ in range(500):
            g.note(httpguard.HEADER_TIMEOUT)
        t[0] += httpguard.LOG_EVERY
        g.note(httpguard.IDLE)
    assert g.closed[httpguard.HEADER_TIMEOUT] == 500 and len(caplog.records) == 2
    samples = {(s.name, tuple(s.labels.items())): s.value for m in g.collect() for s in m.samples}
    assert samples[(httpguard.HTTP_CONNECTIONS_CLOSED, (("reason", "header_timeout"),))] == 500
    assert samples[(httpguard.HTTP_CONNECTIONS_CLOSED, (("reason", "evicted_idle"),))] == 0  # every reason from the start


# -- deadlines, as served ------------------------------------------------------------------------

HEADER_S, BODY_S, IDLE_S = 0.4, 0.6, 1.2


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


WRITES: list[int] = []  # transport writes per answered request


class Counted:
    """The connection's transport, counting writes (per answer, until the next request's first byte)."""

    def __init__(self, transport) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        WRITES[-1] += 1
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


@pytest.fixture(scope="module")
def served():
    import uvicorn

    guarded, _ = httpguard.guarded(Limits(header_timeout=HEADER_S, body_timeout=BODY_S, idle_timeout=IDLE_S))

    class Protocol(guarded):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:
            super().connection_made(Counted(transport))

        def on_message_begin(self) -> None:
            WRITES.append(0)
            super().on_message_begin()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_app, host="127.0.0.1", port=port, loop="uvloop", http=Protocol,
                                           lifespan="off", access_log=False, log_config=None,
                                           timeout_keep_alive=int(IDLE_S) + 5))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield port
    server.should_exit = True
    thread.join(10)


REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def _ended(s: socket.socket, start: float, limit: float = 5.0) -> tuple[float, bytes]:
    """Seconds from `start` until the server closed `s`, and what it sent meanwhile."""
    s.settimeout(limit)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            data += chunk
    return time.monotonic() - start, data


def _answered(s: socket.socket) -> None:
    s.sendall(REQUEST)
    data = b""
    while not data.endswith(b"ok"):
        chunk = s.recv(65536)
        assert chunk, "closed before the answer"
        data += chunk
    assert data.startswith(b"HTTP/1.1 200")


def _conn(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_connection_that_sends_nothing_is_closed_at_the_idle_deadline_not_before(served):
    with _conn(served) as s:
        took, data = _ended(s, time.monotonic())
    assert data == b"" and IDLE_S - 0.05 <= took < IDLE_S + 0.5, took


def test_after_an_answer_the_idle_deadline_starts_again(served):
    with _conn(served) as s:
        _answered(s)
        start = time.monotonic()
        took, data = _ended(s, start)
    assert data == b"" and IDLE_S - 0.05 <= took < IDLE_S + 0.5, took


def test_requests_that_keep_coming_keep_the_connection_past_the_idle_time(served):
    with _conn(served) as s:
        start = time.monotonic()
        while time.monotonic() - start < 2 * IDLE_S:  # each request within the idle time of the last
            _answered(s)
            time.sleep(IDLE_S / 4)
        _answered(s)


@pytest.mark.parametrize("idle_first", [0.0, 0.3, 0.9])  # the header deadline comes before, at or after a wake
def test_headers_that_do_not_finish_get_408_at_the_header_deadline(served, idle_first):
    with _conn(served) as s:
        time.sleep(idle_first)
        start = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        took, data = _ended(s, start)
    assert data.startswith(b"HTTP/1.1 408") and b"headers" in data
    assert HEADER_S - 0.05 <= took < HEADER_S + 0.5, took


def test_a_body_that_does_not_come_gets_408_at_the_body_deadline_after_a_kept_alive_request(served):
    with _conn(served) as s:
        _answered(s)
        time.sleep(0.2)
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        start = time.monotonic()
        took, data = _ended(s, start)
    assert data.startswith(b"HTTP/1.1 408") and b"body" in data
    assert BODY_S - 0.05 <= took < BODY_S + 0.5, took


def test_an_answer_goes_out_in_one_write_head_with_body(served):
    WRITES.clear()
    with _conn(served) as s:
        for _ in range(5):
            _answered(s)
    assert WRITES == [1] * 5  # each answer: its status line, headers and body in one transport write


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True


def test_the_held_head_goes_before_anything_else_asked_of_the_transport():
    t = Recorder()
    shim = httpguard.HeadWithBody(t)  # type: ignore[arg-type]
    shim.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # not holding: at once
    shim.holding = True
    shim.write(b"HTTP/1.1 200 OK\r\n")
    shim.write(b"content-length: 2\r\n\r\n")
    shim.holding = False
    assert t.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    shim.write(b"ok")
    assert t.writes[1:] == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    shim.holding = True
    shim.write(b"HTTP/1.1 500 x\r\n\r\n")
    shim.holding = False
    shim.close()  # an answer cut short: its head still goes out, then the close
    assert t.writes[2:] == [b"HTTP/1.1 500 x\r\n\r\n"] and t.closed
