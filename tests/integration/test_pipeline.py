"""A full round through real processes: beat → provider workers on their own
queues → controller → Redis, ProviderHealth (HTTP fake of the API) and
/metrics; plus the failure paths: no worker, a SIGKILLed worker, a Redis
restart."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from fleet.health.stored import StoredResults
from fleet.store import Store
from fleet.testing.procs import free_port, wait_for

pytestmark = pytest.mark.integration

PROVIDERS = [
    {"name": "lab-ok", "type": "fake", "fake": {"latencyMs": 30, "targets": [{"name": "edge-1"}, {"name": "edge-2"}]}},
    {"name": "lab-bad", "type": "fake",
     "fake": {"targets": [{"name": "edge-3"}, {"name": "edge-4", "ready": False, "reason": "Unreachable", "message": "refused"}]}},
    {"name": "nochecks", "type": "fake", "fake": {"checks": False}},
    {"name": "orphan", "type": "fake", "fake": {"targets": [{"name": "x"}]}},  # no worker runs for it
]


def ready_condition(obj):
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def test_full_round_from_beat_tick_to_status_and_metrics(redis_server, make_stack, kubeapi):
    metrics_port = free_port()
    stack = make_stack(redis_server.url, PROVIDERS, FLEET_KUBECONFIG=kubeapi.kubeconfig_path,
                       FLEET_METRICS_BIND_ADDRESS=f"127.0.0.1:{metrics_port}", FLEET_INSTALLATION="pipeline")
    # The orphan has been expected for a while: no worker consumes its queue.
    store = StoredResults(Store(redis_server.client()))
    store.store.marks.first_seen("orphan", time.time() - 60)
    for name in ("lab-ok", "lab-bad", "nochecks"):
        stack.worker(name)
    stack.controller()
    stack.wait_ready("worker:lab-ok", "worker:lab-bad", "worker:nochecks", "controller")
    stack.beat()  # the first round runs at start

    wait_for(lambda: {"lab-ok", "lab-bad", "nochecks"} <= set(store.all()), 40, "three stored results")
    results = store.all()
    assert "orphan" not in results
    ok = results["lab-ok"]
    assert ok.worker.startswith("lab-ok@") and ok.scheduled_at and ok.scheduled_at <= ok.checked_at
    assert [t.name for t in ok.targets] == ["edge-1", "edge-2"] and ok.all_ready

    def statuses():
        objs = kubeapi.objects
        if not all(n in objs and "status" in objs[n] for n in ("lab-ok", "lab-bad", "nochecks", "orphan")):
            return None
        return {n: ready_condition(objs[n]) for n in ("lab-ok", "lab-bad", "nochecks", "orphan")}

    conds = wait_for(statuses, 30, "four ProviderHealth statuses")
    assert (conds["lab-ok"]["status"], conds["lab-ok"]["reason"]) == ("True", "AllTargetsReady")
    assert (conds["lab-bad"]["status"], conds["lab-bad"]["message"]) == ("False", "edge-4: Unreachable")
    assert (conds["nochecks"]["status"], conds["nochecks"]["reason"]) == ("Unknown", "ChecksNotImplemented")
    assert (conds["orphan"]["status"], conds["orphan"]["reason"]) == ("Unknown", "CheckOverdue")
    assert "provider.orphan" in conds["orphan"]["message"]
    assert kubeapi.objects["lab-bad"]["status"]["targetsReady"] == "1/2"
    assert kubeapi.objects["lab-ok"]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "egress-proxies-operator",
                                                                "fleet.crawl.example.com/installation": "pipeline"}
    assert {r.field_manager for r in kubeapi.requests if r.method in ("POST", "PATCH")} == {"fleet-controller"}
    # one status write per provider for that round
    assert len([r for r in kubeapi.requests if r.method == "PATCH" and r.path.endswith("/lab-ok/status")]) == 1

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    assert 'proxy_operator_provider_target_up{provider="lab-ok",target="edge-1"} 1.0' in body
    assert 'proxy_operator_provider_target_up{provider="lab-bad",target="edge-4"} 0.0' in body
    assert f'proxy_operator_provider_check_timestamp_seconds{{provider="lab-ok",target="edge-2"}} {ok.checked_at!r}' \
        in body or 'proxy_operator_provider_check_timestamp_seconds{provider="lab-ok",target="edge-2"}' in body
    assert 'proxy_operator_provider_check_duration_seconds{provider="lab-ok",target="edge-1"} 0.03' in body
    assert 'target="x"' not in body  # never checked: no series
    assert 'proxy_operator_provider_queue_length{provider="orphan",queue="provider.orphan"}' in body
    assert 'proxy_operator_provider_workers{provider="lab-ok"} 1.0' in body  # heartbeats
    assert 'proxy_operator_provider_workers{provider="orphan"} 0.0' in body
    assert 'proxy_operator_provider_check_overdue{provider="orphan"} 1.0' in body
    assert 'proxy_operator_results_dropped_total{reason="unconfigured"} 0.0' in body  # the controller's counters
    assert 'proxy_operator_foreign_objects_skipped_total{kind="ProviderHealth"} 0.0' in body
    assert 'proxy_operator_provider_check_overdue{provider="lab-ok"} 0.0' in body
    assert "proxy_operator_provider_check_interval_seconds 10.0" in body

    # fleet get ph reads the same from Redis, no cluster needed
    out = stack.fleet("get", "ph", "-o", "json")
    assert out.returncode == 0, out.stderr
    rows = {r["provider"]: r for r in json.loads(out.stdout)}
    assert rows["lab-ok"]["ready"] == "True" and rows["orphan"]["reason"] == "CheckOverdue"
    assert rows["lab-bad"]["targets"][1]["message"] == "refused"
    table = stack.fleet("get", "ph").stdout
    assert "lab-bad" in table and "TargetsNotReady" in table


def test_sigkilled_worker_loses_no_later_result(redis_server, make_stack, kubeapi):
    providers = [{"name": "slow", "type": "fake", "fake": {"latencyMs": 3000, "targets": [{"name": "t"}]}}]
    stack = make_stack(redis_server.url, providers, FLEET_KUBECONFIG=kubeapi.kubeconfig_path)
    store = StoredResults(Store(redis_server.client()))
    stack.worker("slow")
    stack.controller()
    stack.wait_ready("worker:slow", "controller")
    stack.send_check("slow")

    inspector = stack.sender.control.inspect(timeout=1)
    wait_for(lambda: any((inspector.active() or {}).values()), 20, "the check to be running")
    stack.kill("worker:slow")  # SIGKILL mid-check
    assert store.latest("slow") is None

    stack.worker("slow")
    stack.wait_ready("worker:slow")
    sent = time.time()
    stack.send_check("slow")  # the next round
    r = wait_for(lambda: (x := store.latest("slow")) and x.checked_at > sent and x, 30, "the next round's result")
    assert r.all_ready
    wait_for(lambda: ready_condition(kubeapi.objects["slow"])["status"] == "True", 10, "the status to converge")


def test_redis_restart_between_rounds_loses_no_later_result(redis_server, make_stack, kubeapi):
    providers = [{"name": "p", "type": "fake", "fake": {"targets": [{"name": "t"}]}}]
    # every round written (--status-heartbeat 0), so the status shows the write path works after the restart
    stack = make_stack(redis_server.url, providers, FLEET_KUBECONFIG=kubeapi.kubeconfig_path, FLEET_STATUS_HEARTBEAT="0")
    store = StoredResults(Store(redis_server.client()))
    stack.worker("p")
    stack.controller()
    stack.wait_ready("worker:p", "controller")
    stack.send_check("p")
    first = wait_for(lambda: store.latest("p"), 20, "the first result")

    redis_server.stop()
    redis_server.start()  # same port, empty: nothing persisted
    assert store.latest("p") is None

    def next_round():
        stack.send_check("p")
        return wait_for(lambda: store.latest("p"), 3, "a result after the restart")

    r = wait_for(next_round, 60, "workers and controller to reconnect and record", interval=0.5)
    assert r.checked_at > first.checked_at
    # nobody crashed on the way (kombu's closed-channel bug: fleet.celery.brokerfix)
    assert all(p.poll() is None for p in stack.procs.values())
    assert "Unrecoverable" not in stack.log("controller") + stack.log("worker:p")
    wait_for(lambda: kubeapi.objects["p"]["status"]["lastCheckTime"] >= time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(r.checked_at))), 10, "the status to follow")
