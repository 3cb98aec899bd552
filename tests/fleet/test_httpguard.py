"""fleet.httpguard's shared state without a server: admission per address and
in all, eviction of the longest-idle connection, one log line per interval."""

from __future__ import annotations

import logging

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
