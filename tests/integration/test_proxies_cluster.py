"""Cluster mode: a real controller watching Proxy objects on the HTTP-level
fake API (list+watch, finalizers, the status subresource, Secrets), a real
fake-provider worker, real Redis. Creation to Running in three writes,
cloud-init from a Secret, deletion through the finalizer, a relist after 410
and a controller restart that must not lose the Proxy's step."""

from __future__ import annotations

import pytest

from fleet.testing.procs import wait_for

pytestmark = pytest.mark.integration


def proxy(name: str, **spec) -> dict:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "namespace": "crawl"},
            "spec": {"provider": "edge", "port": 3128, **spec}}


def phase(api, name: str) -> str:
    obj = api.objects.get(f"crawl/{name}")
    return ((obj or {}).get("status") or {}).get("phase", "")


@pytest.fixture
def cluster(redis_server, kubeapi, make_stack):  # kubeapi first: the processes stop before the fake API does
    stack = make_stack(redis_server.url, [{"name": "edge", "type": "fake"}], FLEET_KUBECONFIG=kubeapi.kubeconfig_path,
                       FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CHECK_INTERVAL="0",
                       FLEET_PROXY_NAMESPACES="crawl")
    stack.worker("edge")
    stack.controller()
    stack.wait_ready("worker:edge", "controller")
    return stack


def test_a_proxy_runs_in_three_writes_and_is_deleted_through_its_finalizer(cluster, kubeapi):
    kubeapi.add_secret("crawl", "ci", {"user-data": "#cloud-config SENTINEL-from-secret"})
    kubeapi.add(proxy("a", cloudInit={"secretRef": {"name": "ci", "key": "user-data"}}), plural="proxies")
    wait_for(lambda: phase(kubeapi, "a") == "Running", 40, "crawl/a Running")
    obj = kubeapi.objects["crawl/a"]
    assert obj["metadata"]["finalizers"] == ["crawl.example.com/cleanup"]
    assert obj["status"]["ip"] == "127.0.0.1" and obj["status"]["observedGeneration"] == 1
    writes = [r for r in kubeapi.writes("a") if r.method == "PATCH"]
    assert len(writes) == 3, [(r.path, r.body) for r in writes]  # finalizer, Provisioning, Running
    assert {r.field_manager for r in writes} == {"fleet-controller"}
    assert "SENTINEL" not in cluster.log("controller") + cluster.log("worker:edge")

    settled = len(kubeapi.writes("a"))
    kubeapi.delete("crawl/a")  # deletionTimestamp set; the finalizer holds the object
    wait_for(lambda: "crawl/a" not in kubeapi.objects, 40, "crawl/a released and gone")
    assert len(kubeapi.writes("a")) - settled == 2  # Deleting, then the finalizer removed


def test_a_spec_change_is_seen_after_a_410_relist(cluster, kubeapi):
    kubeapi.add(proxy("b"), plural="proxies")
    wait_for(lambda: phase(kubeapi, "b") == "Running", 40, "crawl/b Running")
    kubeapi.expire_history()
    kubeapi.drop_watches()  # the controller's watch resumes from a resourceVersion now too old: 410, list again
    changed = kubeapi.objects["crawl/b"]
    changed = {**changed, "spec": {**changed["spec"], "port": 3130}}
    kubeapi.add(changed, plural="proxies")
    wait_for(lambda: (kubeapi.objects["crawl/b"].get("status") or {}).get("port") == 3130, 60, "crawl/b on port 3130")
    assert kubeapi.objects["crawl/b"]["status"]["observedGeneration"] == 2


def test_a_restarted_controller_finds_its_proxies_again(cluster, kubeapi):
    kubeapi.add(proxy("c"), plural="proxies")
    wait_for(lambda: phase(kubeapi, "c") == "Running", 40, "crawl/c Running")
    cluster.kill("controller")
    kubeapi.delete("crawl/c")
    cluster.controller()
    wait_for(lambda: "crawl/c" not in kubeapi.objects, 60, "crawl/c deleted by the new controller")
