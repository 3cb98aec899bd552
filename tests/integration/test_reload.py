"""Reloading the providers file without a restart, on real processes:
redis-server, the controller, beat and provider workers as `celery`
processes, standalone Proxy manifests.

- a Proxy of a provider `late` that is not configured is Failed/ProviderNotConfigured;
  a broken file is refused (logged with its field path, counted on /metrics) and the
  old config keeps working; the fixed file adds `late` and the Proxy goes Running,
  the controller never restarted and `edge`'s instance untouched;
- the file as a ConfigMap mounts it (a symlink through `..data`, swapped by
  rename): the worker rebuilds its provider from the changed block, beat checks
  an added provider at once, and a removed provider's worker answers "not configured".
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pytest
import yaml
from celery import Celery

from fleet.testing.procs import free_port, wait_for
from tests.integration.test_proxies import proxies

pytestmark = pytest.mark.integration

MANIFEST = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: {provider}
  port: {port}
"""


def declare(directory, name: str, provider: str, port: int) -> None:
    (directory / f"{name}.yaml").write_text(MANIFEST.format(name=name, provider=provider, port=port))


def status(stack, key: str) -> dict:
    return (proxies(stack).get(key) or {}).get("status") or {}


def reason(st: dict, kind: str = "Provisioned") -> str:
    return next((c.get("reason", "") for c in st.get("conditions", []) if c["type"] == kind), "")


