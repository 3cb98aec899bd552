"""The local provider: each instance is a squid process on this host.

The backend is the state directory and the process table; `state.py` holds
the records and locks, `squid.py` the config and the process start,
`process.py` what /proc says, `errors.py` the one `classify`.

What a request's fields become (docs/local-provider.md):

- `name` → the record `<stateDir>/<name>.json` and the id `local/<name>`.
- `port` → the port squid listens on at `bindAddress`. It must lie in
  `portRange` (else Permanent, before anything is touched): the reconciler
  reports the Proxy's own port with the instance's IP, so the proxy must
  listen on exactly that port. A port held by another process, or by
  another instance of this provider, is Transient: it may free up.
- `placement`: ignored (there is one host); the registry has no placement
  hook for this type, so any placement is accepted.
- `cloud_init`: ignored: there is no machine to initialise. Never written,
  logged or shown.
- `uid`, `namespace`, `proxy_name`, `installation` → the record, with the
  GC marks (`labels`: LABEL_MANAGED=true, LABEL_UID, and LABEL_INSTALLATION
  when the request names one).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

from providers import marks
from providers.base import CreateRequest, Deadline, Instance, State, TargetStatus
from providers.boundary import Boundary
from providers.local import process, squid
from providers.local.check import check_local
from providers.local.config import LocalConfig, egress_addresses, safe_path
from providers.local.errors import BadRequest, Busy, CorruptRecord, DeadlineError, RecordMissing, classify
from providers.local.state import Record, Store, check_name, new_record, parse_id, provider_id

log = logging.getLogger(__name__)

# SIGTERM → SIGKILL: squid drains for shutdown_lifetime (1 s), then takes
# about a second more to exit.
GRACE = 3.0

T = TypeVar("T")


class LocalProvider:
    def __init__(self, name: str, cfg: LocalConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.root = cfg.state_dir(name)
        self.store = Store(self.root)
        self._lock = threading.Lock()
        # squid processes this worker started: polled so none stays a zombie
        # while the worker lives (after it exits, init inherits them).
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.boundary = Boundary(provider=name, classify=classify)

    # -- plumbing ----------------------------------------------------------------------

    def _call(self, op: str, pid: str, deadline: Deadline, fn: Callable[[], T]) -> T:
        """Run fn at the boundary; reap exited squids whatever came of it."""
        try:
            return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda _: fn())
        finally:
            self._reap()

    def _reap(self) -> None:
        with self._lock:
            for pid, child in list(self._children.items()):
                if child.poll() is not None:
                    del self._children[pid]

    def _check_root(self) -> None:
        try:
            safe_path(self.root, "stateDir")
        except ValueError as exc:
            raise BadRequest(f"stateDir {self.root!r}: {exc}") from None

    def conf_path(self, name: str) -> str:
        return os.path.join(self.store.instance_dir(name), squid.CONF)

    # -- Checker ------------------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_local(self.root, self.cfg.squid(), deadline)

    # -- Provider -----------------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        pid = provider_id(request.name)
        return self._call("create", pid, deadline, lambda: self._create(request, deadline))

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        return self._call("get", provider_id, deadline, lambda: self._instance(self.store.read(parse_id(provider_id))))

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        self._call("delete", provider_id, deadline, lambda: self._delete(parse_id(provider_id), deadline))

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        return self._call("list", "", deadline, self._list)

    # -- create -------------------------------------------------------------------------

    def _create(self, request: CreateRequest, deadline: Deadline) -> str:
        name = check_name(request.name)
        problem = marks.problem(request)
        if problem:
            raise BadRequest(problem)
        lo, hi = self.cfg.ports
        if not lo <= request.port <= hi:
            raise BadRequest(f"port {request.port} is outside portRange {lo}-{hi}: give the Proxy a spec.port in that range")
        self._check_root()
        who = squid.run_as()
        problem = squid.unreachable_by(self.root, who)
        if problem:
            raise BadRequest(f"stateDir {self.root}: {problem}")
        self.store.ensure()
        with self.store.name_lock(name, deadline):
            try:
                self.store.read(name)
                return provider_id(name)  # idempotent: the same instance, no second process
            except RecordMissing:
                pass
            with self.store.ports_lock(deadline):
                others = self._others(name)
                self._claim_port(request, others)
                egress = self._claim_egress(others)
                rec = new_record(request, self.cfg.bindAddress, squid.service_name(self.root, name), egress)
                instance_dir = self.store.instance_dir(name)
                text = squid.config_text(rec.bindAddress, rec.port, instance_dir, self.cfg.sources(), rec.egressAddress)
                conf = squid.prepare(instance_dir, text, who)
                self.store.write(rec)  # pid 0 until started: get says Provisioning while this lock is held
            try:
                child = squid.start(self.cfg.squid(), conf, rec.service, instance_dir, who)
            except BaseException:
                self.store.remove(name)
                shutil.rmtree(instance_dir, ignore_errors=True)
                raise
            with self._lock:
                self._children[child.pid] = child
            self.store.write(rec.with_(pid=child.pid, startTicks=process.start_ticks(child.pid) or 0))
        log.info("started squid for %s on %s pid %d", provider_id(name), squid.http_port(rec.bindAddress, rec.port), child.pid)
        return provider_id(name)

    def _others(self, name: str) -> list[Record]:
        """The other instances' records (deleting ones too: theirs are held until removed)."""
        out = []
        for other in self.store.names():
            if other == name:
                continue
            try:
                out.append(self.store.read(other))
            except (RecordMissing, CorruptRecord):
                continue
        return out

    def _claim_port(self, request: CreateRequest, others: list[Record]) -> None:
        bind, port = self.cfg.bindAddress, request.port
        lo, hi = self.cfg.ports
        for rec in others:
            if rec.port == port and rec.bindAddress == bind:
                raise Busy(f"port {port} on {bind} is taken by {provider_id(rec.name)} of this provider "
                           f"(Proxy {rec.namespace}/{rec.proxyName}); give each Proxy its own port in {lo}-{hi}")
        if not port_free(bind, port):
            raise Busy(f"port {port} on {bind} is in use by another process (not an instance of this provider); "
                       f"it may free up, or give the Proxy another port in {lo}-{hi}")

    def _claim_egress(self, others: list[Record]) -> str:
        """The lowest address of egressRange no other record holds (nor the
        bind address), under the ports lock: deterministic, never shared, free
        again when its record is removed. "" without egressRange."""
        net = self.cfg.egress_network
        if net is None:
            return ""
        taken = {rec.egressAddress for rec in others} | {self.cfg.bindAddress}
        for address in egress_addresses(net):
            if address not in taken:
                egress_usable(address)
                return address
        raise Busy(f"every address of egressRange {net} is held by another instance of this provider; "
                   "delete one, or widen egressRange")

    # -- get ----------------------------------------------------------------------------

    def _process(self, rec: Record) -> tuple[int, int] | None:
        """The live squid of this record: the recorded pid if it is still the
        process we started; for a record without a pid, one running our config."""
        if rec.pid:
            return (rec.pid, rec.startTicks) if process.alive(rec.pid, rec.startTicks) else None
        found = process.find(self.conf_path(rec.name))
        return found[0] if found else None

    def _instance(self, rec: Record) -> Instance:
        proc = self._process(rec)
        ip = ""
        if proc is None:
            # No pid yet while a create holds the name's lock: starting. Else dead.
            starting = rec.pid == 0 and self.store.name_locked(rec.name)
            state = State.PROVISIONING if starting else State.STOPPED
        elif process.listening(proc[0], rec.bindAddress, rec.port):
            state, ip = State.RUNNING, rec.bindAddress
        else:
            state = State.PROVISIONING
        return Instance(provider_id(rec.name), state, ip, rec.uid, rec.created(), rec.installation,
                        rec.namespace_mark)

    # -- delete -------------------------------------------------------------------------

    def _delete(self, name: str, deadline: Deadline) -> None:
        with contextlib.suppress(RecordMissing, CorruptRecord, FileNotFoundError):
            if self.store.read(name).deleting and self.store.name_locked(name):
                return  # another call is deleting it right now: a cheap repeat
        if not _exists(self.store.record_path(name)) and not _exists(self.store.instance_dir(name)):
            return  # nothing left
        self._check_root()
        with self.store.name_lock(name, deadline):
            try:
                rec: Record | None = self.store.read(name)
            except RecordMissing:
                rec = None  # a create that died before writing it may have left a directory
            except CorruptRecord:
                rec = None
            if rec is not None and not rec.deleting:
                self.store.write(rec.with_(deleting=True))
            # No pid recorded, or no readable record: whatever runs our config.
            targets = [(rec.pid, rec.startTicks)] if rec is not None and rec.pid > 0 else process.find(self.conf_path(name))
            for pid, ticks in targets:
                if not process.stop(pid, ticks, deadline, GRACE):
                    raise DeadlineError(f"squid (pid {pid}) is still running at the deadline; delete again")
                self._reap()
            squid.remove_shm(rec.service if rec is not None else squid.service_name(self.root, name))
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self.store.instance_dir(name))
            self.store.remove(name)  # last: until here, get still returns the instance
        log.info("deleted %s", provider_id(name))

    # -- list ---------------------------------------------------------------------------

    def _list(self) -> list[Instance]:
        out = []
        for name in self.store.names():
            try:
                rec = self.store.read(name)
            except (RecordMissing, CorruptRecord, OSError):
                continue  # deleted meanwhile, or unreadable: left out (MAY), the rest still listed
            if rec.managed:
                out.append(self._instance(rec))
        return out


def _exists(path: str) -> bool:
    """Like os.path.exists, but a directory we cannot read raises (it may
    hold the instance) instead of reading as "gone"."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    return True


def port_free(bind: str, port: int) -> bool:
    """Whether nothing listens on bind:port. With SO_REUSEADDR, as squid
    binds, so connections in TIME_WAIT don't count as taken."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            if exc.errno == errno.EADDRNOTAVAIL:
                raise BadRequest(f"bindAddress {bind} is not an address of this host") from exc
            raise
    return True


def egress_usable(address: str) -> None:
    """BadRequest unless this host can send from `address` (it is assigned
    here; every 127.0.0.0/8 address is, on Linux's loopback)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise BadRequest(f"egress address {address} (from egressRange) is not an address of this host") from exc
            raise


def new(name: str, cfg: LocalConfig) -> LocalProvider:
    return LocalProvider(name, cfg)
