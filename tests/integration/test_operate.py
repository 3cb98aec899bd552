"""What operators use, against real processes: `celery inspect` (our
commands and active_queues) and Flower's HTTP API."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from fleet.cli import commands
from fleet.health.stored import StoredResults
from fleet.store import Store
from fleet.testing.procs import free_port, wait_for

pytestmark = pytest.mark.integration

SENTINEL = "VENDOR-DATA-SECRET-9d1e"
PROVIDERS = [
    {"name": "edge-a", "type": "fake", "fake": {"targets": [{"name": "t1"}, {"name": "t2", "ready": False}]}},
    {"name": "edge-b", "type": "fake", "fake": {"targets": [{"name": "t3"}]}},
    {"name": "kvm-x", "type": "kvm", "kvm": {
        "sshKeyFile": "/nonexistent/key", "knownHostsFile": "/nonexistent/known_hosts", "vendorData": SENTINEL,
        "hosts": [{"name": "nas1", "address": "127.0.0.1:2", "user": "fleet"}]}},
]


@pytest.fixture
def stack(redis_server, make_stack):
    s = make_stack(redis_server.url, PROVIDERS)
    for p in PROVIDERS:
        s.worker(p["name"])
    s.controller()
    s.wait_ready("worker:edge-a", "worker:edge-b", "worker:kvm-x", "controller")
    return s


def test_active_queues_one_queue_per_worker(stack):
    answers = stack.sender.control.inspect(timeout=2).active_queues()
    queues = {worker.split("@")[0]: [q["name"] for q in qs] for worker, qs in answers.items()}
    assert queues == {"edge-a": ["provider.edge-a"], "edge-b": ["provider.edge-b"], "kvm-x": ["provider.kvm-x"],
                      "controller": ["fleet.controller"]}


def test_inspect_provider_status_and_config(stack, redis_server):
    store = StoredResults(Store(redis_server.client()))
    stack.send_check("edge-a")
    wait_for(lambda: store.latest("edge-a"), 20, "edge-a's result")

    # the plain CLI, as an operator types it
    out = subprocess.run([sys.executable, "-m", "celery", "-A", "fleet.celery.app", "inspect", "provider_status", "--json",
                          "--timeout", "3"], env=stack.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    answers = {k.split("@")[0]: v for k, v in json.loads(out.stdout).items()}
    assert answers["controller"] == {"role": "controller", "providers": []}
    (a,) = answers["edge-a"]["providers"]
    assert (a["name"], a["type"], a["queue"]) == ("edge-a", "fake", "provider.edge-a")
    assert [(t["name"], t["ready"], t["reason"]) for t in a["targets"]] == [("t1", True, "Reachable"), ("t2", False, "Unreachable")]
    assert a["lastCheck"] and a["connections"] is None
    (b,) = answers["edge-b"]["providers"]
    assert b["lastCheck"] is None and b["targets"] == []  # not checked yet in this worker

    cfg = stack.sender.control.inspect(timeout=3)._request("provider_config")
    by_worker = {k.split("@")[0]: v for k, v in cfg.items()}
    (kvm,) = by_worker["kvm-x"]["providers"]
    assert kvm["kvm"]["vendorData"] == "<redacted>"
    assert kvm["kvm"]["hosts"][0]["address"] == "127.0.0.1:2"
    assert SENTINEL not in json.dumps(cfg)
    assert [p["name"] for p in by_worker["controller"]["providers"]] == ["edge-a", "edge-b", "kvm-x"]


def test_kvm_connection_state_is_reported(stack):
    stack.send_check("kvm-x", timeout=3)
    def conns():
        ans = stack.sender.control.inspect(timeout=2)._request("provider_status")
        (kvm,) = next(v for k, v in ans.items() if k.startswith("kvm-x@"))["providers"]
        return kvm if kvm["connections"] and kvm["targets"] else None
    kvm = wait_for(conns, 30, "kvm-x's connection state after a check")
    assert kvm["connections"]["nas1"]["connected"] is False  # the key file is missing: never dialed through
    assert kvm["targets"][0]["reason"] == "SSHMaterialUnavailable"


def test_flower_lists_every_worker_with_its_queue(stack):
    port = free_port()
    stack.start("flower", [*commands.flower_argv(port), "--basic-auth=admin:s3cret"])
    url = f"http://127.0.0.1:{port}/api/workers?refresh=1"

    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, 30, "flower to listen")
    with pytest.raises(urllib.error.HTTPError) as denied:  # never open
        urllib.request.urlopen(url, timeout=5)
    assert denied.value.code == 401
    denied.value.close()

    auth = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}

    def workers():
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=10) as resp:
            body = json.loads(resp.read())
        return body if len(body) >= 4 else None

    body = wait_for(workers, 60, "flower to see all four workers", interval=1)
    queues = {name.split("@")[0]: [q["name"] for q in info.get("active_queues") or []] for name, info in body.items()}
    assert queues["edge-a"] == ["provider.edge-a"]
    assert queues["kvm-x"] == ["provider.kvm-x"]
    assert queues["controller"] == ["fleet.controller"]
