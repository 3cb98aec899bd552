"""The Checker and the connection pool's sharing rules, over fakes where
timing must be controlled."""

from __future__ import annotations

import threading
import time

import pytest

from providers import base
from providers.base import Deadline
from providers.kvm import check, errors
from providers.kvm.errors import DialError, ProbeBusyError, Stage
from tests.providers.kvm.fakes import FakeConn, FakeDialer, lv_error


def test_reachable_with_every_detail(fake_provider_factory):
    p, _ = fake_provider_factory(["a"])
    (st,) = p.check(Deadline.after(5))
    assert st.ready and st.reason == base.REASON_REACHABLE
    assert st.name == "a" and st.address == "a.example:22"
    assert dict(st.details) == {
        "user": "fleet",
        "pool": "default",
        "hostname": "hv.example",
        "libvirtVersion": "9.0.0",
        "poolState": "running",
        "poolCapacity": "100.0GiB",
        "poolAvailable": "42.0GiB",
    }


def test_hosts_are_checked_concurrently_and_order_is_kept(fake_provider_factory):
    names = [f"h{i}" for i in range(8)]
    barrier = threading.Barrier(len(names))  # a sequential check would never pass it
    conns = {n: FakeConn() for n in names}
    for c in conns.values():
        c.barrier = barrier
    p, _ = fake_provider_factory(names, FakeDialer(conns))
    got = p.check(Deadline.after(10))
    assert [s.name for s in got] == names
    assert all(s.ready for s in got), [s.message for s in got]


def test_per_host_verdicts_in_order_and_pool_verdicts_keep_the_connection(fake_provider_factory):
    conns = {"ok": FakeConn(), "nopool": FakeConn({"other": 2}), "inactive": FakeConn({"default": 0})}
    dialer = FakeDialer(conns)
    dialer.errors["down"] = DialError(Stage.TCP, "ssh dial down.example:22: Connection refused")
    p, _ = fake_provider_factory(["ok", "nopool", "down", "inactive"], dialer)
    for _ in range(2):
        got = p.check(Deadline.after(5))
        assert [(s.name, s.reason) for s in got] == [
            ("ok", "Reachable"),
            ("nopool", "PoolNotFound"),
            ("down", "Unreachable"),
            ("inactive", "PoolNotActive"),
        ]
    assert got[3].details["poolState"] == "inactive" and "inactive" in got[3].message
    assert dialer.dials == {"ok": 1, "nopool": 1, "down": 2, "inactive": 1}


def test_hung_daemon_gives_timeout_keeps_the_connection_and_refuses_a_second_check(fake_provider_factory):
    conn = FakeConn()
    dialer = FakeDialer({"a": conn})
    p, _ = fake_provider_factory(["a"], dialer)
    assert p.check(Deadline.after(5))[0].ready  # connection open
    conn.hang = threading.Event()
    start = time.monotonic()
    (st,) = p.check(Deadline.after(0.2))
    assert st.reason == base.REASON_TIMEOUT and not st.ready
    assert time.monotonic() - start < 1.0
    assert not dialer.clients[0].closed  # a Create on it is not cut off

    start = time.monotonic()
    (st,) = p.check(Deadline.after(5))  # the abandoned one still waits
    assert st.reason == base.REASON_TIMEOUT
    assert "still waiting" in st.message
    assert time.monotonic() - start < 0.1

    conn.hang.set()
    conn.hang = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        (st,) = p.check(Deadline.after(5))
        if st.ready:
            break
        time.sleep(0.01)
    assert st.ready
    assert dialer.dials == {"a": 1}


