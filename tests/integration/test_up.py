"""`fleet up`: the whole stack in the foreground; Ctrl-C stops all of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleet.store import Store
from tests.integration.conftest import wait_for
from tests.procs import die_with_parent

pytestmark = pytest.mark.integration


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"  # a zombie has exited


def test_up_runs_everything_and_ctrl_c_stops_it(redis_server, tmp_path):
    cfg = tmp_path / "providers.yaml"
    cfg.write_text(yaml.safe_dump({"providers": [
        {"name": "a", "type": "fake", "fake": {"targets": [{"name": "t"}]}},
        {"name": "b", "type": "fake", "fake": {"targets": [{"name": "u", "ready": False}]}},
    ]}))
    env = {**os.environ, "FLEET_BROKER_URL": redis_server.url, "FLEET_METRICS_BIND_ADDRESS": "0"}
    env.pop("FLEET_KUBECONFIG", None)
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "-c", str(cfg), "--no-flower",
                           "--provider-check-interval", "10s"], env=env, stdout=log, stderr=subprocess.STDOUT,
                          preexec_fn=die_with_parent)
    try:
        store = Store(redis_server.client())
        wait_for(lambda: {"a", "b"} <= set(store.all()), 60, "both providers checked through fleet up")
        kids = children(up.pid)
        assert len(kids) == 4  # two workers, controller, beat
        up.send_signal(signal.SIGINT)
        assert up.wait(30) == 0
        wait_for(lambda: not any(alive(k) for k in kids), 10, "every child to exit")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        log.close()
    text = (tmp_path / "up.log").read_text()
    assert "fleet up: stopped" in text
