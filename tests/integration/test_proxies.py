"""The Proxy lifecycle with real parts: redis-server, a provider worker and
the controller as `celery worker` processes, standalone manifests, and
`fleet get px`. Crashes: the controller SIGKILLed right after a Create was
sent, the provider worker SIGKILLed, Redis restarted mid-lifecycle.

The fake provider keeps its instances in a file that outlives its worker, as
a backend would; in the crash cases it makes every create a new instance
(`idempotentCreate: false`), so a create sent twice shows as two instances
with one UID; tests/integration/test_local_proxies.py runs real Squid proxies."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from celery import Celery

from fleet.proxies.reconciler import CLAIM_TTL
from fleet.testing.procs import wait_for

pytestmark = pytest.mark.integration

MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: edge
  port: {port}
  cloudInit: {{inline: "#cloud-config SENTINEL-cloud-init-{name}"}}
"""


def declare(directory, name: str, port: int = 3128) -> None:
    (directory / f"{name}.yaml").write_text(MANIFEST.format(name=name, port=port))


def proxies(stack) -> dict[str, dict]:
    out = stack.fleet("get", "px", "-o", "json")
    assert out.returncode == 0, out.stderr
    return {f"{i['metadata']['namespace']}/{i['metadata']['name']}": i for i in json.loads(out.stdout)["items"]}


def phase(stack, key: str) -> str:
    return ((proxies(stack).get(key) or {}).get("status") or {}).get("phase", "")


def fake(tmp_path, **extra) -> list[dict]:
    """The providers list: `edge`, its instance table in a file under tmp_path."""
    return [{"name": "edge", "type": "fake", "fake": {"stateFile": str(tmp_path / "edge-instances.json"), **extra}}]


def one_per_uid(listed: list[dict]) -> dict[str, str]:
    """uid → id, failing on a UID that two instances share (a create that ran twice)."""
    out: dict[str, str] = {}
    for i in listed:
        assert i["uid"] not in out, f"two instances for uid {i['uid']}: {out[i['uid']]} and {i['id']}"
        out[i["uid"]] = i["id"]
    return out


def instances(broker: str) -> list[dict]:
    client = Celery("fleet-test-list", broker=broker, backend=broker, set_as_current=False)
    client.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    res = client.send_task("fleet.list_instances", kwargs={"provider": "edge", "timeout": 5}, queue="provider.edge",
                           ignore_result=False)
    out = res.get(timeout=30)
    assert out["ok"], out
    return out["result"]


