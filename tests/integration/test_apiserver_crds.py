"""The shipped CRDs on a real kube-apiserver (fleet/testing/kubeserver.py): accepted
as shipped (structural, Established, names accepted), the CEL rules enforced
(spec.provider immutable, exactly one cloudInit source), schema validation
and defaults applied, and the status subresource split: a status write does
not change the spec, a spec write does not change the status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crd"
GROUP = "/apis/crawl.example.com/v1alpha1"


def proxies(ns: str, name: str = "") -> str:
    return f"{GROUP}/namespaces/{ns}/proxies" + (f"/{name}" if name else "")


def proxy(name: str, **spec) -> dict:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": name},
            "spec": {"provider": "squid-a", **spec}}


MERGE = "application/merge-patch+json"


def test_every_shipped_crd_is_accepted_as_shipped(kube_server):
    shipped = [d for p in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
               if d and d.get("kind") == "CustomResourceDefinition"]
    assert {d["metadata"]["name"] for d in shipped} == {"proxies.crawl.example.com", "providerhealths.crawl.example.com",
                                                               "proxypools.crawl.example.com"}
    for doc in shipped:
        got = kube_server.json("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{doc['metadata']['name']}")
        conds = {c["type"]: c["status"] for c in got["status"]["conditions"]}
        assert conds.get("Established") == "True" and conds.get("NamesAccepted") == "True", conds
        assert "NonStructuralSchema" not in conds, got["status"]["conditions"]
        # the server keeps the schema as written: nothing pruned or rewritten
        for want, have in zip(doc["spec"]["versions"], got["spec"]["versions"], strict=True):
            assert have["schema"] == want["schema"], want["name"]
            assert have.get("subresources") == want.get("subresources")
            assert have.get("additionalPrinterColumns") == want.get("additionalPrinterColumns")
        assert got["spec"]["scope"] == doc["spec"]["scope"]


def test_defaults_and_schema_are_applied(kube_server, kube_ns):
    created = kube_server.json("POST", proxies(kube_ns), proxy("a"))
    assert created["spec"]["port"] == 3128  # the schema's default
    status, body = kube_server.request("POST", proxies(kube_ns), proxy("b", port=99999))
    assert status == 422 and b"spec.port" in body, body
    status, body = kube_server.request("POST", proxies(kube_ns), proxy("c", provider="Not_A_Label"))
    assert status == 422 and b"spec.provider" in body, body


def test_spec_provider_is_immutable_by_the_cel_rule(kube_server, kube_ns):
    kube_server.json("POST", proxies(kube_ns), proxy("a"))
    status, body = kube_server.request("PATCH", proxies(kube_ns, "a"), {"spec": {"provider": "squid-b"}}, MERGE)
    assert status == 422, body
    assert b"provider is immutable" in body
    # the rest of the spec stays editable
    edited = kube_server.json("PATCH", proxies(kube_ns, "a"), {"spec": {"port": 3130}}, content_type=MERGE)
    assert (edited["spec"]["provider"], edited["spec"]["port"], edited["metadata"]["generation"]) == ("squid-a", 3130, 2)


def test_exactly_one_cloud_init_source_by_the_cel_rule(kube_server, kube_ns):
    both = proxy("a", cloudInit={"inline": "#cloud-config", "secretRef": {"name": "s", "key": "k"}})
    status, body = kube_server.request("POST", proxies(kube_ns), both)
    assert status == 422 and b"exactly one of cloudInit.inline or cloudInit.secretRef" in body, body
    kube_server.json("POST", proxies(kube_ns), proxy("b", cloudInit={"inline": "#cloud-config"}))


def test_the_status_subresource_keeps_spec_and_status_apart(kube_server, kube_ns):
    kube_server.json("POST", proxies(kube_ns), {**proxy("a"), "status": {"phase": "Running"}})
    obj = kube_server.json("GET", proxies(kube_ns, "a"))
    assert "status" not in obj or not obj["status"].get("phase")  # status is ignored on create
    # a status write that also carries a spec change: only the status moves
    out = kube_server.json("PATCH", proxies(kube_ns, "a") + "/status",
                           {"spec": {"port": 4000}, "status": {"phase": "Provisioning", "providerID": "x/1"}}, content_type=MERGE)
    assert out["spec"]["port"] == 3128 and out["status"]["phase"] == "Provisioning"
    assert out["metadata"]["generation"] == 1  # a status write is no new generation
    # a spec write that also carries a status: only the spec moves
    out = kube_server.json("PATCH", proxies(kube_ns, "a"), {"spec": {"port": 4001}, "status": {"phase": "Failed"}},
                           content_type=MERGE)
    assert out["spec"]["port"] == 4001 and out["status"]["phase"] == "Provisioning"
    assert out["metadata"]["generation"] == 2
    # a stale resourceVersion is refused (the controller's optimistic writes rely on it)
    status, _ = kube_server.request("PATCH", proxies(kube_ns, "a") + "/status",
                                    {"metadata": {"resourceVersion": "1"}, "status": {"phase": "Running"}}, MERGE)
    assert status == 409


def test_provider_health_is_cluster_scoped_with_a_status_subresource(kube_server):
    base = "/apis/crawl.example.com/v1alpha1/providerhealths"
    kube_server.json("POST", base, {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProviderHealth",
                                    "metadata": {"name": "crd-test"}})
    out = kube_server.json("PATCH", f"{base}/crd-test/status", {"status": {"type": "fake"}}, content_type=MERGE)
    assert out["status"]["type"] == "fake" and "namespace" not in out["metadata"]


# --- the fake API admits writes as this server does (issue 20) ------------------------

ADMISSION_CASES = [
    {},  # defaulted port
    {"placement": {"zone": "nas1", "zome": "typo"}, "surplus": True},  # pruned
    {"cloudInit": None, "port": 8080},  # a null pruned
    {"port": 0}, {"port": 65536}, {"port": "3128"}, {"provider": "KVM"}, {"provider": "x" * 64},
    {"placement": {"image": "i" * 513}}, {"cloudInit": {"secretRef": {"name": "ci"}}},
    {"cloudInit": {"secretRef": {"name": "ci", "key": "user data"}}},
]


@pytest.mark.parametrize("spec", ADMISSION_CASES, ids=[str(i) for i in range(len(ADMISSION_CASES))])
def test_the_fake_api_admits_a_create_as_the_real_server_does(kube_server, kube_ns, spec):
    import json

    from fleet.testing.kubeapi import FakeKubeAPI, Request

    body = proxy("adm", **spec)
    fake_code, fake_out = FakeKubeAPI().handle(Request("POST", proxies(kube_ns), {}, json.loads(json.dumps(body)),
                                                       "application/json"))
    real_code, real_raw = kube_server.request("POST", proxies(kube_ns), body)
    real_out = json.loads(real_raw)
    assert fake_code == real_code, (fake_out, real_out)
    if real_code == 201:
        assert fake_out["spec"] == real_out["spec"]
    else:
        # "<nil>": the server's note that CEL rules were skipped on an invalid object
        causes = {c["field"] for c in real_out["details"]["causes"]} - {"<nil>"}
        assert {c["field"] for c in fake_out["details"]["causes"]} == causes, (fake_out["message"], real_out["message"])
