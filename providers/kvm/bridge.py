"""A private unix socket bridged to an SSH channel, so libvirt can reach
a host over SSH.

libvirt-python can only open a URI, so each connection gets a unix socket in
a 0700 temp dir; libvirt connects to `<driver>+unix:///…?socket=<that>`
(`bridged_uri`) and a pair of pump threads copies bytes between it and the
channel. Who calls: the dialer. Closing either side closes both, so an RPC
stuck on a dead link fails at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading

import paramiko

_PUMP_CHUNK = 256 * 1024


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
