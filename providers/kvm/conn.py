"""One shared SSH + libvirt connection per host, for every call in a worker.

Who calls: `check.py` through `HostPool.probe`, the provider's operations
through `HostPool.call`. Both get the host's pooled `HostClient`, dialing it
on first use or after it dropped; concurrent callers for a host share one
dial (the host's slot is held while dialing), and waiting for the slot ends
at the caller's deadline.

How libvirt-python talks over SSH: libvirt can only open a URI, so each
connection gets a private unix socket in a 0700 temp dir; libvirt connects
to `<driver>+unix:///…?socket=<that>` and a pair of pump threads bridges it to
an SSH channel reaching the host's libvirt socket. The channel is a
`direct-streamlocal@openssh.com` one (paramiko has no argument for the
socket path, hence `StreamLocalTransport`), or, when the host's sshd forbids
forwarding, an exec of `nc -U <socket>` (or `virt-ssh-helper`) on the host.

Dial failures carry their stage (errors.Stage) so the health check can say
where it broke; libvirt reports every transport failure as the same generic
error, so the SSH side is opened and verified first. The key and known_hosts
files are re-read on the next dial when they changed on disk (a rotated
Secret needs no restart). Nothing here logs key material.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shlex
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import libvirt
import paramiko
from paramiko.common import cMSG_CHANNEL_OPEN
from paramiko.message import Message

from providers.base import Deadline
from providers.kvm.config import KvmHost
from providers.kvm.errors import DeadlineError, DialError, ProbeBusyError, Stage, is_libvirt_error, is_transport_error
from providers.kvm.tracing import dial_span, traced

log = logging.getLogger("providers.kvm")

KEEPALIVE_SECONDS = 15
# How long closing the pool (process exit) waits for each libvirt close.
CLOSE_WAIT = 2.0
_PUMP_CHUNK = 256 * 1024
T = TypeVar("T")


def _quiet_libvirt(_ctx: Any, _err: Any) -> None:
    """libvirt prints every error to stderr by default; we raise them instead."""


libvirt.registerErrorHandler(_quiet_libvirt, None)


# --- deadlines -----------------------------------------------------------------


def run_until(deadline: Deadline, fn: Callable[[], T], on_abandon: Callable[[], None] | None = None) -> T:
    """Run fn in a daemon thread and return its result, unless the deadline
    passes first: then call on_abandon, leave fn running and raise
    DeadlineError. libvirt-python calls can't be cancelled otherwise."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def runner() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    ctx = contextvars.copy_context()  # the caller's span, for the RPC spans
    threading.Thread(target=ctx.run, args=(runner,), name="kvm-rpc", daemon=True).start()
    if not done.wait(deadline.remaining()):
        if on_abandon is not None:
            on_abandon()
        raise DeadlineError("deadline passed waiting for libvirt to answer")
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- SSH material ----------------------------------------------------------------


@dataclass(frozen=True)
class Material:
    key: paramiko.PKey
    host_keys: paramiko.HostKeys | None  # None: insecureIgnoreHostKey


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)  # follows symlinks: a Secret mount swaps ..data
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class MaterialCache:
    """The key and known_hosts, re-read when either file changed on disk."""

    def __init__(self, key_file: str, known_hosts_file: str, insecure: bool) -> None:
        self.key_file = key_file
        self.known_hosts_file = known_hosts_file
        self.insecure = insecure
        self._lock = threading.Lock()
        self._sig: tuple[Any, ...] | None = None
        self._material: Material | None = None

    def load(self) -> Material:
        try:
            with self._lock:
                sig = (_signature(self.key_file), None if self.insecure else _signature(self.known_hosts_file))
                if sig != self._sig or self._material is None:
                    self._material = self._read()
                    self._sig = sig
                    log.info("kvm: loaded ssh key %s and known_hosts %s", self.key_file, self.known_hosts_file or "-")
                return self._material
        except DialError:
            raise
        except (OSError, paramiko.SSHException, ValueError) as exc:
            raise DialError(Stage.SSH_MATERIAL, f"ssh material: {_describe(exc)}") from exc

    def _read(self) -> Material:
        try:
            key = paramiko.PKey.from_path(self.key_file)
        except (paramiko.SSHException, ValueError, TypeError) as exc:
            # never echo the key: only its path and the parser's verdict
            raise DialError(
                Stage.SSH_MATERIAL, f"ssh key {self.key_file} does not parse ({type(exc).__name__})"
            ) from exc
        host_keys = None
        if not self.insecure:
            host_keys = paramiko.HostKeys()
            try:
                host_keys.load(self.known_hosts_file)
            except paramiko.hostkeys.InvalidHostKey as exc:
                raise DialError(Stage.SSH_MATERIAL, f"known_hosts {self.known_hosts_file} does not parse") from exc
        return Material(key, host_keys)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}"


