"""The kvm Checker: every configured host, concurrently, in `hosts` order.

Each host goes through `HostPool.probe` over the same pooled connection the
operations use: the SSH and libvirt handshakes only on the first check or
after the link dropped, then libvirt's version and hostname, then the host's
storage pool by name and its info. The pool verdict (PoolNotActive) is
decided after probe returned, so it never drops the connection; `facts` is
read only when probe returned normally, since an abandoned fn may still
write to it. `check_reason` is pure and table-tested.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from providers import base
from providers.base import Deadline, TargetStatus
from providers.kvm.config import KvmHost
from providers.kvm.errors import (
    VIR_ERR_NO_STORAGE_POOL,
    DeadlineError,
    DialError,
    Stage,
    is_libvirt_error,
    is_transport_error,
    libvirt_code,
)
from providers.text import clip

REASON_SSH_MATERIAL_UNAVAILABLE = "SSHMaterialUnavailable"
REASON_SSH_HANDSHAKE_FAILED = "SSHHandshakeFailed"
REASON_LIBVIRT_CONNECT_FAILED = "LibvirtConnectFailed"
REASON_LIBVIRT_ERROR = "LibvirtError"
REASON_POOL_NOT_FOUND = "PoolNotFound"
REASON_POOL_NOT_ACTIVE = "PoolNotActive"

KVM_REASONS = (
    REASON_SSH_MATERIAL_UNAVAILABLE,
    base.REASON_UNREACHABLE,
    REASON_SSH_HANDSHAKE_FAILED,
    REASON_LIBVIRT_CONNECT_FAILED,
    base.REASON_TIMEOUT,
    REASON_POOL_NOT_FOUND,
    REASON_POOL_NOT_ACTIVE,
    REASON_LIBVIRT_ERROR,
    base.REASON_REACHABLE,
)

POOL_RUNNING = 2  # VIR_STORAGE_POOL_RUNNING
POOL_STATES = {0: "inactive", 1: "building", 2: "running", 3: "degraded", 4: "inaccessible"}

_STAGE_REASONS = {
    Stage.SSH_MATERIAL: REASON_SSH_MATERIAL_UNAVAILABLE,
    Stage.TCP: base.REASON_UNREACHABLE,
    Stage.SSH_HANDSHAKE: REASON_SSH_HANDSHAKE_FAILED,
    Stage.LIBVIRT_CONNECT: REASON_LIBVIRT_CONNECT_FAILED,
}

Probe = Callable[[KvmHost, Deadline, Callable[[Any], Any]], Any]


@dataclass(frozen=True)
class HostFacts:
    version: int
    hostname: str
    pool_state: int
    capacity: int
    available: int


def read_facts(conn: Any, pool_name: str) -> HostFacts:
    """The four RPCs. Raises their errors untouched (a transport error must
    still drop the link); decides nothing."""
    version = conn.getLibVersion()
    hostname = conn.getHostname()
    pool = conn.storagePoolLookupByName(pool_name)
    state, capacity, _allocation, available = pool.info()
    return HostFacts(version, hostname, state, capacity, available)


def check_hosts(hosts: list[KvmHost], probe: Probe, deadline: Deadline) -> list[TargetStatus]:
    out: list[TargetStatus | None] = [None] * len(hosts)

    def run(i: int, host: KvmHost) -> None:
        out[i] = check_host(host, probe, deadline)

    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(run, i, h), name=f"kvm-check-{h.name}", daemon=True)
        for i, h in enumerate(hosts)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline.remaining() + 1.0)
    return [
        s if s is not None else _status(h, False, base.REASON_TIMEOUT, "the check did not return in time", 0.0)
        for h, s in zip(hosts, out, strict=True)
    ]


def check_host(host: KvmHost, probe: Probe, deadline: Deadline) -> TargetStatus:
    start = time.monotonic()
    try:
        facts: HostFacts = probe(host, deadline, lambda conn: read_facts(conn, host.pool))
    except Exception as exc:  # never raises: a failure is a verdict
        return _status(host, False, check_reason(exc), _message(exc), time.monotonic() - start)
    latency = time.monotonic() - start
    details = {
        "hostname": facts.hostname,
        "libvirtVersion": format_lib_version(facts.version),
        "poolState": pool_state_name(facts.pool_state),
        "poolCapacity": format_gib(facts.capacity),
        "poolAvailable": format_gib(facts.available),
    }
    if facts.pool_state != POOL_RUNNING:
        message = f"storage pool {host.pool!r} is {pool_state_name(facts.pool_state)}"
        return _status(host, False, REASON_POOL_NOT_ACTIVE, message, latency, details)
    return _status(host, True, base.REASON_REACHABLE, "", latency, details)


def _status(
    host: KvmHost, ready: bool, reason: str, message: str, latency: float, extra: dict[str, str] | None = None
) -> TargetStatus:
    details = {"user": host.user, "pool": host.pool, **(extra or {})}
    return TargetStatus(host.name, host.address, ready, reason, message, latency, details)


def check_reason(exc: BaseException) -> str:
    """Where a failed check broke. The dial stage wins over a timeout: "the
    SSH handshake did not finish" says more than "the check ran out of time"."""
    if isinstance(exc, DialError):
        return _STAGE_REASONS.get(exc.stage, base.REASON_UNREACHABLE)
    if isinstance(exc, DeadlineError | TimeoutError):
        return base.REASON_TIMEOUT
    if is_transport_error(exc):
        return base.REASON_UNREACHABLE  # the link died mid-check
    if libvirt_code(exc) == VIR_ERR_NO_STORAGE_POOL:
        return REASON_POOL_NOT_FOUND
    if is_libvirt_error(exc):
        return REASON_LIBVIRT_ERROR
    return base.REASON_UNREACHABLE


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return clip(text, 1024)


def format_lib_version(v: int) -> str:
    """libvirt's major*1e6 + minor*1e3 + micro."""
    return f"{v // 1_000_000}.{v // 1_000 % 1_000}.{v % 1_000}"


def pool_state_name(state: int) -> str:
    return POOL_STATES.get(state, f"state {state}")


def format_gib(n: int) -> str:
    return f"{n / (1 << 30):.1f}GiB"
