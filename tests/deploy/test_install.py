"""Issue 8, item 2: the default install applies cleanly on a cluster without
the Prometheus Operator; its objects (ServiceMonitor, PrometheusRule) are
opt-in, with `kubectl apply -k deploy/monitoring`, and docs/deploying.md shows both
commands."""

from __future__ import annotations

import re

import pytest

from tests.deploy import cluster, kustomize
from tests.deploy.conftest import DEPLOY, ROOT

OPERATOR_GROUP = "monitoring.coreos.com/"
# The Prometheus Operator's CRDs, as far as `apply` needs them.
OPERATOR_CRDS = [
    {"spec": {"group": "monitoring.coreos.com", "names": {"kind": kind}, "versions": [{"name": "v1", "served": True}]}}
    for kind in ("ServiceMonitor", "PrometheusRule", "PodMonitor")
]


def test_the_default_install_applies_on_a_plain_cluster(installed):
    assert not [o for o in installed if o["apiVersion"].startswith(OPERATOR_GROUP)]
    assert cluster.apply(installed) == []


def test_the_operator_objects_are_opt_in_and_all_of_them(monitoring):
    # the ServiceMonitors of the controller, the prober, the API and the gateway, the workers' PodMonitor, and the alerts
    assert sorted(o["kind"] for o in monitoring) == ["PodMonitor", "PrometheusRule", "ServiceMonitor", "ServiceMonitor",
                                                      "ServiceMonitor", "ServiceMonitor"]
    assert all(o["apiVersion"].startswith(OPERATOR_GROUP) for o in monitoring)
    # on a plain cluster this command (alone) fails, as the did ...
    assert sorted(cluster.apply(monitoring)) == [
        'no matches for kind "PodMonitor" in version "monitoring.coreos.com/v1"',
        'no matches for kind "PrometheusRule" in version "monitoring.coreos.com/v1"',
        'no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1"',
        'no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1"',
        'no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1"',
        'no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1"',
    ]
    # ... and applies with the Operator installed
    assert cluster.apply(monitoring, crds=OPERATOR_CRDS) == []


def test_the_fake_cluster_refuses_what_it_does_not_serve(rendered):
    # the check above is not vacuous: an object of an unknown kind is refused,
    # one of a kind a CRD in the same apply serves is not
    crd = next(o for o in rendered if o["kind"] == "CustomResourceDefinition")
    ph = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProviderHealth", "metadata": {"name": "x"}}
    assert cluster.apply([ph]) != [] and cluster.apply([crd, ph]) == []


def test_the_kustomize_renderer_refuses_a_cycle(tmp_path):
    inner = tmp_path / "overlay"
    inner.mkdir()
    (tmp_path / "kustomization.yaml").write_text("resources: [overlay]\n")
    (inner / "kustomization.yaml").write_text("resources: [..]\n")
    with pytest.raises(ValueError, match="cycle"):
        kustomize.render(tmp_path)


def test_the_deploying_page_shows_both_commands():
    page = (ROOT / "docs/deploying.md").read_text()
    assert re.search(r"^kubectl apply -k deploy\s", page, re.M)
    assert re.search(r"^kubectl apply -k deploy/monitoring\s", page, re.M)
    assert (DEPLOY / "monitoring/kustomization.yaml").exists()


def test_the_deploying_page_names_every_object_installed(installed, monitoring):
    """Its table of what `kubectl apply -k deploy`, `-k deploy/monitoring` and `fleet render` install names
    every object they make (the workers as fleet-worker-NAME), and every path it names exists."""
    page = (ROOT / "docs/deploying.md").read_text()
    table = "\n".join(line for line in page.splitlines() if line.startswith("| "))
    providers = sorted({o["metadata"]["name"].removeprefix("fleet-worker-") for o in installed
                        if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("fleet-worker-")}, key=len, reverse=True)

    def placeholder(name: str) -> str:  # as the table writes them: the installation and the provider named by role
        name = name.replace(":fleet-system:", ":INSTALLATION:")
        for provider in providers:
            name = name.replace(f"fleet-worker-{provider}", "fleet-worker-NAME").replace(f":worker:{provider}", ":worker:NAME")
        return name

    missing = sorted({f"{o['kind']} {o['metadata']['name']}" for o in installed + monitoring
                      if o["kind"] != "Namespace" and placeholder(o["metadata"]["name"]) not in table})
    assert not missing, f"objects docs/deploying.md's table does not name: {missing}"
    for path in re.findall(r"`(deploy/[\w./-]+\.ya?ml)`", page):
        assert (ROOT / path).exists(), path
