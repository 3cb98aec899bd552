"""Standalone mode keeps the CRD's rules with real processes (issue 18):
redis-server, the controller and one worker per fake provider. A manifest
edit of `spec.provider` is reported and not applied, so the instance stays
with the provider that made it; a symlink loop in the manifests directory
is one reported problem and the other manifests still apply."""

from __future__ import annotations

import json
import os
import time

import pytest
from celery import Celery

from fleet.testing.procs import wait_for

pytestmark = pytest.mark.integration

MANIFEST = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: {provider}
  port: {port}
"""


def proxies(stack) -> dict[str, dict]:
    out = stack.fleet("get", "px", "-o", "json")
    assert out.returncode == 0, out.stderr
    return {f"{i['metadata']['namespace']}/{i['metadata']['name']}": i for i in json.loads(out.stdout)["items"]}


def phase(stack, key: str) -> str:
    return ((proxies(stack).get(key) or {}).get("status") or {}).get("phase", "")


def instances(broker: str, provider: str) -> list[dict]:
    client = Celery("fleet-test-list", broker=broker, backend=broker, set_as_current=False)
    client.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    res = client.send_task("fleet.list_instances", kwargs={"provider": provider, "timeout": 5},
                           queue=f"provider.{provider}", ignore_result=False)
    out = res.get(timeout=30)
    assert out["ok"], out
    return out["result"]


@pytest.fixture
def stack(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    s = make_stack(redis_server.url, [{"name": "edge", "type": "fake"}, {"name": "other", "type": "fake"}],
                   FLEET_PROXIES=str(manifests), FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROXY_RESYNC_INTERVAL="2s",
                   FLEET_PROVIDER_CALL_TIMEOUT="10s", FLEET_PROVIDER_CHECK_INTERVAL="0")
    s.manifests = manifests
    return s


def test_a_provider_edit_is_refused_and_the_instance_stays_managed_by_its_provider(stack):
    a = stack.manifests / "a.yaml"
    a.write_text(MANIFEST.format(name="a", provider="edge", port=3128) + "---\n"
                 + MANIFEST.format(name="b", provider="edge", port=3128))
    stack.worker("edge")
    stack.worker("other")
    stack.controller()
    stack.wait_ready("worker:edge", "worker:other", "controller")
    wait_for(lambda: phase(stack, "crawl/a") == phase(stack, "crawl/b") == "Running", 60, "a and b Running")
    uid = proxies(stack)["crawl/a"]["metadata"]["uid"]

    a.write_text(MANIFEST.format(name="a", provider="other", port=8080) + "---\n"
                 + MANIFEST.format(name="b", provider="edge", port=8081))
    wait_for(lambda: f"{a}#1: spec.provider: is immutable" in stack.log("controller"), 30, "the edit reported")
    wait_for(lambda: proxies(stack)["crawl/b"]["spec"]["port"] == 8081, 30, "b's edit applied")
    got = proxies(stack)["crawl/a"]
    assert (got["spec"]["provider"], got["spec"]["port"]) == ("edge", 3128)
    wait_for(lambda: phase(stack, "crawl/b") == "Running", 60, "b Running on its new port")
    # a few resync lists (every 2 s) go to edge, nothing is created on other; the unchanged manifest is not
    # read again, so the refusal is reported once
    time.sleep(6)
    assert stack.log("controller").count("is immutable") == 1
    assert phase(stack, "crawl/a") == "Running"
    assert instances(stack.broker, "other") == []
    assert uid in [i["uid"] for i in instances(stack.broker, "edge")]

    a.write_text(MANIFEST.format(name="b", provider="edge", port=8081))  # a removed: deleted where it lives
    wait_for(lambda: "crawl/a" not in proxies(stack), 60, "crawl/a deleted")
    assert uid not in [i["uid"] for i in instances(stack.broker, "edge")]
    assert instances(stack.broker, "other") == []


def test_a_symlink_loop_is_one_problem_and_the_rest_of_the_directory_applies(stack):
    os.symlink("loop-b.yaml", stack.manifests / "loop-a.yaml")
    os.symlink("loop-a.yaml", stack.manifests / "loop-b.yaml")
    (stack.manifests / "z.yaml").write_text(MANIFEST.format(name="z", provider="edge", port=3128))
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: phase(stack, "crawl/z") == "Running", 60, "crawl/z Running beside the loop")
    log = stack.log("controller")
    assert f"{stack.manifests}/loop-a.yaml: cannot read the file: Too many levels of symbolic links" in log
    assert "cannot read the directory" not in log
