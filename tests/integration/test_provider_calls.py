"""Provider calls through real redis and a real provider worker process on
the fake provider: outcomes of fleet.get_instance / delete_instance /
list_instances, and their counters and histogram on the worker's /metrics."""

from __future__ import annotations

import urllib.request

import pytest
from celery import Celery

from fleet.testing.procs import free_port, wait_for

pytestmark = pytest.mark.integration


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def test_provider_calls_on_a_real_worker(redis_server, make_stack):
    port = free_port()
    stack = make_stack(redis_server.url, [{"name": "edge", "type": "fake"}],
                       FLEET_WORKER_METRICS_BIND_ADDRESS=f"127.0.0.1:{port}")
    stack.worker("edge")
    stack.wait_ready("worker:edge")
    # The worker's series exist at 0 before any call.
    text = wait_for(lambda: scrape(port), 20, "the worker's /metrics")
    assert 'proxy_operator_provider_requests_total{op="get",provider="edge",result="ok"} 0.0' in text

    # Results are off app-wide (the controller will read outcomes through a
    # link); this test asks for them per message.
    client = Celery("fleet-test-calls", broker=redis_server.url, backend=redis_server.url, set_as_current=False)
    client.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])

    def call(name: str, **kwargs) -> dict:
        res = client.send_task(name, kwargs={"provider": "edge", "timeout": 5, **kwargs}, queue="provider.edge",
                               ignore_result=False)
        return res.get(timeout=30)

    listed = call("fleet.list_instances")
    assert listed == {"ok": True, "provider": "edge", "op": "list", "attempt": 1, "result": []}
    gone = call("fleet.get_instance", provider_id="fake/proxy-a", attempt=3)
    assert gone["ok"] is False and gone["error_class"] == "not_found" and gone["step"] == {"gone": True}
    assert gone["attempt"] == 3 and "fake/proxy-a" in gone["message"]
    latched = call("fleet.get_instance", provider_id="not-a-fake-id")
    assert latched["error_class"] == "permanent" and latched["step"] == {"latch": "PermanentError"}
    assert call("fleet.delete_instance", provider_id="fake/proxy-a") == {
        "ok": True, "provider": "edge", "op": "delete", "attempt": 1, "result": None}
    refused = call("fleet.get_instance", provider_id="fake/x", cloud_init="SENTINEL-cloud-init")
    assert refused["error_class"] == "invalid" and "SENTINEL" not in str(refused)

    text = scrape(port)
    for line in (
        'proxy_operator_provider_requests_total{op="list",provider="edge",result="ok"} 1.0',
        'proxy_operator_provider_requests_total{op="get",provider="edge",result="not_found"} 1.0',
        'proxy_operator_provider_requests_total{op="get",provider="edge",result="permanent"} 1.0',
        'proxy_operator_provider_requests_total{op="delete",provider="edge",result="ok"} 1.0',
        'proxy_operator_provider_requests_total{op="get",provider="edge",result="ok"} 0.0',
        'proxy_operator_provider_request_duration_seconds_count{op="get",provider="edge"} 2.0',
    ):
        assert line in text, text
    assert "SENTINEL" not in stack.log("worker:edge")
