"""Helpers for the servers and processes tests start."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Popen preexec_fn: the child gets SIGTERM when the test process dies,
    even by SIGKILL, so no server outlives an interrupted run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