# --- the SSH side ------------------------------------------------------------------


class StreamLocalTransport(paramiko.Transport):
    """paramiko's Transport plus `direct-streamlocal@openssh.com` channels.

    `open_channel` only encodes the tcpip and x11 payloads, so this repeats
    its body with the streamlocal one: socket path, reserved string, reserved
    uint32 (OpenSSH PROTOCOL §2.4)."""

    def open_streamlocal(self, path: str, timeout: float) -> paramiko.Channel:
        if not self.active:
            raise paramiko.SSHException("SSH session not active")
        with self.lock:
            window_size = self._sanitize_window_size(None)
            max_packet_size = self._sanitize_packet_size(None)
            chanid = self._next_channel()
            m = Message()
            m.add_byte(cMSG_CHANNEL_OPEN)
            m.add_string("direct-streamlocal@openssh.com")
            m.add_int(chanid)
            m.add_int(window_size)
            m.add_int(max_packet_size)
            m.add_string(path)
            m.add_string("")
            m.add_int(0)
            chan = paramiko.Channel(chanid)
            self._channels.put(chanid, chan)
            self.channel_events[chanid] = event = threading.Event()
            self.channels_seen[chanid] = True
            chan._set_transport(self)
            chan._set_window(window_size, max_packet_size)
        self._send_user_message(m)
        if not event.wait(timeout):
            raise paramiko.SSHException("timeout opening the streamlocal channel")
        opened = self._channels.get(chanid)
        if opened is not None:
            return opened
        raise self.get_exception() or paramiko.SSHException("unable to open the streamlocal channel")


def _host_key_name(host: KvmHost) -> str:
    return host.hostname if host.port == 22 else f"[{host.hostname}]:{host.port}"


def dial_ssh(host: KvmHost, material: Material, deadline: Deadline) -> StreamLocalTransport:
    """TCP connect, SSH handshake, host-key check and public-key auth."""
    try:
        sock = socket.create_connection((host.hostname, host.port), timeout=max(deadline.remaining(), 0.001))
    except OSError as exc:
        raise DialError(Stage.TCP, f"ssh dial {host.address}: {_describe(exc)}") from exc
    transport = StreamLocalTransport(sock)
    try:
        transport.banner_timeout = transport.auth_timeout = max(deadline.remaining(), 0.001)
        name = _host_key_name(host)
        known = material.host_keys.lookup(name) if material.host_keys is not None else None
        if known:  # offer the known key type first, as SSHClient does
            opts = transport.get_security_options()
            first = [k for k in opts.key_types if k in known]
            opts.key_types = first + [k for k in opts.key_types if k not in first]
        transport.start_client(timeout=max(deadline.remaining(), 0.001))
        server_key = transport.get_remote_server_key()
        if material.host_keys is None:
            log.warning(
                "kvm host %s (%s): host key NOT verified (insecureIgnoreHostKey: true); got %s %s",
                host.name,
                host.address,
                server_key.get_name(),
                server_key.fingerprint,
            )
        elif not known:
            raise paramiko.SSHException(f"host key for {name} is not in known_hosts")
        elif known.get(server_key.get_name()) != server_key:
            raise paramiko.SSHException(
                f"host key for {name} does not match known_hosts (got {server_key.get_name()} {server_key.fingerprint})"
            )
        transport.auth_publickey(host.user, material.key)
        if not transport.is_authenticated():
            raise paramiko.AuthenticationException(f"user {host.user} was not authenticated")
        transport.set_keepalive(KEEPALIVE_SECONDS)
        return transport
    except DialError:
        transport.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as exc:
        transport.close()
        raise DialError(
            Stage.SSH_HANDSHAKE, f"ssh handshake with {host.user}@{host.address}: {_describe(exc)}"
        ) from exc


def open_libvirt_channel(transport: paramiko.Transport, host: KvmHost, deadline: Deadline) -> paramiko.Channel:
    """A byte stream to the host's libvirt socket: streamlocal forwarding, or
    an exec of `nc -U` / `virt-ssh-helper` where sshd forbids forwarding."""
    try:
        return transport.open_streamlocal(host.socket, max(deadline.remaining(), 0.001))
    except paramiko.ChannelException as exc:
        if exc.code == paramiko.common.OPEN_FAILED_CONNECT_FAILED:
            raise DialError(
                Stage.LIBVIRT_CONNECT, f"libvirt socket {host.socket} on {host.name}: connect failed ({exc.text})"
            ) from exc
        log.debug("kvm host %s: streamlocal refused (%s), falling back to exec", host.name, exc.text)
    try:
        chan = transport.open_session(timeout=max(deadline.remaining(), 0.001))
        sock, uri = shlex.quote(host.socket), shlex.quote(host.uri)
        chan.exec_command(
            f"if command -v nc >/dev/null 2>&1; then exec nc -U {sock}; else exec virt-ssh-helper {uri}; fi"
        )
        return chan
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise DialError(
            Stage.LIBVIRT_CONNECT, f"libvirt socket {host.socket} on {host.name}: {_describe(exc)}"
        ) from exc


