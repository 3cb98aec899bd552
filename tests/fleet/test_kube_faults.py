"""Fault conformance of `fleet.kube`, in the style of the providers'
`FaultConformance` (tests/providers/conformance.py): each operation of the
package runs against the HTTP-level fake API (fleet/testing/kubeapi.py) behind
the fault-injecting proxy (tests/providers/faults.py), with the fault at its
first request, then at its second, and so on until it gets through
untouched. Whatever the fault, the operation succeeds (a 409 the writer
retries, a dropped connection urllib3 retries) or raises one of the tree's
errors (`kube.KubeError`): never an `ApiException`, a urllib3 error or an
error of an answer it could not read. A 5xx or a 429 no operation can absorb
leaves as ApiUnavailable."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import pytest
from kubernetes import client

from fleet import kube
from fleet.proxies.model import FINALIZER
from fleet.testing.kubeapi import status_body
from providers.kubernetes.client import load_configuration
from tests.providers import faults
from tests.providers.faults import FaultProxy

FAULTS = ("http-500", "http-429", "http-409", faults.CLOSED, faults.RESET, faults.MALFORMED, faults.WRONG_SHAPE)
UNABSORBED = ("http-500", "http-429")  # no operation retries these: they must leave as ApiUnavailable
MAX_REQUESTS = 12
NS = "ns1"
LEASE = kube.Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
SECRET_VALUE = "#cloud-config\npassword: hunter2\n"
_names = itertools.count()


def error_body(status: int) -> dict[str, Any]:
    return status_body(status, HTTPStatus(status).phrase.replace(" ", ""), "injected by the test")


def set_phase(current: dict[str, Any]) -> kube.Patch:
    return kube.Patch({"phase": f"Ready-{next(_names)}"})


def owned(name: str) -> dict[str, Any]:
    return {"apiVersion": kube.PROVIDER_HEALTH.api_version, "kind": kube.PROVIDER_HEALTH.kind,
            "metadata": {"name": name, "labels": kube.labels_for("blue")}}


def proxy_object(name: str) -> dict[str, Any]:
    return {"apiVersion": kube.PROXY.api_version, "kind": kube.PROXY.kind,
            "metadata": {"name": name, "namespace": NS}, "spec": {"provider": "p"}}


def prepare(kubeapi: Any, writer: kube.Writer, operation: str) -> Callable[[], Any]:
    """With the API healthy (straight to the fake, not through the proxy):
    what the operation needs, and the call that makes its requests."""
    name = f"o{next(_names)}"
    if operation == "publish-new":
        return lambda: writer.publish(kube.PROVIDER_HEALTH, name, None, set_phase)
    if operation == "publish-existing":
        kubeapi.add(owned(name))
        return lambda: writer.publish(kube.PROVIDER_HEALTH, name, None, set_phase)
    if operation == "cleanup":
        for k in [k for k, p in kubeapi.plurals.items() if p == kube.PROVIDER_HEALTH.plural]:
            kubeapi.delete(k)
        kubeapi.add(owned(name + "a"))
        kubeapi.add(owned(name + "b"))
        return lambda: writer.cleanup(kube.PROVIDER_HEALTH, set())
    if operation in ("patch-status", "patch-finalizers"):
        rv = kubeapi.add(proxy_object(name), plural="proxies")["metadata"]["resourceVersion"]
        if operation == "patch-status":
            return lambda: writer.patch_status(kube.PROXY, NS, name, rv, {"phase": "Running"})
        return lambda: writer.patch_finalizers(kube.PROXY, NS, name, rv, [FINALIZER])
    if operation == "watch":
        kubeapi.add(proxy_object(name), plural="proxies")

        def watch() -> list[tuple[str, Any]]:
            page = kube.list_page(writer.api_client, kube.PROXY, limit=1, namespace=NS)
            meta = page.get("metadata")  # the page as answered: the caller validates it (Watcher._list)
            rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if not isinstance(rv, str):
                return []
            return list(kube.WatchStream(writer.api_client, kube.PROXY, rv, timeout_seconds=1, namespace=NS))

        return watch
    if operation == "objects":
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": NS},
                "spec": {"holderIdentity": "blue"}}

        def claim() -> dict[str, Any]:
            if writer.read(LEASE, NS, name) is not None:  # the object as answered: the caller validates it
                return {}
            made = writer.create(LEASE, NS, body)
            return writer.patch(LEASE, NS, name, {"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]},
                                                  "spec": {"holderIdentity": None}})

        return claim
    if operation == "secret":
        kubeapi.add_secret(NS, name, {"userData": SECRET_VALUE})
        return lambda: writer.read_secret_key(NS, name, "userData")
    raise AssertionError(operation)


OPERATIONS = ("publish-new", "publish-existing", "cleanup", "patch-status", "patch-finalizers", "watch", "objects", "secret")


@pytest.fixture
def proxied(kubeapi, tmp_path):
    """A Writer whose every request goes through a FaultProxy in front of the fake."""
    with FaultProxy(kubeapi.server.url, error_body) as proxy:
        path = kubeapi.server.kubeconfig(str(tmp_path / "proxied"))
        with open(path) as f:
            text = f.read().replace(kubeapi.server.url, proxy.url)
        with open(path, "w") as f:
            f.write(text)
        yield proxy, kube.Writer(client.ApiClient(load_configuration(str(path))), "blue")
        proxy.release()


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_fault_at_any_request_leaves_as_the_trees_error(kubeapi, proxied, operation, fault):
    proxy, writer = proxied
    for nth in range(MAX_REQUESTS):
        proxy.inject(None)
        call = prepare(kubeapi, writer, operation)
        proxy.inject(fault, nth)
        try:
            call()
            outcome: BaseException | None = None
        except Exception as exc:
            outcome = exc
        fired = proxy.fired()
        proxy.inject(None)
        if not fired:
            assert nth > 0, f"{operation} made no request"
            assert outcome is None, f"{operation} failed with no fault: {outcome!r}"
            return
        where = f"{operation} with {fault} at request {nth}"
        assert outcome is None or isinstance(outcome, kube.KubeError), f"{where}: {type(outcome).__module__}.{outcome!r}"
        if fault in UNABSORBED:
            assert isinstance(outcome, kube.ApiUnavailable), f"{where}: {outcome!r}"
        if outcome is not None:
            assert str(outcome), where
            assert "hunter2" not in str(outcome), where
    raise AssertionError(f"{operation} made more than {MAX_REQUESTS} requests")


def test_the_tree_has_one_root():
    """Every error the package raises is a KubeError: one `except` catches them all."""
    tree = [kube.ClusterAccessError, kube.ApiUnavailable, kube.Conflict, kube.NotFound, kube.Expired, kube.Rejected,
            kube.SecretError, kube.WriteConflict]
    assert all(issubclass(e, kube.KubeError) for e in tree)
    assert kube.KubeError.__bases__ == (Exception,)
    documented = {line.split()[1] for line in (kube.__doc__ or "").splitlines() if line.strip().startswith(("├──", "└──"))}
    assert documented == {e.__name__ for e in tree}
