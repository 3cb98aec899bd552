"""The real dialer: one host's SSH + libvirt connection, stage by stage
(material, tcp, ssh-handshake, libvirt-connect), and the `HostClient` it
hands to the pool.

Who calls: `HostPool` (pool.py), on a host's first use or after its link
dropped, under a `kvm.dial` span that records the failing stage. The SSH
side is opened and verified before libvirt is asked to connect, so a failure
names where it broke. libvirt prints every error to stderr by default; we
raise them instead, so its handler is silenced once, here, where every kvm
connection is made.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import libvirt
import paramiko

from providers.base import Deadline
from providers.kvm.bridge import Bridge, bridged_uri
from providers.kvm.config import KvmHost
from providers.kvm.deadline import run_until
from providers.kvm.errors import DeadlineError, DialError, Stage
from providers.kvm.material import MaterialCache
from providers.kvm.ssh import dial_ssh, open_libvirt_channel
from providers.kvm.tracing import dial_span


def _quiet_libvirt(_ctx: Any, _err: Any) -> None:
    """libvirt prints every error to stderr by default; we raise them instead."""


libvirt.registerErrorHandler(_quiet_libvirt, None)


class HostClient:
    """The pool's `Client` over a real link: SSH transport, bridge, libvirt connection."""

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
