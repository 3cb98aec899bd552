"""The kubernetes provider's operations against the HTTP-level fake."""

import pytest

from providers import base
from providers.base import CreateRequest, Deadline
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.errors import classify
from providers.kubernetes.provider import new
from tests.fakes.kubeapi import status_body
from tests.providers.conformance import ProviderConformance


class TestKubernetesConformance(ProviderConformance):
    provider_name = "k8s-local"
    malformed_ids = ("", "noslash", "/name", "ns/", "ns/a/b")

    @pytest.fixture
    def provider(self, kubeapi):
        return new(self.provider_name, KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path))


def test_create_labels_the_pod_and_ignores_cloud_init(kubeapi):
    p = new("k", KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path, image="squid:test"))
    pid = p.create(CreateRequest(name="proxy-abc", uid="u-1", namespace="crawl", cloud_init="SECRET", port=3129),
                   Deadline.after(5))
    assert pid == "crawl/proxy-abc"
    (pod,) = kubeapi.pods
    assert pod["metadata"]["labels"] == {base.LABEL_MANAGED: "true", base.LABEL_UID: "u-1"}
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


@pytest.mark.parametrize("exc", [OSError("refused"), TimeoutError(), ValueError("?")])
def test_classify_non_api_errors_are_transient(exc):
    assert classify(exc) is base.Transient