def test_waiting_for_the_host_slot_ends_at_the_deadline(fake_provider_factory):
    dialer = FakeDialer()
    dialer.gate = threading.Event()  # a reconcile is stuck redialing the host
    p, _ = fake_provider_factory(["a"], dialer)
    host = p.cfg.hosts[0]
    holder = threading.Thread(target=lambda: p.pool.get(host, Deadline.after(30)), daemon=True)
    holder.start()
    while dialer.dials.get("a") != 1:
        time.sleep(0.005)
    start = time.monotonic()
    (st,) = p.check(Deadline.after(0.2))
    assert st.reason == base.REASON_TIMEOUT
    assert "waiting for the connection" in st.message
    assert time.monotonic() - start < 1.0
    dialer.gate.set()
    holder.join(5)


def test_transport_error_drops_the_connection(fake_provider_factory):
    conn = FakeConn()
    dialer = FakeDialer({"a": conn})
    p, _ = fake_provider_factory(["a"], dialer)
    assert p.check(Deadline.after(5))[0].ready
    conn.fail = lv_error(38, errors.VIR_FROM_RPC, "End of file while reading data: Input/output error")
    (st,) = p.check(Deadline.after(5))
    assert st.reason == base.REASON_UNREACHABLE
    assert dialer.clients[0].closed
    assert p.check(Deadline.after(5))[0].ready
    assert dialer.dials == {"a": 2}


def test_a_libvirt_error_keeps_the_connection(fake_provider_factory):
    conn = FakeConn()
    dialer = FakeDialer({"a": conn})
    p, _ = fake_provider_factory(["a"], dialer)
    conn.fail = lv_error(1, 0, "internal error: something")
    (st,) = p.check(Deadline.after(5))
    assert st.reason == check.REASON_LIBVIRT_ERROR and "something" in st.message
    assert p.check(Deadline.after(5))[0].ready
    assert dialer.dials == {"a": 1}


def test_one_dial_per_host_under_concurrency(fake_provider_factory):
    dialer = FakeDialer()
    dialer.delay = 0.1
    p, _ = fake_provider_factory(["a", "b"], dialer)
    hosts = list(p.cfg.hosts)
    threads = [
        threading.Thread(target=p.pool.get, args=(hosts[i % 2], Deadline.after(5)), daemon=True) for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert dialer.dials == {"a": 1, "b": 1}


def test_check_returns_promptly_with_an_expired_deadline(fake_provider_factory):
    conn = FakeConn()
    conn.hang = threading.Event()
    p, _ = fake_provider_factory(["a", "b"], FakeDialer({"a": conn}))
    start = time.monotonic()
    got = p.check(Deadline.after(0))
    assert time.monotonic() - start < 0.5
    assert [s.name for s in got] == ["a", "b"]
    assert got[0].reason == base.REASON_TIMEOUT
    conn.hang.set()


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (DialError(Stage.SSH_MATERIAL, "x"), "SSHMaterialUnavailable"),
        (DialError(Stage.TCP, "x"), "Unreachable"),
        (DialError(Stage.SSH_HANDSHAKE, "x"), "SSHHandshakeFailed"),
        (DialError(Stage.LIBVIRT_CONNECT, "x"), "LibvirtConnectFailed"),
        (errors.DeadlineError("x"), "Timeout"),
        (ProbeBusyError("x"), "Timeout"),
        (lv_error(errors.VIR_ERR_NO_STORAGE_POOL, 18), "PoolNotFound"),
        (lv_error(errors.VIR_ERR_NO_DOMAIN, 10), "LibvirtError"),
        (lv_error(38, errors.VIR_FROM_RPC), "Unreachable"),
        (ConnectionResetError("x"), "Unreachable"),
        (RuntimeError("x"), "Unreachable"),
    ],
)
def test_check_reason(exc, reason):
    assert check.check_reason(exc) == reason


def test_formatting():
    assert check.format_lib_version(9_000_000) == "9.0.0"
    assert check.format_lib_version(10_002_013) == "10.2.13"
    assert check.format_gib(int(1.25 * (1 << 30))) == "1.2GiB"
    assert [check.pool_state_name(s) for s in range(6)] == [
        "inactive", "building", "running", "degraded", "inaccessible", "state 5",
    ]
