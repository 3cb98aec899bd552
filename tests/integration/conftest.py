"""Real servers for the integration tests: redis-server on a free loopback
port, and fleet's own processes started with the same command lines as
production (`fleet.commands`). Everything is torn down after use."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import yaml
from celery import Celery

from fleet.celery import routing
from fleet.cli import commands
from tests.procs import die_with_parent

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], object], timeout: float = 30, what: str = "condition", interval: float = 0.05):
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # keep polling until the deadline
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


class RedisServer:
    """redis-server on a free loopback port, with deploy/redis' bound on one bulk string (2mb): without
    persistence (the default), or `persistent` (AOF with `--appendfsync everysec` in workdir/redis-data, as
    deploy/redis and the demo run it), which `restart` SIGKILLs and starts again on the same port and directory."""

    def __init__(self, workdir: Path, persistent: bool = False) -> None:
        self.persistent = persistent
        self.binary = shutil.which("redis-server")
        if not self.binary:
            pytest.fail("redis-server is not installed: run `make test`, which installs it")
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
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


@pytest.fixture
def redis_server(tmp_path):
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


class Stack:
    """fleet processes against one broker, with a providers file and env."""

    def __init__(self, tmp: Path, broker: str, providers: list[dict], env: dict[str, str]) -> None:
        self.tmp = tmp
        self.config_path = tmp / "providers.yaml"
        self.config_path.write_text(yaml.safe_dump({"providers": providers}))
        self.env = {
            **os.environ,
            "FLEET_PROVIDERS_CONFIG": str(self.config_path),
            "FLEET_BROKER_URL": broker,
            "FLEET_PROVIDER_CHECK_INTERVAL": "10s",
            "FLEET_PROVIDER_CHECK_TIMEOUT": "5s",
            "FLEET_METRICS_BIND_ADDRESS": "0",
            "FLEET_LOG_LEVEL": "info",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.broker = broker
        self.sender = Celery("fleet-test", broker=broker, set_as_current=False)
        # routed like production (fleet.celery.routing): senders never name a queue
        self.sender.conf.update(task_serializer="json", accept_content=["json"], task_routes=(routing.route,),
                                task_create_missing_queues=True)

    def start(self, role: str, argv: list[str]) -> subprocess.Popen:
        with open(self.tmp / f"{role.replace(':', '-')}.log", "ab") as log:
            p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=die_with_parent)
        self.procs[role] = p
        return p

    def worker(self, provider: str) -> subprocess.Popen:
        return self.start(f"worker:{provider}", commands.worker_argv(provider))

    def controller(self) -> subprocess.Popen:
        return self.start("controller", commands.controller_argv())

    def beat(self) -> subprocess.Popen:
        return self.start("beat", commands.beat_argv())

    def log(self, role: str) -> str:
        path = self.tmp / f"{role.replace(':', '-')}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, role: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(role)
        os.killpg(p.pid, sig)
        p.wait(10)

    def wait_ready(self, *roles: str, timeout: float = 40) -> None:
        for role in roles:
            wait_for(lambda role=role: "ready." in self.log(role), timeout, f"{role} to be ready:\n{self.log(role)[-2000:]}")

    def send_check(self, provider: str, timeout: float = 5.0) -> None:
        from fleet.health.dispatch import send_check

        send_check(self.sender, provider, timeout, 10.0)

    def fleet(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=self.env, capture_output=True, text=True,
                              timeout=60)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def make_stack(tmp_path):
    stacks: list[Stack] = []

    def make(broker: str, providers: list[dict], **env: str) -> Stack:
        s = Stack(tmp_path, broker, providers, env)
        stacks.append(s)
        return s

    yield make
    for s in stacks:
        s.stop()
