"""The kubernetes provider's operations against the HTTP-level fake."""

import json
from http import HTTPStatus

import pytest

from fleet.testing.kubeapi import status_body
from providers import base
from providers.base import CreateRequest, Deadline
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.errors import classify
from providers.kubernetes.provider import new
from tests.providers import conformance, faults
from tests.providers.conformance import ProviderConformance
from tests.providers.faults import FaultProxy, ProxiedBackend, closed_port_url


class TestKubernetesConformance(ProviderConformance):
    provider_name = "k8s-local"
    malformed_ids = ("", "noslash", "/name", "ns/", "ns/a/b")

    @pytest.fixture
    def provider(self, kubeapi):
        return new(self.provider_name, KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path))


def test_create_labels_the_pod_and_ignores_cloud_init(kubeapi):
    p = new("k", KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path, image="squid:test"))
    pid = p.create(CreateRequest(name="proxy-abc", uid="u-1", namespace="crawl", cloud_init="SECRET", port=3129,
                                 installation="blue"), Deadline.after(5))
    assert pid == "crawl/proxy-abc"
    (pod,) = kubeapi.pods
    assert pod["metadata"]["labels"] == {base.LABEL_MANAGED: "true", base.LABEL_UID: "u-1", base.LABEL_INSTALLATION: "blue",
                                         base.LABEL_NAMESPACE: "crawl"}
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "squid:test" and c["ports"][0]["containerPort"] == 3129
    assert "SECRET" not in repr(pod)


def test_errors_name_the_configured_provider_and_class(kubeapi):
    kubeapi.script("GET", "/pods/", lambda req: (403, status_body(403, "Forbidden", "rbac")))
    p = new("k8s-eu", KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path))
    with pytest.raises(base.Permanent) as err:
        p.get("ns/x", Deadline.after(5))
    assert (err.value.provider, err.value.op, err.value.id) == ("k8s-eu", "get", "ns/x")


@pytest.mark.parametrize(
    ("status", "cls"),
    [(404, base.NotFound), (400, base.Permanent), (401, base.Permanent), (403, base.Permanent),
     (422, base.Permanent), (409, base.Transient), (429, base.Transient), (500, base.Transient), (503, base.Transient)],
)
def test_classify_api_statuses(status, cls):
    from kubernetes.client.exceptions import ApiException

    assert classify(ApiException(status=status)) is cls


@pytest.mark.parametrize("op", ["create", "get", "delete", "list"])
def test_classify_404_is_not_found_except_on_create(op):
    from kubernetes.client.exceptions import ApiException

    want = base.Permanent if op == "create" else base.NotFound  # create: the namespace is missing
    assert classify(ApiException(status=404), op) is want


@pytest.mark.parametrize(
    "exc",
    [OSError("refused"), TimeoutError(), ValueError("?"), json.JSONDecodeError("x", "{", 1), KeyError("metadata"),
     TypeError("string indices"), AttributeError("get")],
)
def test_classify_non_api_errors_are_transient(exc):
    assert classify(exc) is base.Transient


# -- the Checker rules and fault injection at the wire (conformance.py) ---------------


def kubeconfig_for(url: str, path: str) -> str:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "test-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def error_body(status: int) -> dict:
    return status_body(status, HTTPStatus(status).phrase.replace(" ", ""), "injected by the test")


@pytest.fixture
def proxied(kubeapi, tmp_path):
    """A FaultProxy in front of the fake API, and a kubeconfig for it."""
    with FaultProxy(kubeapi.server.url, error_body) as proxy:
        yield proxy, kubeconfig_for(proxy.url, str(tmp_path / "proxied"))



class TestKubernetesChecker(conformance.CheckerConformance):
    @pytest.fixture
    def make_checker(self, proxied, tmp_path):
        proxy, kubeconfig = proxied

        def make(state: str):
            if state == conformance.UNREACHABLE:
                return new("k8s-local", KubernetesConfig(kubeconfig=kubeconfig_for(closed_port_url(), str(tmp_path / "dead"))))
            proxy.inject(faults.STATE_FAULTS.get(state))
            return new("k8s-local", KubernetesConfig(kubeconfig=kubeconfig))

        yield make
        proxy.release()


class TestKubernetesFaults(conformance.FaultConformance):
    provider_name = "k8s-local"
    faults = faults.HTTP_FAULTS
    gone_faults = ("http-404",)

    @pytest.fixture
    def fault_backend(self, proxied):
        proxy, kubeconfig = proxied
        return ProxiedBackend(new(self.provider_name, KubernetesConfig(kubeconfig=kubeconfig)), proxy)
