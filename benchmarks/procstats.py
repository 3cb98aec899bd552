"""What the benchmarks do with their processes, in one place: CPU seconds
and memory from /proc, a free loopback port, stopping them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterable


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB: now and the peak."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out.get("VmRSS", 0.0), out.get("VmHWM", 0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(procs: Iterable[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM each process still running (its whole group when it leads one:
    the fleet roles start with `start_new_session`), then SIGKILL what is left
    after `grace` seconds."""
    procs = list(procs)
    for p in reversed(procs):
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(p.pid) == p.pid:
                    os.killpg(p.pid, signal.SIGTERM)
                else:
                    p.terminate()
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
