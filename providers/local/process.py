"""Processes as /proc shows them: identity, liveness, listening sockets,
and stopping one.

A process is named by its pid *and* its start time (`/proc/<pid>/stat`
field 22, clock ticks since boot): a recorded pid that the kernel has since
given to an unrelated process has another start time, so it is never taken
for our squid, and never signalled. A zombie (squid exited, nobody reaped it
yet: a container's init may never) counts as dead.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import sys
import time

from providers.base import Deadline

POLL = 0.02
TCP_LISTEN = "0A"


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3… of /proc/<pid>/stat (after the parenthesised comm, which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    return fields if len(fields) >= 20 else None


def start_ticks(pid: int) -> int | None:
    """The process's start time, or None if there is no such live process."""
    if pid <= 0:
        return None
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])  # field 22: starttime
    except ValueError:
        return None


def alive(pid: int, ticks: int) -> bool:
    """`pid` is still the process that started at `ticks`, and not a zombie."""
    return pid > 0 and ticks > 0 and start_ticks(pid) == ticks


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def find(argument: str) -> list[tuple[int, int]]:
    """Live processes with `argument` as one of their arguments, as (pid, ticks).
    A fallback for a record whose starter died before writing the pid."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and argument in cmdline(int(entry)):
            ticks = start_ticks(int(entry))
            if ticks is not None:
                out.append((int(entry), ticks))
    return out


def _proc_net_address(ip: str, port: int) -> tuple[str, str]:
    """How /proc/net/tcp{,6} spells ip:port (each 32-bit word in host byte order)."""
    addr = ipaddress.ip_address(ip)
    packed = addr.packed
    if sys.byteorder == "little":
        words = [packed[i:i + 4][::-1] for i in range(0, len(packed), 4)]
    else:
        words = [packed[i:i + 4] for i in range(0, len(packed), 4)]
    table = "tcp" if addr.version == 4 else "tcp6"
    return table, "".join(w.hex().upper() for w in words) + f":{port:04X}"


def _socket_inodes(pid: int) -> set[str] | None:
    """Inodes of the sockets `pid` holds; None when its fds can't be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    out = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                out.add(target[8:-1])
    return out


def listening(pid: int, ip: str, port: int) -> bool:
    """Whether `pid` has a listening TCP socket on ip:port (squid may open an
    IPv6 socket for an IPv4 address: the v4-mapped form counts too). Read from
    /proc, so the check never makes a connection squid would log."""
    wanted = [_proc_net_address(ip, port)]
    addr = ipaddress.ip_address(ip)
    if addr.version == 4:
        wanted.append(_proc_net_address(f"::ffff:{ip}", port))
    inodes = _socket_inodes(pid)
    for table, local in wanted:
        try:
            with open(f"/proc/net/{table}", encoding="ascii") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[1] == local and cols[3] == TCP_LISTEN and (inodes is None or cols[9] in inodes):
                return True
    return False


def signal_if_alive(pid: int, ticks: int, sig: int) -> bool:
    """Send `sig` only if pid is still the process started at ticks. The
    pidfd, opened before the start time is compared, pins that process: the
    pid cannot be reused between the check and the signal."""
    if pid <= 0:
        return False
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd (an old kernel, a sandbox): the small race stays
        fd = None
    try:
        if not alive(pid, ticks):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
    return True


def wait_gone(pid: int, ticks: int, until: float) -> bool:
    """Poll until the process is gone or the monotonic time `until`."""
    while alive(pid, ticks):
        left = until - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL, left))
    return True


def stop(pid: int, ticks: int, deadline: Deadline, grace: float) -> bool:
    """SIGTERM, then SIGKILL after `grace` seconds, all within the deadline.
    True once the process is gone (or was never ours)."""
    if not signal_if_alive(pid, ticks, signal.SIGTERM):
        return True
    if wait_gone(pid, ticks, min(time.monotonic() + grace, deadline.at)):
        return True
    signal_if_alive(pid, ticks, signal.SIGKILL)
    return wait_gone(pid, ticks, deadline.at)
