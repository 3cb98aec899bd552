"""The ProviderHealth CRD is the seed's, and what the controller writes fits
it: the API server silently prunes fields a schema does not know."""

from pathlib import Path

import pytest
import yaml

from fleet.health import status
from fleet.health.results import CheckResult
from fleet.resources import PROVIDER_HEALTH
from providers.base import TargetStatus

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "deploy/crd/crawl.example.com_providerhealths.yaml").read_text())
(VER,) = CRD["spec"]["versions"]
STATUS = VER["schema"]["openAPIV3Schema"]["properties"]["status"]


def test_names_scope_and_subresource():
    spec = CRD["spec"]
    ph = PROVIDER_HEALTH
    assert CRD["metadata"]["name"] == f"{ph.plural}.{ph.group}" == "providerhealths.crawl.example.com"
    assert (spec["group"], VER["name"], spec["names"]["kind"]) == (ph.group, ph.version, ph.kind)
    assert spec["scope"] == "Cluster" and not ph.namespaced
    assert spec["names"]["shortNames"] == ["ph"] == list(ph.short_names)
    assert VER["subresources"] == {"status": {}}


def test_printer_columns():
    cols = [(c["name"], c["jsonPath"]) for c in VER["additionalPrinterColumns"]]
    assert cols == [
        ("Type", ".status.type"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        ("Targets", ".status.targetsReady"),
        ("Last Check", ".status.lastCheckTime"),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_list_maps_required_fields_and_message_limit():
    props = STATUS["properties"]
    assert props["targets"]["x-kubernetes-list-type"] == "map"
    assert props["targets"]["x-kubernetes-list-map-keys"] == ["name"]
    assert props["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    target = props["targets"]["items"]
    assert target["required"] == ["lastTransitionTime", "name", "ready"]
    assert target["properties"]["message"]["maxLength"] == status.MAX_MESSAGE


def check(value, schema, path="status"):
    """A small structural validator for the subset of OpenAPI the CRD uses."""
    t = schema.get("type")
    if t == "object":
        assert isinstance(value, dict), path
        props = schema.get("properties")
        for k, v in value.items():
            if props is not None:
                assert k in props, f"{path}.{k} is not in the CRD schema: the API server would prune it"
                check(v, props[k], f"{path}.{k}")
            else:
                check(v, schema.get("additionalProperties", {}), f"{path}.{k}")
        for k in schema.get("required", ()):
            assert k in value, f"{path}.{k} is required"
    elif t == "array":
        assert isinstance(value, list), path
        for i, v in enumerate(value):
            check(v, schema["items"], f"{path}[{i}]")
    elif t == "string":
        assert isinstance(value, str), path
        assert len(value) <= schema.get("maxLength", 10**9), path
        if "enum" in schema:
            assert value in schema["enum"], path
    elif t == "boolean":
        assert isinstance(value, bool), path
    elif t == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), path


@pytest.mark.parametrize(
    "result",
    [
        CheckResult("p", "kvm", True, 1.8e9, (TargetStatus("nas1", "nas1:22", True, "Reachable", "", 0.08, {"pool": "default"}),)),
        CheckResult("p", "kvm", True, 1.8e9, (TargetStatus("nas1", "", False, "Timeout", "x" * 5000, 15.0),)),
        CheckResult("p", "gcp", False, 1.8e9),
        CheckResult("p", "kvm", True, 1.8e9),
    ],
)
def test_what_the_controller_writes_fits_the_schema(result):
    st = status.build_status(None, result)
    check(st, STATUS)
    v = status.overdue_verdict(None, "provider.p", 135)
    check(status.overdue_status(st, "kvm", v, 1.8e9 + 500), STATUS)
