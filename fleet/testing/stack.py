"""fleet's own processes (worker, controller, beat, the `fleet` command)
started with production's command lines (`fleet.cli.commands`) against one
broker and providers file (tests' `make_stack` fixture, benchmarks)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from celery import Celery

from fleet.celery import routing
from fleet.cli import commands
from fleet.testing.procs import die_with_parent, wait_for


class Stack:
    """fleet processes against one broker, with a providers file and env."""

    def __init__(self, tmp: Path, broker: str, providers: list[dict[str, Any]], env: dict[str, str]) -> None:
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
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.broker = broker
        self.sender = Celery("fleet-test", broker=broker, set_as_current=False)
        # routed like production (fleet.celery.routing): senders never name a queue
        self.sender.conf.update(task_serializer="json", accept_content=["json"], task_routes=(routing.route,),
                                task_create_missing_queues=True)

    def start(self, role: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{role.replace(':', '-')}.log", "ab") as log:
            p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=die_with_parent)
        self.procs[role] = p
        return p

    def worker(self, provider: str) -> subprocess.Popen[bytes]:
        return self.start(f"worker:{provider}", commands.worker_argv(provider))

    def controller(self) -> subprocess.Popen[bytes]:
        return self.start("controller", commands.controller_argv())

    def beat(self) -> subprocess.Popen[bytes]:
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
            wait_for(functools.partial(self._ready, role), timeout, f"{role} to be ready:\n{self.log(role)[-2000:]}")

    def _ready(self, role: str) -> bool:
        return "ready." in self.log(role)

    def send_check(self, provider: str, timeout: float = 5.0) -> None:
        from fleet.health.dispatch import send_check

        send_check(self.sender, provider, timeout, 10.0)

    def fleet(self, *args: str) -> subprocess.CompletedProcess[str]:
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
