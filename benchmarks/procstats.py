"""What the benchmarks read about their processes, in one place: CPU seconds
and memory from /proc, and a free loopback port."""

from __future__ import annotations

import os
import socket


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
