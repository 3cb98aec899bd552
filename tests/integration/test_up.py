"""`fleet up`: the whole stack in the foreground; a child that dies is
restarted with backoff; Flower needs credentials; Ctrl-C stops it all,
quietly."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from fleet.health.stored import StoredResults
from fleet.store import Store
from fleet.testing.procs import die_with_parent, free_port, wait_for

pytestmark = pytest.mark.integration

PROVIDERS = {"providers": [
    {"name": "a", "type": "fake", "fake": {"targets": [{"name": "t"}]}},
    {"name": "b", "type": "fake", "fake": {"targets": [{"name": "u", "ready": False}]}},
]}


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"  # a zombie has exited


def started_pids(log: str) -> dict[str, int]:
    """role → pid, the latest `started`/`restarted` line of each."""
    return {role: int(pid) for _, role, pid in re.findall(r"fleet up: (started|restarted) (\S+) \(pid (\d+)\)", log)}


class Up:
    def __init__(self, tmp_path: Path, redis_url: str, *args: str, **env: str) -> None:
        cfg = tmp_path / "providers.yaml"
        cfg.write_text(yaml.safe_dump(PROVIDERS))
        full_env = {**os.environ, "FLEET_BROKER_URL": redis_url, "FLEET_METRICS_BIND_ADDRESS": "0", **env}
        for k in ("FLEET_KUBECONFIG", "FLOWER_BASIC_AUTH", "FLOWER_AUTH"):
            if k not in env:
                full_env.pop(k, None)
        self.path = tmp_path / "up.log"
        self._log = self.path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "up", "-c", str(cfg), "--provider-check-interval", "10s",
                                      *args], env=full_env, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)

    def log(self) -> str:
        return self.path.read_text(errors="replace")

    def ctrl_c(self) -> int:
        self.stop_offset = len(self.log())
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(30)

    def assert_quiet(self) -> None:
        """No KeyboardInterrupt anywhere, and no traceback at all once Ctrl-C was sent."""
        log = self.log()
        at = max(log.find("KeyboardInterrupt"), log.find("Traceback", self.stop_offset))
        assert at < 0, log[max(0, at - 1500):at + 3000]

    def close(self) -> None:
        kids = children(self.proc.pid)  # before fleet up goes: then they belong to init
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in set(kids + list(started_pids(self.log()).values())):
            with contextlib.suppress(OSError):  # only our children still running, never a reused pid
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if alive(pid) else b""
                if b"fleet.celery.app" in cmdline or b"fleet.cli" in cmdline:  # Celery roles, the prober, api, gateway
                    os.kill(pid, signal.SIGKILL)
        self._log.close()


@pytest.fixture
def up(tmp_path, redis_server):
    started: list[Up] = []

    def make(*args: str, **env: str) -> Up:
        u = Up(tmp_path, redis_server.url, *args, **env)
        started.append(u)
        return u

    yield make
    for u in started:
        u.close()


def test_up_runs_everything_and_ctrl_c_stops_it_quietly(up, redis_server):
    u = up("--no-flower")
    store = StoredResults(Store(redis_server.client()))
    wait_for(lambda: {"a", "b"} <= set(store.all()), 60, "both providers checked through fleet up")
    kids = children(u.proc.pid)
    assert len(kids) == 4  # two workers, controller, beat
    assert u.ctrl_c() == 0
    wait_for(lambda: not any(alive(k) for k in kids), 10, "every child to exit")
    log = u.log()
    assert "fleet up: stopped" in log
    u.assert_quiet()


def test_up_restarts_a_child_that_dies_and_leaves_the_others_alone(up):
    u = up("--no-flower")
    wait_for(lambda: len(started_pids(u.log())) == 4, 30, "four children started")
    wait_for(lambda: "ready." in u.log(), 60, "a worker to be ready")
    before = started_pids(u.log())
    os.kill(before["worker:b"], signal.SIGKILL)
    wait_for(lambda: started_pids(u.log())["worker:b"] != before["worker:b"], 20, "worker:b to be restarted")
    after = started_pids(u.log())
    log = u.log()
    assert "fleet up: worker:b exited with -9; restarting in 1s" in log
    assert alive(after["worker:b"]) and after["worker:b"] in children(u.proc.pid)
    assert {r: p for r, p in after.items() if r != "worker:b"} == {r: p for r, p in before.items() if r != "worker:b"}
    assert all(alive(p) for p in after.values())
    assert u.ctrl_c() == 0
    u.assert_quiet()


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on `port` (IPv4)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if state == "0A" and int(p, 16) == port:
            out.add(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
    return out


def test_up_runs_flower_on_loopback_with_generated_credentials(up):
    port = free_port()
    u = up("--flower-port", str(port))
    m = wait_for(lambda: re.search(r"with user 'fleet', password '([^']+)'", u.log()), 30, "the generated Flower password")
    password = m.group(1)
    assert u.log().count(password) == 1, "printed once"
    wait_for(lambda: listening_addresses(port), 60, "Flower to listen")
    assert listening_addresses(port) == {"127.0.0.1"}
    url = f"http://127.0.0.1:{port}/api/workers"
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(url, timeout=10)
    assert denied.value.code == 401
    denied.value.close()
    wrong = {"Authorization": "Basic " + base64.b64encode(b"fleet:guess").decode()}
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(urllib.request.Request(url, headers=wrong), timeout=10)
    assert denied.value.code == 401
    denied.value.close()
    auth = {"Authorization": "Basic " + base64.b64encode(f"fleet:{password}".encode()).decode()}
    with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=10) as resp:
        assert resp.status == 200
    assert u.ctrl_c() == 0
    u.assert_quiet()


def test_up_uses_the_users_flower_credentials(up):
    port = free_port()
    u = up("--flower-port", str(port), FLOWER_BASIC_AUTH="ops:s3cret-up")
    wait_for(lambda: listening_addresses(port), 60, "Flower to listen")
    url = f"http://127.0.0.1:{port}/api/workers"
    auth = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret-up").decode()}
    with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=10) as resp:
        assert resp.status == 200
    assert "s3cret-up" not in u.log() and "generated" not in u.log()
    assert u.ctrl_c() == 0


def test_up_runs_the_gateway_with_a_clients_file(up, tmp_path):
    clients = tmp_path / "clients.yaml"
    clients.write_text(yaml.safe_dump({"clients": {"demo": {"token": "up-gateway-token-0123456789"}}}))
    port = free_port()
    u = up("--no-flower", FLEET_GATEWAY_CLIENTS_FILE=str(clients), FLEET_GATEWAY_BIND_ADDRESS=f"127.0.0.1:{port}",
           FLEET_GATEWAY_METRICS_BIND_ADDRESS="0")
    wait_for(lambda: "gateway" in started_pids(u.log()), 30, "the gateway started")
    wait_for(lambda: listening_addresses(port) == {"127.0.0.1"}, 60, "the gateway to listen on loopback")
    auth = "Basic " + base64.b64encode(b"demo:up-gateway-token-0123456789").decode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
    with pytest.raises(urllib.error.HTTPError) as answer:  # the gateway answers: authenticated, but no Proxy yet
        opener.open(urllib.request.Request("http://127.0.0.1/", headers={"Proxy-Authorization": auth}), timeout=10)
    assert (answer.value.code, answer.value.headers["X-Fleet-Reason"]) == (503, "no-proxy")
    answer.value.close()
    assert "up-gateway-token" not in u.log()
    assert u.ctrl_c() == 0
    u.assert_quiet()
