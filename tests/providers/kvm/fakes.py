"""In-memory stand-ins for one host's libvirt connection, where a test must
control timing (hangs, barriers) or see every dial: `FakeConn` has the
check's RPCs, `FakeHypervisor` everything the operations use, with faults
injected at the n-th RPC (conformance.FaultConformance)."""

from __future__ import annotations

import threading
import time
import xml.etree.ElementTree as ET
from typing import Any

import libvirt

from providers.kvm import errors
from providers.kvm.errors import DialError, Stage


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


# --- a whole host, for the operations (fault injection) ------------------------------

# Domain codes of the errors a real libvirt raises (virErrorDomain).
FROM_QEMU, FROM_STORAGE = 10, 18

GARBAGE_XML = "<domain><metadata><fleet:instance xmlns:fleet='"  # cut off mid-way
TRANSPORT_DROP = "transport-drop"
GARBAGE = "garbage-xml"
NOT_LIBVIRT = "not-a-libvirt-error"
RPC_HANG = "rpc-hang"
DIAL_REFUSED = "dial-refused"
# Fault name → (virErrorNumber, virErrorDomain) a hypervisor answers with.
LIBVIRT_FAULTS = {
    "no-domain": (libvirt.VIR_ERR_NO_DOMAIN, FROM_QEMU),
    "no-storage-vol": (libvirt.VIR_ERR_NO_STORAGE_VOL, FROM_STORAGE),
    "no-storage-pool": (libvirt.VIR_ERR_NO_STORAGE_POOL, FROM_STORAGE),
    "internal-error": (libvirt.VIR_ERR_INTERNAL_ERROR, FROM_QEMU),
    "operation-invalid": (libvirt.VIR_ERR_OPERATION_INVALID, FROM_QEMU),
    "operation-failed": (libvirt.VIR_ERR_OPERATION_FAILED, FROM_QEMU),
    "operation-denied": (libvirt.VIR_ERR_OPERATION_DENIED, FROM_QEMU),
    "access-denied": (libvirt.VIR_ERR_ACCESS_DENIED, 0),
    "no-support": (libvirt.VIR_ERR_NO_SUPPORT, FROM_QEMU),
    "invalid-arg": (libvirt.VIR_ERR_INVALID_ARG, FROM_QEMU),
    "xml-error": (libvirt.VIR_ERR_XML_ERROR, FROM_QEMU),
    TRANSPORT_DROP: (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC),
}
KVM_FAULTS = (*LIBVIRT_FAULTS, GARBAGE, NOT_LIBVIRT, RPC_HANG, DIAL_REFUSED)
GONE_FAULTS = ("no-domain", "no-storage-vol")


class FakeHypervisor:
    """One host's libvirt as the provider uses it: domains, one storage pool
    with volumes, streams, and the check's RPCs. Every method call on it or
    on an object it returned is an RPC that `inject` can fail."""

    def __init__(self, pool: str = "default", base_volumes: tuple[str, ...] = ()) -> None:
        self.pool_name = pool
        self.domains: dict[str, FakeDomain] = {}
        self.volumes: dict[str, str] = {v: f"/pool/{v}" for v in base_volumes}
        self.closed = False
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._nth = -1
        self._seen = 0
        self.fired = 0
        self.release = threading.Event()

    def inject(self, fault: str | None, nth: int = -1) -> None:
        with self._lock:
            self._fault, self._nth, self._seen, self.fired = fault, nth, 0, 0

    def _take(self, name: str) -> str | None:
        with self._lock:
            if self._fault is None or (self._fault == GARBAGE and name != "XMLDesc"):
                return None  # garbage is what an XML answer can be: only those count
            index, self._seen = self._seen, self._seen + 1
            if self._nth >= 0 and index != self._nth:
                return None
            self.fired += 1
            return self._fault

    def _rpc(self, name: str) -> bool:
        """Raise the injected fault, or return True when the answer must be garbage."""
        fault = self._take(name)
        if fault is None:
            return False
        if fault == GARBAGE:
            return True
        if fault == NOT_LIBVIRT:
            raise TypeError(f"{name}() argument 1 must be int, not None")
        if fault == RPC_HANG:
            self.release.wait(30)
            raise lv_error(libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC, "End of file while reading data")
        code, domain = LIBVIRT_FAULTS[fault]
        raise lv_error(code, domain, f"injected {fault} in {name}")

    # -- virConnect -------------------------------------------------------------------

    def lookupByName(self, name: str) -> FakeDomain:  # noqa: N802 - libvirt's names
        self._rpc("lookupByName")
        dom = self.domains.get(name)
        if dom is None:
            raise lv_error(libvirt.VIR_ERR_NO_DOMAIN, FROM_QEMU, f"Domain not found: no domain with matching name '{name}'")
        return dom

    def defineXML(self, xml: str) -> FakeDomain:  # noqa: N802
        self._rpc("defineXML")
        name = ET.fromstring(xml).findtext("name") or ""
        dom = self.domains[name] = FakeDomain(self, name, xml)
        return dom

    def listAllDomains(self, flags: int = 0) -> list[FakeDomain]:  # noqa: N802
        self._rpc("listAllDomains")
        return list(self.domains.values())

    def storagePoolLookupByName(self, name: str) -> FakeStoragePool:  # noqa: N802
        self._rpc("storagePoolLookupByName")
        if name != self.pool_name:
            raise lv_error(libvirt.VIR_ERR_NO_STORAGE_POOL, FROM_STORAGE, f"Storage pool not found: '{name}'")
        return FakeStoragePool(self)

    def newStream(self, flags: int = 0) -> FakeStream:  # noqa: N802
        self._rpc("newStream")
        return FakeStream(self)

    def getLibVersion(self) -> int:  # noqa: N802
        self._rpc("getLibVersion")
        return 9_000_000

    def getHostname(self) -> str:  # noqa: N802
        self._rpc("getHostname")
        return "hv.example"


