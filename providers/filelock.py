"""One host-wide lock a provider's state files are changed under: flock on a file (per open file, so threads of
one process exclude each other too), polled until the call's deadline, released when the holder dies. Used by
the providers that keep their truth in files on the worker's host (local, upstream)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator

from providers.base import Deadline

POLL = 0.02  # seconds between tries


@contextlib.contextmanager
def held(path: str, deadline: Deadline, busy: Callable[[], Exception]) -> Iterator[None]:
    """The lock on `path` (made 0600 when missing) for the block; `busy()` raised once the deadline passed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline.expired:
                    raise busy() from None
                time.sleep(min(POLL, deadline.remaining()))
        yield
    finally:
        os.close(fd)  # releases the lock
