"""redis-server on a free loopback port, as deploy/redis runs it (tests'
`redis_server` fixture, benchmarks)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from fleet.testing.procs import die_with_parent, free_port, wait_for


class RedisServer:
    """redis-server on a free loopback port, with deploy/redis' bound on one bulk string (2mb): without
    persistence (the default), or `persistent` (AOF with `--appendfsync everysec` in workdir/redis-data, as
    deploy/redis and the demo run it), which `restart` SIGKILLs and starts again on the same port and directory."""

    def __init__(self, workdir: Path, persistent: bool = False) -> None:
        self.persistent = persistent
        binary = shutil.which("redis-server")
        if not binary:
            raise RuntimeError("redis-server is not installed: run `make test`, which installs it")
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._clients: list[redis.Redis] = []

    def start(self) -> None:
        data = self.workdir / "redis-data" if self.persistent else self.workdir
        data.mkdir(exist_ok=True)
        persistence = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence, "--dir", str(data),
             "--proto-max-bulk-len", "2mb"],  # as deployed: a message over it is refused, as a deployment refuses it
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )
        wait_for(self.ping, 10, "redis-server to answer")

    def restart(self) -> None:
        """SIGKILL (nothing flushed on the way out) and start again on the same port and data."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        for c in self._clients:
            c.close()
        self._clients.clear()
        self.start()

    def ping(self) -> bool:
        client = redis.Redis(port=self.port)
        try:
            return bool(client.ping())
        finally:
            client.close()

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def client(self) -> redis.Redis:
        """A client closed when the server stops (a socket left to the GC is a ResourceWarning)."""
        c = redis.Redis(port=self.port)
        self._clients.append(c)
        return c
