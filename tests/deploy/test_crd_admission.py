"""The fake API (fleet/testing/kubeapi.py) treats writes as the API server
does with the CRDs in deploy/crd/: unknown fields and nulls pruned, defaults
filled, a value the schema refuses answered 422 Invalid -- so a write the
real server would change or refuse is caught in tests."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.testing.crdschema import admit, served_schemas
from fleet.testing.kubeapi import FakeKubeAPI, Request

BASE = "/apis/crawl.example.com/v1alpha1"
MERGE = "application/merge-patch+json"


def post(api: FakeKubeAPI, body: dict[str, Any], ns: str = "crawl") -> tuple[int, Any]:
    return api.handle(Request("POST", f"{BASE}/namespaces/{ns}/proxies", {}, body, "application/json"))


def patch(api: FakeKubeAPI, name: str, body: dict[str, Any], status: bool = False, ns: str = "crawl") -> tuple[int, Any]:
    path = f"{BASE}/namespaces/{ns}/proxies/{name}" + ("/status" if status else "")
    return api.handle(Request("PATCH", path, {}, body, MERGE))


def proxy(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": "px1"},
            "spec": {"provider": "kvm-home", **spec}}


def test_every_crd_is_served():
    assert set(served_schemas()) == {"proxies", "providerhealths", "proxypools"}


def test_a_create_is_pruned_and_defaulted():
    api = FakeKubeAPI()
    code, out = post(api, proxy(placement={"zone": "nas1", "zome": "typo"}, surplus=True, cloudInit=None))
    assert code == 201
    assert out["spec"] == {"provider": "kvm-home", "port": 3128, "placement": {"zone": "nas1"}}
    assert api.objects["crawl/px1"]["spec"] == out["spec"]
    assert out["metadata"]["generation"] == 1


@pytest.mark.parametrize(("spec", "error"), [
    ({"port": 0}, "spec.port: Invalid value: 0: spec.port in body should be greater than or equal to 1"),
    ({"port": 65536}, "spec.port: Invalid value: 65536: spec.port in body should be less than or equal to 65535"),
    ({"port": "3128"}, "spec.port: Invalid value: \"str\": spec.port in body must be of type integer"),
    ({"provider": "KVM"}, "spec.provider: Invalid value: 'KVM': spec.provider in body should match"),
    ({"provider": "x" * 64}, "spec.provider: Too long: may not be more than 63 bytes"),
    ({"placement": {"image": "i" * 513}}, "spec.placement.image: Too long: may not be more than 512 bytes"),
    ({"cloudInit": {"secretRef": {"name": "ci"}}}, "spec.cloudInit.secretRef.key: Required value"),
])
def test_a_create_the_schema_refuses_is_422(spec, error):
    api = FakeKubeAPI()
    code, out = post(api, proxy(**spec))
    assert (code, out["reason"]) == (422, "Invalid")
    assert out["message"].startswith('Proxy.crawl.example.com "px1" is invalid: ')
    assert error in out["message"]
    assert api.objects == {}


def test_a_proxy_without_spec_is_refused():
    code, out = post(FakeKubeAPI(), {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": "px1"}})
    assert code == 422 and "spec: Required value" in out["message"]


def test_status_patches_are_pruned_and_validated():
    api = FakeKubeAPI()
    assert post(api, proxy())[0] == 201
    code, out = patch(api, "px1", {"status": {"phase": "Running", "ip": "10.0.0.7", "mood": "good"}}, status=True)
    assert code == 200 and out["status"] == {"phase": "Running", "ip": "10.0.0.7"}
    code, out = patch(api, "px1", {"status": {"phase": "Sleeping"}}, status=True)
    assert code == 422 and 'status.phase: Unsupported value: \'Sleeping\': supported values: "Pending"' in out["message"]
    cond = {"type": "Ready", "status": "True", "reason": "Up", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    code, out = patch(api, "px1", {"status": {"conditions": [cond, cond]}}, status=True)
    assert code == 422 and "status.conditions[1]: Duplicate value" in out["message"]
    many = [cond | {"type": f"T{i}"} for i in range(17)]
    code, out = patch(api, "px1", {"status": {"conditions": many}}, status=True)
    assert code == 422 and "must have at most 16 items" in out["message"]
    code, out = patch(api, "px1", {"status": {"conditions": [cond | {"status": "Yes"}]}}, status=True)
    assert code == 422 and "status.conditions[0].status: Unsupported value: 'Yes'" in out["message"]
    assert api.objects["crawl/px1"]["status"] == {"phase": "Running", "ip": "10.0.0.7"}


def test_an_object_patch_is_validated_and_a_dropped_field_changes_nothing():
    api = FakeKubeAPI()
    _, created = post(api, proxy())
    rv = created["metadata"]["resourceVersion"]
    code, out = patch(api, "px1", {"spec": {"port": -1}})
    assert code == 422 and "spec.port" in out["message"]
    code, out = patch(api, "px1", {"spec": {"unknown": 1}})  # pruned: the object is unchanged
    assert code == 200 and out["metadata"]["resourceVersion"] == rv and out["metadata"]["generation"] == 1


def test_a_providerhealth_target_message_over_the_limit_is_refused():
    schema = served_schemas()["providerhealths"]
    target = {"name": "nas1", "ready": False, "lastTransitionTime": "2026-01-01T00:00:00Z", "message": "x" * 1025,
              "details": {"pool": "default", "free": 3}}
    obj = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProviderHealth", "metadata": {"name": "kvm"},
           "status": {"targets": [target]}}
    _, errors = admit(obj, schema)
    assert errors == ["status.targets[0].message: Too long: may not be more than 1024 bytes",
                      "status.targets[0].details.free: Invalid value: \"int\": status.targets[0].details.free in body must be "
                      "of type string: \"int\""]


def test_without_the_schemas_nothing_is_checked():
    """The check is the schema's: the same write with no schema served goes through unchanged."""
    api = FakeKubeAPI(schemas={})
    code, out = post(api, proxy(port=0, surplus=True))
    assert code == 201 and out["spec"] == {"provider": "kvm-home", "port": 0, "surplus": True}


def test_metadata_is_kept_as_it_is():
    shaped, errors = admit(proxy() | {"metadata": {"name": "px1", "labels": {"a": "b"}, "annotations": {"x": "y"}}},
                           served_schemas()["proxies"])
    assert errors == [] and shaped["metadata"] == {"name": "px1", "labels": {"a": "b"}, "annotations": {"x": "y"}}
