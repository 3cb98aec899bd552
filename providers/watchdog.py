"""Bounding a blocking HTTP call by its Deadline, whatever the server's pace.

urllib3's timeouts (and so the kubernetes client's `_request_timeout` and
requests' `timeout=`) apply to each socket operation: a server that sends
one byte per second never trips a read timeout, so a call against it lasts
as long as the server likes. `guard(deadline)` marks the HTTP connections
the calling thread uses (those of pools built from `WATCHED_POOL_CLASSES`);
when the deadline passes, one watchdog thread per process shuts their
sockets down, which ends the blocked read at once, and urllib3 discards the
connection. Only the guarded call's own connections are touched: other
threads sharing the pool (a create, a GC list) keep theirs.

Shared by the kubernetes and gcp providers (both talk HTTP through urllib3);
no SDK here.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from providers.base import Deadline

log = logging.getLogger("providers.watchdog")

THREAD_NAME = "deadline-watchdog"
# What a check reports when its guard fired (constant: a steady state writes nothing).
CUT_MESSAGE = "no complete answer before the deadline; the connection was closed"


class DeadlineCut(TimeoutError):
    """The deadline passed inside a guard and its connections were shut down."""


class Guard:
    """One guarded call: its deadline and the connections it used."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.fired = False  # the deadline passed while the call was still inside the guard
        self.done = False
        self._lock = threading.Lock()
        self._conns: list[Any] = []

    def add(self, conn: Any) -> None:
        with self._lock:
            fired = self.fired
            if not fired and conn not in self._conns:
                self._conns.append(conn)
        if fired:  # connected after the deadline: cut it at once
            _shutdown(conn)

    def fire(self) -> None:
        with self._lock:
            if self.done or self.fired:
                return
            self.fired = True
            conns, self._conns = self._conns, []
        for conn in conns:
            _shutdown(conn)

    def close(self) -> None:
        with self._lock:
            self.done = True
            self._conns = []


def _shutdown(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    # The plain socket's shutdown, also for a TLS socket: it wakes a read
    # blocked in another thread without touching the TLS object under it.
    with contextlib.suppress(OSError, ValueError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Watchdog:
    """One daemon thread firing guards whose deadline passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, guard: Guard) -> None:
        with self._cond:
            heapq.heappush(self._heap, (guard.deadline.at, next(self._seq), guard))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return sum(not g.done for _, _, g in self._heap)

    def _loop(self) -> None:
        while True:
            due: list[Guard] = []
            with self._cond:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                at = self._heap[0][0]
                now = time.monotonic()
                if now < at:
                    self._cond.wait(at - now)
                    continue
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
            for g in due:
                if not g.done:
                    log.debug("deadline passed: closing the connections of a call still in flight")
                    g.fire()


WATCHDOG = Watchdog()
_current: ContextVar[Guard | None] = ContextVar("providers_watchdog_guard", default=None)


@contextlib.contextmanager
def guard(deadline: Deadline) -> Iterator[Guard]:
    """Within the block, this thread's watched connections are shut down
    when `deadline` passes; `Guard.fired` tells the caller it happened.

    A block that got through anyway raises DeadlineCut on exit: http.client
    takes a status line cut short by the shutdown, and then EOF, for a
    complete answer without a body, so what the block read can't be trusted.
    """
    g = Guard(deadline)
    token = _current.set(g)
    WATCHDOG.watch(g)
    try:
        yield g
    finally:
        g.close()
        _current.reset(token)
    if g.fired:
        raise DeadlineCut("the deadline passed during the call: its connection was closed")


class _Watched:
    """Registers the connection with the calling thread's guard, if any: at
    connect (a new socket) and at each request (a pooled, reused one)."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        g = _current.get()
        if g is not None:
            g.add(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        g = _current.get()
        if g is not None:
            g.add(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


WATCHED_POOL_CLASSES = {"http": WatchedHTTPConnectionPool, "https": WatchedHTTPSConnectionPool}


def watch_pool_manager(pm: urllib3.PoolManager) -> urllib3.PoolManager:
    """Make the pools `pm` builds from now on watched ones (and drop the
    idle pools it already built, so none is left unwatched)."""
    pm.pool_classes_by_scheme = dict(WATCHED_POOL_CLASSES)
    pm.clear()
    return pm
