"""The SSH side of a host's connection: dial, verify, authenticate, and
open a byte stream to the host's libvirt socket.

Who calls: the dialer (dialer.py). The stream is a
`direct-streamlocal@openssh.com` channel; paramiko has no argument for the
socket path, hence `StreamLocalTransport`. When the host's sshd forbids
forwarding, an exec of `nc -U <socket>` (or `virt-ssh-helper`) on the host
takes its place. Failures are `DialError`s tagged with their stage (tcp,
ssh-handshake, libvirt-connect), because libvirt would report all of them as
the same generic error.
"""

from __future__ import annotations

import logging
import shlex
import socket
import threading

import paramiko
from paramiko.common import cMSG_CHANNEL_OPEN
from paramiko.message import Message

from providers.base import Deadline
from providers.kvm.config import KvmHost
from providers.kvm.errors import DialError, Stage, describe
from providers.kvm.material import Material

log = logging.getLogger("providers.kvm")

KEEPALIVE_SECONDS = 15


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
        raise DialError(Stage.TCP, f"ssh dial {host.address}: {describe(exc)}") from exc
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
            Stage.SSH_HANDSHAKE, f"ssh handshake with {host.user}@{host.address}: {describe(exc)}"
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
            Stage.LIBVIRT_CONNECT, f"libvirt socket {host.socket} on {host.name}: {describe(exc)}"
        ) from exc
