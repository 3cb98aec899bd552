"""In-memory stand-ins for one host's libvirt connection, where a test must
control timing (hangs, barriers) or see every dial."""

from __future__ import annotations

import threading
import time
from typing import Any

import libvirt

from providers.kvm import errors


def lv_error(code: int, domain: int = 0, message: str = "") -> libvirt.libvirtError:
    exc = libvirt.libvirtError(message or f"libvirt error {code}")
    exc.err = (code, domain, message or f"libvirt error {code}", 2, None, None, None, 0, 0)
    return exc


class FakePool:
    def __init__(self, conn: FakeConn, name: str) -> None:
        self.conn = conn
        self.name = name

    def info(self) -> list[int]:
        self.conn._rpc("pool.info")
        return [self.conn.pool_states.get(self.name, 2), 100 << 30, 0, 42 << 30]


class FakeConn:
    """The check's four RPCs; `hang` blocks every RPC until set, `barrier`
    makes the first RPC wait for the other hosts, `fail` raises once."""

    def __init__(self, pools: dict[str, int] | None = None) -> None:
        self.pool_states = pools if pools is not None else {"default": 2}
        self.hang: threading.Event | None = None
        self.barrier: threading.Barrier | None = None
        self.fail: BaseException | None = None
        self.calls: list[str] = []
        self.closed = False

    def _rpc(self, name: str) -> None:
        self.calls.append(name)
        if self.hang is not None:
            self.hang.wait()
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc

    def getLibVersion(self) -> int:  # noqa: N802 - libvirt's name
        self._rpc("getLibVersion")
        if self.barrier is not None:
            self.barrier.wait(5)
        return 9_000_000

    def getHostname(self) -> str:  # noqa: N802
        self._rpc("getHostname")
        return "hv.example"

    def storagePoolLookupByName(self, name: str) -> FakePool:  # noqa: N802
        self._rpc("storagePoolLookupByName")
        if name not in self.pool_states:
            msg = f"Storage pool not found: no storage pool with matching name '{name}'"
            raise lv_error(errors.VIR_ERR_NO_STORAGE_POOL, 18, msg)
        return FakePool(self, name)


class FakeClient:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.closed = False

    def alive(self) -> bool:
        return not self.closed

    def close(self, wait: float = 0.0) -> None:
        self.closed = True
        self.conn.closed = True


class FakeDialer:
    """Counts dials per host; `errors[host]` fails that host's dial, `gate`
    holds every dial until set, `delay` slows each dial."""

    def __init__(self, conns: dict[str, FakeConn] | None = None) -> None:
        self.conns = conns or {}
        self.errors: dict[str, BaseException] = {}
        self.gate: threading.Event | None = None
        self.delay = 0.0
        self.dials: dict[str, int] = {}
        self.clients: list[FakeClient] = []
        self._lock = threading.Lock()

    def __call__(self, host: Any, deadline: Any) -> FakeClient:
        with self._lock:
            self.dials[host.name] = self.dials.get(host.name, 0) + 1
        if self.gate is not None:
            self.gate.wait()
        if self.delay:
            time.sleep(self.delay)
        if host.name in self.errors:
            raise self.errors[host.name]
        conn = self.conns.setdefault(host.name, FakeConn({host.pool: 2}))
        conn.closed = False
        client = FakeClient(conn)
        self.clients.append(client)
        return client