class FakeDomain:
    def __init__(self, hv: FakeHypervisor, name: str, xml: str) -> None:
        self.hv, self._name, self.xml, self.active = hv, name, xml, False

    def name(self) -> str:
        self.hv._rpc("name")
        return self._name

    def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802
        return GARBAGE_XML if self.hv._rpc("XMLDesc") else self.xml

    def isActive(self) -> int:  # noqa: N802
        self.hv._rpc("isActive")
        return int(self.active)

    def create(self) -> None:
        self.hv._rpc("create")
        self.active = True

    def destroy(self) -> None:
        self.hv._rpc("destroy")
        self.active = False

    def undefineFlags(self, flags: int = 0) -> None:  # noqa: N802
        self.hv._rpc("undefineFlags")
        self.hv.domains.pop(self._name, None)

    def state(self) -> list[int]:
        self.hv._rpc("state")
        return [1 if self.active else 5, 0]

    def interfaceAddresses(self, source: int, flags: int = 0) -> dict:  # noqa: N802
        self.hv._rpc("interfaceAddresses")
        return {"vnet0": {"hwaddr": "52:54:00:00:00:01", "addrs": [{"type": 0, "addr": "192.0.2.10", "prefix": 24}]}}


class FakeStoragePool:
    def __init__(self, hv: FakeHypervisor) -> None:
        self.hv = hv

    def storageVolLookupByName(self, name: str) -> FakeVolume:  # noqa: N802
        self.hv._rpc("storageVolLookupByName")
        if name not in self.hv.volumes:
            raise lv_error(libvirt.VIR_ERR_NO_STORAGE_VOL, FROM_STORAGE, f"Storage volume not found: '{name}'")
        return FakeVolume(self.hv, name)

    def createXML(self, xml: str, flags: int = 0) -> FakeVolume:  # noqa: N802
        self.hv._rpc("createXML")
        name = ET.fromstring(xml).findtext("name") or ""
        self.hv.volumes[name] = f"/pool/{name}"
        return FakeVolume(self.hv, name)

    def info(self) -> list[int]:
        self.hv._rpc("info")
        return [2, 100 << 30, 0, 42 << 30]


class FakeVolume:
    def __init__(self, hv: FakeHypervisor, name: str) -> None:
        self.hv, self.name = hv, name

    def path(self) -> str:
        self.hv._rpc("path")
        return self.hv.volumes.get(self.name, f"/pool/{self.name}")

    def delete(self, flags: int = 0) -> None:
        self.hv._rpc("delete")
        if self.hv.volumes.pop(self.name, None) is None:
            raise lv_error(libvirt.VIR_ERR_NO_STORAGE_VOL, FROM_STORAGE, f"Storage volume not found: '{self.name}'")

    def upload(self, stream: FakeStream, offset: int, length: int, flags: int = 0) -> None:
        self.hv._rpc("upload")


class FakeStream:
    def __init__(self, hv: FakeHypervisor) -> None:
        self.hv = hv

    def send(self, data: bytes) -> int:
        self.hv._rpc("send")
        return len(data)

    def finish(self) -> None:
        self.hv._rpc("finish")

    def abort(self) -> None:
        pass  # best effort, as libvirt's: never the failure reported


class KvmFaultBackend:
    """conformance.FaultBackend for a kvm provider on one FakeHypervisor.

    Libvirt faults fail the n-th RPC; DIAL_REFUSED drops the pooled link and
    fails the n-th redial (as sshd refusing connections would)."""

    def __init__(self, provider: Any, hv: FakeHypervisor, dialer: FakeDialer, host: str) -> None:
        self.provider, self.hv, self.dialer, self.host = provider, hv, dialer, host
        self._dial_fault = False
        self._dials_before = 0

    def inject(self, fault: str | None, nth: int = -1) -> None:
        self.dialer.errors.pop(self.host, None)
        self._dial_fault = fault == DIAL_REFUSED
        if self._dial_fault:
            self.hv.inject(None)
            for c in self.dialer.clients:
                c.closed = True  # the link dropped: the next call redials
            self._dials_before = self.dialer.dials.get(self.host, 0)
            if nth == 0:
                self.dialer.errors[self.host] = DialError(Stage.TCP, f"ssh dial {self.host}.example:22: Connection refused")
            return
        self.hv.inject(fault, nth)

    def fired(self) -> int:
        if self._dial_fault:
            return int(self.host in self.dialer.errors and self.dialer.dials.get(self.host, 0) > self._dials_before)
        return self.hv.fired

    def release(self) -> None:
        self.hv.release.set()
        self.hv.release = threading.Event()
