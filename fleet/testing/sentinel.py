"""A Redis master, a replica and three sentinels on loopback (redis-server in
its --sentinel mode: Debian's redis-server binary is the sentinel too), for the
failover tests. Quick timings: a master is down after 1 s, a failover may take 5 s."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
from pathlib import Path

import redis

from fleet.testing.procs import die_with_parent, free_port, wait_for

MASTER_NAME = "fleet"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class SentinelSet:
    """`start()` the five servers, `url` the broker URL naming the sentinels, `stop()` them all."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if not binary:
            raise RuntimeError("redis-server is not installed: run `make test`, which installs it")
        self.binary = binary
        self.dir = workdir
        self.ports = {"a": free_port(), "b": free_port()}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        hosts = ";".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"sentinel://{hosts}/0?master_name={MASTER_NAME}"

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115  (closed with the process)
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        log.close()

    def start(self) -> SentinelSet:
        for name, port in self.ports.items():
            d = self.dir / name
            d.mkdir(exist_ok=True)
            argv = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
                    "--appendonly", "yes", "--appendfsync", "everysec"]
            if name == "b":
                argv += ["--replicaof", "127.0.0.1", str(self.ports["a"])]
            self._spawn(name, argv)
        for port in self.ports.values():
            wait_for(functools.partial(self._ping, port), 10, f"redis on {port}")
        for i, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{i}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.ports['a']} 2\n"
                            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                            f"sentinel parallel-syncs {MASTER_NAME} 1\n")
            self._spawn(f"sentinel-{i}", [self.binary, str(conf), "--sentinel"])
        wait_for(lambda: all(self._ping(p) for p in self.sentinel_ports), 10, "the sentinels")
        wait_for(lambda: self.master() == ("127.0.0.1", self.ports["a"]), 10, "the sentinels to agree on the master")
        wait_for(lambda: self._replicas(self.ports["a"]) >= 1, 10, "the replica to sync")
        return self

    def _ping(self, port: int) -> bool:
        c = redis.Redis(port=port, socket_timeout=1)
        try:
            return bool(c.ping())
        except redis.RedisError:
            return False
        finally:
            c.close()

    def _replicas(self, port: int) -> int:
        c = redis.Redis(port=port, socket_timeout=1)
        try:
            return int(c.info("replication").get("connected_slaves", 0))
        finally:
            c.close()

    def master(self) -> tuple[str, int] | None:
        c = redis.Redis(port=self.sentinel_ports[0], socket_timeout=1)
        try:
            got = c.execute_command(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            return (got[0].decode(), int(got[1])) if got else None
        except redis.RedisError:
            return None
        finally:
            c.close()

    def kill_master(self) -> str:
        """SIGKILL the current master; its name (a or b)."""
        _, port = self.master() or ("", 0)
        name = next(n for n, p in self.ports.items() if p == port)
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)
        return name

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
