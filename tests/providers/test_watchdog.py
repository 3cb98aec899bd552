"""providers.watchdog: at the deadline only the guarded call's connections
are shut down; a call that got through anyway raises DeadlineCut."""

import socket
import threading
import time

import pytest
import urllib3

from providers.base import Deadline
from providers.watchdog import DeadlineCut, Guard, guard, watch_pool_manager
from tests.fakes.drip import DripServer


class Conn:
    def __init__(self):
        self.sock, self.peer = socket.socketpair()

    def cut(self):
        """True when our end was shut down: the peer reads EOF."""
        self.peer.settimeout(2)
        return self.peer.recv(1) == b""

    def close(self):
        self.sock.close()
        self.peer.close()


@pytest.fixture
def conn():
    c = Conn()
    yield c
    c.close()


def test_fire_shuts_registered_sockets_and_later_ones_at_once(conn):
    g = Guard(Deadline.after(5))
    g.add(conn)
    g.fire()
    assert g.fired and conn.cut()
    late = Conn()
    try:
        g.add(late)  # connected after the deadline
        assert late.cut()
    finally:
        late.close()


def test_closed_guard_does_not_fire(conn):
    g = Guard(Deadline.after(5))
    g.add(conn)
    g.close()
    g.fire()
    assert not g.fired
    conn.sock.sendall(b"x")
    assert conn.peer.recv(1) == b"x"


def test_block_that_outlives_its_deadline_raises_deadline_cut():
    with pytest.raises(DeadlineCut), guard(Deadline.after(0.05)) as g:
        while not g.fired:
            time.sleep(0.01)


def test_block_within_its_deadline_is_untouched():
    with guard(Deadline.after(5)) as g:
        pass
    assert not g.fired


def test_only_the_guarded_threads_connection_is_cut():
    pm = watch_pool_manager(urllib3.PoolManager(retries=False, maxsize=4))
    with DripServer(interval=0.01, body=b"x" * 60) as drip:
        out = {}

        def unguarded():
            r = pm.request("GET", drip.url, timeout=5)
            out["b"] = len(r.data)

        other = threading.Thread(target=unguarded)
        other.start()
        start = time.monotonic()
        with pytest.raises((DeadlineCut, urllib3.exceptions.HTTPError)), guard(Deadline.after(0.2)):
            pm.request("GET", drip.url, timeout=5)
        assert time.monotonic() - start < 1
        other.join(10)
        assert out == {"b": 60}  # the concurrent call read its whole answer
    pm.clear()