def call(broker: str, provider: str, task: str, **kwargs) -> dict:
    """A provider call on provider.<name>, its outcome read back."""
    client = Celery("fleet-test-call", broker=broker, backend=broker, set_as_current=False)
    client.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    res = client.send_task(task, kwargs={"provider": provider, "timeout": 5, **kwargs}, queue=f"provider.{provider}",
                           ignore_result=False)
    return res.get(timeout=30)


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("proxy_operator_config_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def providers_yaml(*entries) -> str:
    return yaml.safe_dump({"providers": list(entries)})


def test_a_provider_added_to_the_file_releases_its_proxy_and_a_broken_file_is_refused(redis_server, make_stack, tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    metrics = free_port()
    stack = make_stack(redis_server.url, [{"name": "edge", "type": "fake"}], FLEET_PROXIES=str(manifests),
                       FLEET_PROXY_POLL_INTERVAL="1s", FLEET_PROVIDER_CALL_TIMEOUT="3s", FLEET_PROVIDER_CHECK_INTERVAL="0",
                       FLEET_METRICS_BIND_ADDRESS=f"127.0.0.1:{metrics}")
    declare(manifests, "a", "edge", 3128)
    declare(manifests, "x", "late", 3129)
    stack.worker("edge")
    controller = stack.controller()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: status(stack, "crawl/a").get("phase") == "Running", 40, "crawl/a Running")
    wait_for(lambda: status(stack, "crawl/x").get("phase") == "Failed", 30, "crawl/x Failed")
    assert reason(status(stack, "crawl/x")) == "ProviderNotConfigured"
    (edge_instance,) = call(stack.broker, "edge", "fleet.list_instances")["result"]
    m = scrape(metrics)
    assert m["proxy_operator_config_last_reload_successful"] == 1 and m["proxy_operator_config_reload_failures_total"] == 0

    # a broken file: refused whole (edge's good entry is not taken from it either), the old config keeps working
    stack.config_path.write_text(providers_yaml({"name": "edge", "type": "fake"}, {"name": "late", "type": "fake"},
                                                {"name": "kvm-x", "type": "kvm", "kvm": {"vendorDta": "SENTINEL-secret"}}))
    wait_for(lambda: "reload refused" in stack.log("controller"), 20, "the controller to refuse the file")
    wait_for(lambda: "reload refused" in stack.log("worker:edge"), 20, "the worker to refuse the file")
    (line,) = [ln for ln in stack.log("controller").splitlines() if "reload refused" in ln]
    assert "providers[2].kvm.vendorDta: unknown key" in line and str(stack.config_path) in line
    m = scrape(metrics)
    assert m["proxy_operator_config_last_reload_successful"] == 0 and m["proxy_operator_config_reload_failures_total"] == 1
    declare(manifests, "b", "edge", 3130)  # the config in use still serves
    wait_for(lambda: status(stack, "crawl/b").get("phase") == "Running", 40, "crawl/b Running on the old config")
    time.sleep(3)  # more looks at the same bad file: not logged or counted again
    assert stack.log("controller").count("reload refused") == 1
    assert scrape(metrics)["proxy_operator_config_reload_failures_total"] == 1
    assert status(stack, "crawl/x").get("phase") == "Failed"  # late came only with the refused file

    # fixed: late added; its Proxy is released without a restart
    written = time.monotonic()
    stack.config_path.write_text(providers_yaml({"name": "edge", "type": "fake"}, {"name": "late", "type": "fake"}))
    wait_for(lambda: "providers config reloaded: added late" in stack.log("controller"), 10, "the controller to reload")
    reloaded = time.monotonic() - written
    # the controller sends late's create at once: it waits in provider.late for the worker (which, as a new
    # Deployment would, starts with the new file)
    r = redis_server.client()
    wait_for(lambda: r.llen("provider.late") >= 1, 10, "crawl/x's create sent")
    assert json.loads(r.get("fleet:px:call:crawl/x"))["op"] == "create"
    stack.worker("late")
    wait_for(lambda: status(stack, "crawl/x").get("phase") == "Running", 40, "crawl/x Running on the added provider")
    took = time.monotonic() - written
    assert reloaded <= 5, reloaded  # two looks 2 s apart; the 30 s resync is not waited for
    print(f"file written → controller reloaded {reloaded:.1f}s → crawl/x Running {took:.1f}s (incl. the worker's start)")
    assert controller.poll() is None and stack.procs["controller"] is controller  # never restarted
    assert reason(status(stack, "crawl/x")) != "ProviderNotConfigured"
    m = scrape(metrics)
    assert m["proxy_operator_config_last_reload_successful"] == 1 and m["proxy_operator_config_reload_failures_total"] == 1
    # edge's block did not change: its worker kept its provider (the fake's instances live in it)
    assert edge_instance in call(stack.broker, "edge", "fleet.list_instances")["result"]
    assert status(stack, "crawl/a").get("phase") == "Running"
    for role in ("controller", "worker:edge", "worker:late"):
        assert "SENTINEL" not in stack.log(role)


def configmap(root, text: str, stamp: str) -> None:
    """kubelet's ConfigMap volume update: a new timestamped directory, a new `..data`
    symlink renamed over the old one; providers.yaml is a symlink through `..data`."""
    d = root / f"..{stamp}"
    d.mkdir()
    (d / "providers.yaml").write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(d.name)
    os.rename(tmp, root / "..data")
    if not (root / "providers.yaml").is_symlink():
        (root / "providers.yaml").symlink_to("..data/providers.yaml")


def targets(stack, provider: str) -> list[tuple[str, bool]]:
    out = stack.fleet("get", "ph", provider, "-o", "json")
    if out.returncode != 0:
        return []
    (row,) = json.loads(out.stdout)
    return [(t["name"], t["ready"]) for t in row["targets"]]


def test_a_configmap_update_reaches_the_worker_beat_and_the_controller(redis_server, make_stack, tmp_path):
    mount = tmp_path / "config"
    mount.mkdir()
    configmap(mount, providers_yaml({"name": "edge", "type": "fake", "fake": {"targets": [{"name": "t1"}]}}), "1")
    stack = make_stack(redis_server.url, [], FLEET_PROVIDERS_CONFIG=str(mount / "providers.yaml"),
                       FLEET_PROVIDER_CHECK_INTERVAL="10s")
    stack.worker("edge")
    stack.controller()
    stack.beat()
    stack.wait_ready("worker:edge", "controller")
    wait_for(lambda: targets(stack, "edge") == [("t1", True)], 40, "edge's first check")

    # edge's block changes (another target) and `late` appears; its worker starts with the new file
    configmap(mount, providers_yaml({"name": "edge", "type": "fake", "fake": {"targets": [{"name": "t2", "ready": False}]}},
                                    {"name": "late", "type": "fake", "fake": {"targets": [{"name": "l1"}]}}), "2")
    written = time.monotonic()
    stack.worker("late")
    stack.wait_ready("worker:late")
    # beat checks the added provider as soon as its worker is alive, not an interval later
    wait_for(lambda: targets(stack, "late") == [("l1", True)], 30, "late's first check")
    took_late = time.monotonic() - written
    # the edge worker rebuilt its provider from the new block (at the next round)
    wait_for(lambda: targets(stack, "edge") == [("t2", False)], 30, "edge checked with its new block")
    took_edge = time.monotonic() - written
    print(f"ConfigMap swap → late's first result {took_late:.1f}s, edge's new targets {took_edge:.1f}s")
    assert "providers config reloaded: added late; changed edge" in stack.log("controller")
    assert "providers config reloaded: checks go to edge, late" in stack.log("beat")

    # late removed: its worker keeps running but answers that it is not configured
    configmap(mount, providers_yaml({"name": "edge", "type": "fake"}), "3")
    wait_for(lambda: "providers config reloaded: removed late" in stack.log("worker:late"), 20, "late's worker to reload")
    out = call(stack.broker, "late", "fleet.get_instance", provider_id="fake/x")
    assert out["ok"] is False and out["error_class"] == "not_configured" and "not configured on this worker" in out["message"]
    wait_for(lambda: "removed late" in stack.log("controller"), 20, "the controller to reload")
    wait_for(lambda: stack.fleet("get", "ph", "late").returncode == 1, 20, "late's results forgotten")
