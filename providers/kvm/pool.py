"""One shared connection per host, for every call in a worker.

Who calls: `check.py` through `HostPool.probe`, the provider's operations
through `HostPool.call`. Both get the host's pooled `Client`, dialing it on
first use or after it dropped; concurrent callers for a host share one dial
(the host's slot is held while dialing), and waiting for the slot ends at
the caller's deadline. The pool knows connections only through the small
`Client` protocol, so its sharing rules are tested over fakes; the real
client and dialer are in dialer.py.

The two entry points differ in what a deadline costs: an operation past its
deadline closes the connection (the only way to end an RPC in flight), a
probe past its deadline is abandoned and the connection kept, so a health
check never cuts a create off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from providers.base import Deadline, ProviderError
from providers.kvm.config import KvmHost
from providers.kvm.deadline import run_until
from providers.kvm.errors import DeadlineError, ProbeBusyError, is_libvirt_error, is_transport_error
from providers.kvm.tracing import traced

log = logging.getLogger("providers.kvm")

# How long closing the pool (process exit) waits for each libvirt close.
CLOSE_WAIT = 2.0
T = TypeVar("T")


class Client(Protocol):
    """What the pool needs of a connection; tests supply fakes."""

    conn: Any  # a libvirt.virConnect (or a fake with the same methods)

    def alive(self) -> bool: ...

    def close(self, wait: float = 0.0) -> None: ...


Dialer = Callable[[KvmHost, Deadline], Client]


class _Entry:
    def __init__(self) -> None:
        self.slot = threading.Lock()  # held while checking/dialing; waiting is deadline-bounded
        self.guard = threading.Lock()  # protects client and probing
        self.client: Client | None = None
        self.probing = False  # a probe's fn is running, perhaps abandoned
        self.dials = 0
        self.connected_since: float | None = None  # wall clock, for `celery inspect provider_status`


class HostPool:
    def __init__(self, dialer: Dialer) -> None:
        self.dialer = dialer
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def _entry(self, name: str) -> _Entry:
        with self._lock:
            e = self._entries.get(name)
            if e is None:
                e = self._entries[name] = _Entry()
            return e

    def dials(self, name: str) -> int:
        return self._entry(name).dials

    def state(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Per host: connected or not, since when, whether an abandoned probe
        still holds its slot, and how many dials so far. Reads only."""
        out = {}
        for name in names:
            e = self._entry(name)
            with e.guard:
                since = e.connected_since
                out[name] = {
                    "connected": e.client is not None,
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if since else None,
                    "probeWaiting": e.probing,
                    "dials": e.dials,
                }
        return out

    def get(self, host: KvmHost, deadline: Deadline) -> Client:
        """The host's live connection, dialing if needed. A free slot is taken
        even past the deadline (so the dial reports its own stage); waiting for
        a busy one ends at the deadline."""
        e = self._entry(host.name)
        if not e.slot.acquire(blocking=False) and not e.slot.acquire(timeout=deadline.remaining()):
            raise DeadlineError(f"waiting for the connection to host {host.name} ({host.address}): deadline passed")
        try:
            with e.guard:
                client = e.client
            if client is not None:
                if client.alive():
                    return client
                self.drop(host.name, client, "connection no longer alive")
            e.dials += 1
            start = time.monotonic()
            client = self.dialer(host, deadline)
            log.debug("kvm host %s: connected in %.1f ms", host.name, (time.monotonic() - start) * 1000)
            with e.guard:
                e.client = client
                e.connected_since = time.time()
            return client
        finally:
            e.slot.release()

    def drop(self, name: str, client: Client, why: str) -> None:
        """Forget and close client, unless a redial already replaced it."""
        e = self._entry(name)
        with e.guard:
            if e.client is not client:
                return
            e.client = None
            e.connected_since = None
        log.info("kvm host %s: libvirt connection dropped (%s)", name, why)
        client.close()

    def _after(self, host: KvmHost, client: Client, exc: BaseException) -> None:
        """Drop the link on evidence against it: an RPC-layer error, or an
        error that is neither libvirt's verdict, a classified one, nor a deadline."""
        if is_transport_error(exc) or not (is_libvirt_error(exc) or isinstance(exc, ProviderError | DeadlineError)):
            self.drop(host.name, client, f"transport error: {type(exc).__name__}")
        elif not client.alive():
            self.drop(host.name, client, "connection no longer alive")

    def call(self, host: KvmHost, deadline: Deadline, fn: Callable[[Any], T]) -> T:
        """For provider operations. On the deadline the connection is closed
        (that is the only way to end an RPC in flight), which also fails any
        other operation on the host at that moment: a documented gap."""
        client = self.get(host, deadline)
        try:
            return run_until(
                deadline,
                lambda: fn(traced(client.conn, host.name)),
                on_abandon=lambda: self.drop(host.name, client, "deadline passed during an operation"),
            )
        except DeadlineError:
            raise
        except Exception as exc:
            self._after(host, client, exc)
            raise

    def probe(self, host: KvmHost, deadline: Deadline, fn: Callable[[Any], T]) -> T:
        """For the health check, which must never cost the operations their
        connection: past the deadline fn is abandoned and the connection kept.
        At most one probe per host runs, an abandoned one included; until it
        returns, further probes raise ProbeBusyError at once."""
        e = self._entry(host.name)
        with e.guard:
            if e.probing:
                raise ProbeBusyError("the previous check of this host is still waiting for libvirt to answer")
            e.probing = True
        try:
            client = self.get(host, deadline)
        except BaseException:
            with e.guard:
                e.probing = False
            raise

        def job() -> T:
            try:
                return fn(traced(client.conn, host.name))
            finally:
                with e.guard:
                    e.probing = False

        try:
            return run_until(
                deadline,
                job,
                on_abandon=lambda: log.info("kvm host %s: check abandoned, connection kept", host.name),
            )
        except DeadlineError:
            raise
        except Exception as exc:
            self._after(host, client, exc)
            raise

    def close(self) -> None:
        with self._lock:
            entries = list(self._entries.items())
        for name, e in entries:
            with e.guard:
                client, e.client = e.client, None
            if client is not None:
                log.debug("kvm host %s: closing", name)
                client.close(wait=CLOSE_WAIT)
