"""Issue 8, item 2: the default install applies cleanly on a cluster without
the Prometheus Operator; its objects (ServiceMonitor, PrometheusRule) are
opt-in, with `kubectl apply -k deploy/monitoring`, and the README shows both
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


def test_the_readme_shows_both_commands():
    readme = (ROOT / "README.md").read_text()
    deploying = readme[readme.index("## Deploying"):]
    deploying = deploying[: deploying.index("\n## ", 1)]
    assert re.search(r"^kubectl apply -k deploy\s", deploying, re.M)
    assert re.search(r"^kubectl apply -k deploy/monitoring\s", deploying, re.M)
    assert (DEPLOY / "monitoring/kustomization.yaml").exists()