class Bridge:
    """A private unix socket whose one client is pumped to/from an SSH channel."""

    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan
        self.dir = tempfile.mkdtemp(prefix="fleet-kvm-")
        self.path = os.path.join(self.dir, "libvirt.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.local: socket.socket | None = None
        self.closed = False
        threading.Thread(target=self._accept, name="kvm-bridge", daemon=True).start()

    def _accept(self) -> None:
        try:
            local, _ = self.listener.accept()
        except OSError:
            return
        finally:
            self._unlink()
        self.local = local
        if self.closed:
            local.close()
            return
        threading.Thread(target=self._up, args=(local,), name="kvm-bridge-up", daemon=True).start()
        self._down(local)

    def _up(self, local: socket.socket) -> None:
        try:
            while data := local.recv(_PUMP_CHUNK):
                self.chan.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def _down(self, local: socket.socket) -> None:
        try:
            while data := self.chan.recv(_PUMP_CHUNK):
                local.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def _unlink(self) -> None:
        try:
            self.listener.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.chan.close()
        if self.local is not None:
            with contextlib.suppress(OSError):
                self.local.shutdown(socket.SHUT_RDWR)
            self.local.close()
        else:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self._unlink()


def bridged_uri(uri: str, socket_path: str) -> str:
    """`qemu:///system` → `qemu+unix:///system?socket=<socket_path>`."""
    scheme, _, rest = uri.partition(":")
    sep = "&" if "?" in rest else "?"
    return f"{scheme}+unix:{rest}{sep}socket={socket_path}"


# --- one host's connection ---------------------------------------------------------


class Client(Protocol):
    """What the pool needs of a connection; tests supply fakes."""

    conn: Any  # a libvirt.virConnect (or a fake with the same methods)

    def alive(self) -> bool: ...

    def close(self, wait: float = 0.0) -> None: ...


class HostClient:
    def __init__(self, transport: paramiko.Transport, bridge: Bridge, conn: libvirt.virConnect) -> None:
        self.transport = transport
        self.bridge = bridge
        self.conn = conn

    def alive(self) -> bool:
        if not self.transport.is_active() or self.bridge.closed:
            return False
        try:
            return self.conn.isAlive() == 1
        except libvirt.libvirtError:
            return False

    def close(self, wait: float = 0.0) -> None:
        """Close the link, then libvirt's end in a thread (it can block),
        waiting up to `wait` s for it: at process exit a connection left to
        `virConnect.__del__` fails noisily once libvirt's module is torn down."""
        # The SSH side first: an RPC stuck on the link then fails at once,
        # so closing libvirt's end cannot block on it.
        self.bridge.close()
        self.transport.close()
        conn = self.conn

        def close_conn() -> None:
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()

        closer = threading.Thread(target=close_conn, name="kvm-close", daemon=True)
        closer.start()
        closer.join(wait)


Dialer = Callable[[KvmHost, Deadline], Client]


class SSHDialer:
    """The real dialer: material, tcp, ssh-handshake, libvirt-connect."""

    def __init__(self, material: MaterialCache) -> None:
        self.material = material

    def __call__(self, host: KvmHost, deadline: Deadline) -> HostClient:
        with dial_span(host.name, host.address):
            return self._dial(host, deadline)

    def _dial(self, host: KvmHost, deadline: Deadline) -> HostClient:
        material = self.material.load()
        transport = dial_ssh(host, material, deadline)
        bridge: Bridge | None = None
        try:
            chan = open_libvirt_channel(transport, host, deadline)
            bridge = Bridge(chan)
            uri = bridged_uri(host.uri, bridge.path)
            conn = run_until(deadline, lambda: libvirt.open(uri), on_abandon=transport.close)
        except DialError:
            transport.close()
            raise
        except (libvirt.libvirtError, DeadlineError, OSError, paramiko.SSHException) as exc:
            if bridge is not None:
                bridge.close()
            transport.close()
            raise DialError(Stage.LIBVIRT_CONNECT, f"libvirt connect via {host.socket} on {host.name}: {exc}") from exc
        return HostClient(transport, bridge, conn)


# --- the pool ------------------------------------------------------------------------


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
        from providers.base import ProviderError

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
