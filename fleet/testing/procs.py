"""The lifetime of the servers and processes tests and benchmarks start: a
child that dies with its parent, a process group ended in full, a free
loopback port, and polling until a condition holds."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

PR_SET_PDEATHSIG = 1
T = TypeVar("T")


def die_with_parent() -> None:
    """Popen preexec_fn: the child gets SIGTERM when the test process dies,
    even by SIGKILL, so no server outlives an interrupted run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_group(proc: subprocess.Popen[bytes] | None, grace: float = 15.0) -> None:
    """End a child started with `start_new_session=True` and its whole process
    group: SIGTERM, then SIGKILL if it has not exited after `grace` seconds.
    Nothing when it is not running."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def free_port() -> int:
    """A loopback port free now (the kernel's pick; another process may take it before it is bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], T], timeout: float = 30, what: str = "condition", interval: float = 0.05) -> T:
    """`cond()`'s first truthy value, polled every `interval` s; AssertionError
    naming `what` (and the last exception `cond` raised) after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # keep polling until the deadline
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))
