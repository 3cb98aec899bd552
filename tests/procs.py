"""Helpers for the servers and processes tests start."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Popen preexec_fn: the child gets SIGTERM when the test process dies,
    even by SIGKILL, so no server outlives an interrupted run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_group(proc: subprocess.Popen | None, grace: float = 15.0) -> None:
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
