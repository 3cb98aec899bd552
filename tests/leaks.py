"""Counting what an abandoned or stuck call can leak: threads and sockets."""

from __future__ import annotations

import contextlib
import os
import threading


def threads_named(name: str) -> int:
    """Live threads called exactly `name` (e.g. `check-<provider>`)."""
    return sum(t.name == name and t.is_alive() for t in threading.enumerate())


def open_sockets() -> int:
    """Sockets this process holds open, from /proc/self/fd."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own fd)
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return n
