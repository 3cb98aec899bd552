"""The controller's own start-up and clock, through real processes: a failed
start-up (RBAC, a busy metrics address) ends the process with one line
rather than a controller that consumes without cleanup or /metrics; and with
beat SIGKILLed, the controller's own sweep still turns the provider
CheckOverdue, saying that rounds stopped, and the last-round gauge stays put."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from fleet.celery import beat
from fleet.store import Store
from fleet.testing.procs import free_port, wait_for

pytestmark = pytest.mark.integration

ONE = [{"name": "p", "type": "fake", "fake": {"targets": [{"name": "edge-1"}]}}]


def exited(proc, timeout: float = 40) -> int:
    wait_for(lambda: proc.poll() is not None, timeout, "the controller to exit")
    return proc.returncode


def test_startup_without_rbac_exits_with_one_line(redis_server, make_stack, kubeapi):
    kubeapi.deny("list")  # start-up cleanup lists our ProviderHealth objects
    stack = make_stack(redis_server.url, ONE, FLEET_KUBECONFIG=kubeapi.kubeconfig_path)
    assert exited(stack.controller()) != 0
    log = stack.log("controller")
    (line,) = [x for x in log.splitlines() if "start-up failed" in x]
    assert "forbidden (403)" in line and "list" in line, line
    assert "Traceback" not in log, log[-3000:]


def test_busy_metrics_address_exits_naming_it(redis_server, make_stack):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        stack = make_stack(redis_server.url, ONE, FLEET_METRICS_BIND_ADDRESS=address)
        assert exited(stack.controller()) != 0
    log = stack.log("controller")
    assert f"cannot serve /metrics on {address}" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_beat_killed_controller_reports_overdue_on_its_own_clock(redis_server, make_stack, kubeapi):
    metrics = f"127.0.0.1:{free_port()}"
    stack = make_stack(redis_server.url, ONE, FLEET_KUBECONFIG=kubeapi.kubeconfig_path, FLEET_METRICS_BIND_ADDRESS=metrics)
    stack.worker("p")
    stack.controller()
    stack.wait_ready("worker:p", "controller")
    stack.beat()
    r = redis_server.client()
    wait_for(lambda: (kubeapi.objects.get("p") or {}).get("status", {}).get("lastCheckTime"), 40, "a first result")
    stack.kill("beat")
    last = beat.last_round(Store(r))
    assert last is not None

    def ready():
        conds = (kubeapi.objects["p"].get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready"), {})

    # 2 x 10 s + 5 s after the last result, plus one sweep period (5 s)
    wait_for(lambda: ready().get("reason") == "CheckOverdue", 45, "CheckOverdue without beat", interval=0.5)
    assert "is fleet beat running?" in ready()["message"], ready()
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    (sample,) = [x for x in body.splitlines() if x.startswith("proxy_operator_last_round_timestamp_seconds ")]
    assert float(sample.split()[1]) == pytest.approx(last), "the gauge stays at beat's last round"
    assert stack.procs["controller"].poll() is None