@pytest.fixture
def px_stack(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    stack = make_stack(redis_server.url, fake(tmp_path, idempotentCreate=False), FLEET_PROXIES=str(manifests),
                       FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CALL_TIMEOUT="3s",
                       FLEET_PROVIDER_CHECK_INTERVAL="0")
    stack.manifests = manifests
    return stack


def test_a_proxy_goes_running_and_is_deleted_with_its_manifest(px_stack):
    stack = px_stack
    declare(stack.manifests, "a")
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: phase(stack, "crawl/a") == "Running", 40, "crawl/a Running")
    p = proxies(stack)["crawl/a"]
    assert p["status"]["ip"] == "127.0.0.1" and p["status"]["port"] == 3128
    assert [c["status"] for c in p["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert "<redacted" in p["spec"]["cloudInit"]["inline"]
    table = stack.fleet("get", "px")
    assert table.stdout.split("\n")[0].split() == ["NAMESPACE", "NAME", "PROVIDER", "PHASE", "IP", "PORT", "READY", "AGE"]
    assert "Running" in table.stdout
    assert len(instances(stack.broker)) == 1

    (stack.manifests / "a.yaml").unlink()
    wait_for(lambda: "crawl/a" not in proxies(stack), 40, "crawl/a deleted")
    assert instances(stack.broker) == []
    for role in ("controller", "worker:edge"):
        assert "SENTINEL" not in stack.log(role)


def test_controller_killed_right_after_create_was_sent(px_stack, redis_server):
    stack = px_stack
    # the create must not expire (its `expires` is the call timeout) while the worker starts on a slow machine
    stack.env["FLEET_PROVIDER_CALL_TIMEOUT"] = "60s"
    r = redis_server.client()
    declare(stack.manifests, "a")
    stack.controller()  # no worker yet: the create waits in provider.edge
    stack.wait_ready("controller")
    # sent = on the broker (the call is recorded in Redis just before the message is published)
    wait_for(lambda: r.llen("provider.edge") >= 1, 30, "the create to be sent")
    assert json.loads(r.get("fleet:px:call:crawl/a"))["op"] == "create"
    stack.kill("controller")
    stack.worker("edge")  # runs the create; its answer waits in fleet.controller
    stack.wait_ready("worker:edge")
    wait_for(lambda: r.llen("fleet.controller") >= 1, 30, "the create's answer to be queued")
    stack.controller()
    # killed between the create's publish and its step's end, the old controller's claim on crawl/a lapses
    # only after CLAIM_TTL (seen on a loaded machine): the new one takes the answer then
    wait_for(lambda: phase(stack, "crawl/a") == "Running", CLAIM_TTL + 40, "crawl/a Running after the restart")
    assert len(one_per_uid(instances(stack.broker))) == 1  # adopted, not created again


def test_worker_killed_and_redis_restarted_mid_lifecycle(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    # creates idempotent by name, as the contract wants: after Redis forgot every provider ID, that is what
    # finds the instances again
    stack = make_stack(redis_server.url, fake(tmp_path), FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s",
                       FLEET_PROVIDER_CALL_TIMEOUT="3s", FLEET_PROVIDER_CHECK_INTERVAL="0")
    stack.manifests = manifests
    declare(stack.manifests, "a")
    declare(stack.manifests, "b")
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: phase(stack, "crawl/a") in ("Provisioning", "Running"), 40, "crawl/a created")
    stack.kill("worker:edge")  # its instances stay in the backend (the file)
    redis_server.stop()
    time.sleep(0.5)
    redis_server.start()  # no persistence: every due time, call and standalone object is gone
    stack.worker("edge")
    wait_for(lambda: {phase(stack, "crawl/a"), phase(stack, "crawl/b")} == {"Running"}, 90, "both Running again")
    assert len(one_per_uid(instances(stack.broker))) == 2


def test_an_unconfigured_provider_is_failed_and_named(px_stack):
    stack = px_stack
    (stack.manifests / "x.yaml").write_text(MANIFEST.format(name="x", port=3128).replace("provider: edge", "provider: nowhere"))
    stack.controller()
    stack.wait_ready("controller")
    wait_for(lambda: phase(stack, "crawl/x") == "Failed", 30, "crawl/x Failed")
    assert "'nowhere'" in proxies(stack)["crawl/x"]["status"]["message"]
    generation = proxies(stack)["crawl/x"]["metadata"]["generation"]

    # the provider is added (a new config, the controller restarted): the latch lifts without a spec change
    stack.config_path.write_text(yaml.safe_dump({"providers": [{"name": "edge", "type": "fake"},
                                                               {"name": "nowhere", "type": "fake"}]}))
    stack.kill("controller")
    stack.worker("nowhere")
    stack.controller()
    wait_for(lambda: phase(stack, "crawl/x") == "Running", 40, "crawl/x Running on the added provider")
    assert proxies(stack)["crawl/x"]["metadata"]["generation"] == generation


def test_cloud_init_never_reaches_flower_the_result_backend_or_logs(px_stack, redis_server):
    import base64
    import urllib.request

    from fleet.cli import commands
    from fleet.testing.procs import free_port

    stack = px_stack
    port = free_port()
    stack.start("flower", [*commands.flower_argv(port), "--basic-auth=admin:s3cret"])
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    auth = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}

    def api(path: str) -> str:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=auth)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.read().decode()

    wait_for(lambda: len(json.loads(api("/api/workers?refresh=1"))) >= 2, 60, "flower to see both workers", interval=1)
    for role in ("controller", "worker:edge"):  # Flower turns task events on when it connects (every 5 s)
        wait_for(lambda role=role: "enabled by remote" in stack.log(role), 30, f"flower to enable {role}'s events")
    declare(stack.manifests, "a")
    wait_for(lambda: phase(stack, "crawl/a") == "Running", 40, "crawl/a Running")

    def tasks() -> dict:
        got = json.loads(api("/api/tasks?limit=1000"))
        names = {t.get("name") for t in got.values()}
        return got if {"fleet.create_instance", "fleet.get_instance", "fleet.record_proxy_call"} <= names else {}

    seen = wait_for(tasks, 30, "flower to list the provider calls by operation", interval=1)
    body = json.dumps(seen)
    assert "SENTINEL" not in body and "cloud_init_ref" in body  # a reference travels, never the text
    r = redis_server.client()
    for key in r.scan_iter(match="celery-task-meta-*"):
        assert b"SENTINEL" not in (r.get(key) or b""), key
    for queue in (b"fleet.controller", b"provider.edge"):
        assert all(b"SENTINEL" not in m for m in r.lrange(queue, 0, -1))
    for role in ("controller", "worker:edge", "flower"):
        assert "SENTINEL" not in stack.log(role)


def test_worker_killed_mid_create_converges_on_one_instance(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "slow-proxies"
    manifests.mkdir()
    stack = make_stack(redis_server.url, fake(tmp_path, createLatencyMs=1500, idempotentCreate=False),
                       FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CALL_TIMEOUT="3s",
                       FLEET_PROVIDER_CHECK_INTERVAL="0", FLEET_LOG_LEVEL="debug")
    stack.manifests = manifests
    r = redis_server.client()
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    declare(manifests, "a")
    wait_for(lambda: "fleet.create_instance" in stack.log("worker:edge") and r.get("fleet:px:call:crawl/a"), 30,
             "the worker to start the create")
    stack.kill("worker:edge")  # mid-create: the message was taken, its answer never comes
    stack.worker("edge")
    wait_for(lambda: phase(stack, "crawl/a") == "Running", 60, "crawl/a Running after the create lapsed and was sent again")
    assert len(one_per_uid(instances(stack.broker))) == 1
