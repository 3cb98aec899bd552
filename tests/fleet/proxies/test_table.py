"""`fleet get px`: kubectl-shaped rows, AGE as kubectl rounds it, and the
objects as `kubectl get -o json|yaml` shows them, cloud-init redacted."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from fleet.durations import age, human_duration
from fleet.proxies.manifests import parse_proxy
from fleet.proxies.model import CloudInit, Condition, Proxy, ProxySpec, ProxyStatus, SecretRef
from fleet.proxies.table import COLUMNS, WIDE_COLUMNS, as_json, as_list, as_yaml, columns, name, rows, to_object
from providers.base import Placement

SENTINEL = "s3cr3t-SENTINEL-7f1c"
CREATED = "2024-05-01T12:00:00Z"
T0 = datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()


def proxy(name: str = "web-1", namespace: str = "default", **kw: Any) -> Proxy:
    spec = kw.pop("spec", ProxySpec(provider="kvm"))
    return Proxy(namespace=namespace, name=name, uid=kw.pop("uid", "u-1"), generation=kw.pop("generation", 1), spec=spec,
                 created_at=kw.pop("created_at", CREATED), **kw)


RUNNING = ProxyStatus(
    phase="Running", provider_id="kvm://nas1/px-u-1", ip="10.0.0.7", port=3128, spec_hash="ab12", observed_generation=1,
    conditions=(Condition("Provisioned", "True", "Created"), Condition("Ready", "True", "Running", "", 1, CREATED)),
)


def test_columns_are_the_crds_printer_columns() -> None:
    assert COLUMNS == ("NAME", "PROVIDER", "PHASE", "IP", "PORT", "READY", "AGE")
    assert columns() == COLUMNS
    assert columns(all_namespaces=True) == ("NAMESPACE", *COLUMNS)


def test_rows() -> None:
    fresh = proxy("web-2", created_at="2024-05-01T12:04:30Z", spec=ProxySpec(provider="gcp", port=8080))
    ready = proxy("web-1", status=RUNNING)
    other = proxy("a", namespace="zz", status=ProxyStatus(phase="Failed", conditions=(Condition("Ready", "False", "Failed"),)))
    now = T0 + 3600 + 120
    assert rows([fresh, other, ready], now, all_namespaces=False) == [  # sorted by namespace, then name
        ["web-1", "kvm", "Running", "10.0.0.7", "3128", "True", "62m"],
        ["web-2", "gcp", "", "", "", "", "57m"],
        ["a", "kvm", "Failed", "", "", "False", "62m"],
    ]
    assert rows([fresh, other, ready], now, True) == [
        ["default", "web-1", "kvm", "Running", "10.0.0.7", "3128", "True", "62m"],
        ["default", "web-2", "gcp", "", "", "", "", "57m"],
        ["zz", "a", "kvm", "Failed", "", "", "False", "62m"],
    ]
    assert rows([], now, True) == []


def test_wide_adds_member_placement_pool_egress_and_instance_after_the_printer_columns() -> None:
    assert WIDE_COLUMNS == ("MEMBER", "REGION", "ZONE", "POOL", "EGRESS IP", "INSTANCE")
    assert columns(wide=True) == (*COLUMNS, *WIDE_COLUMNS)
    assert columns(all_namespaces=True, wide=True) == ("NAMESPACE", *COLUMNS, *WIDE_COLUMNS)
    placed = proxy("web-1", spec=ProxySpec(provider="kvm", placement=Placement(region="fsn1", zone="fsn1-dc14")),
                   status=ProxyStatus(**{**RUNNING.__dict__, "egress_ip": "203.0.113.9", "member": "own"}), pool="crawl")
    bought = proxy("web-3", spec=ProxySpec(provider="vendor"),
                   status=ProxyStatus(**{**RUNNING.__dict__, "member": "upstream/http",
                                         "provider_id": "http://203.0.113.1:8080"}))
    bare = proxy("web-2")
    now = T0 + 60
    assert rows([bare, placed, bought], now, all_namespaces=True, wide=True) == [
        ["default", "web-1", "kvm", "Running", "10.0.0.7", "3128", "True", "60s",
         "own", "fsn1", "fsn1-dc14", "crawl", "203.0.113.9", "kvm://nas1/px-u-1"],
        ["default", "web-2", "kvm", "", "", "", "", "60s", "<none>", "<none>", "<none>", "<none>", "<none>", "<none>"],
        ["default", "web-3", "vendor", "Running", "10.0.0.7", "3128", "True", "60s",
         "upstream/http", "<none>", "<none>", "<none>", "<none>", "http://203.0.113.1:8080"],
    ]
    assert rows([placed], now, wide=False) == [["web-1", "kvm", "Running", "10.0.0.7", "3128", "True", "60s"]]


def test_name_is_kubectls_with_the_namespace_across_all_namespaces() -> None:
    p = proxy("web-1", namespace="crawl")
    assert name(p) == "proxy.crawl.example.com/web-1"  # `kubectl get px -n crawl -o name`
    assert name(p, all_namespaces=True) == "proxy.crawl.example.com/crawl/web-1"


def test_port_is_the_status_port_not_the_spec_port() -> None:
    p = proxy(spec=ProxySpec(provider="kvm", port=8080))
    assert rows([p], T0, False)[0][4] == ""
    p = proxy(spec=ProxySpec(provider="kvm", port=8080), status=ProxyStatus(port=8080))
    assert rows([p], T0, False)[0][4] == "8080"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"), (-1.5, "0s"), (-0.5, "0s"), (0, "0s"), (0.9, "0s"), (45, "45s"), (119, "119s"),
        (120, "2m"), (192, "3m12s"), (599, "9m59s"), (600, "10m"), (659, "10m"), (3599, "59m"), (10799, "179m"),
        (10800, "3h"), (3 * 3600 + 59 * 60, "3h59m"), (7 * 3600 + 59 * 60 + 59, "7h59m"), (8 * 3600, "8h"),
        (47 * 3600 + 3599, "47h"), (48 * 3600, "2d"), (51 * 3600, "2d3h"), (8 * 86400 - 1, "7d23h"), (8 * 86400, "8d"),
        (729 * 86400, "729d"), (730 * 86400, "2y"), (733 * 86400, "2y3d"), (8 * 365 * 86400 - 1, "7y364d"),
        (8 * 365 * 86400, "8y"), (20 * 365 * 86400, "20y"),
    ],
)
def test_human_duration_rounds_like_kubectl(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown


@pytest.mark.parametrize(
    ("created", "now", "shown"),
    [
        (CREATED, T0 + 45, "45s"),
        ("2024-05-01T14:00:00+02:00", T0 + 45, "45s"),
        ("2024-05-01T12:00:00.999999Z", T0 + 45, "44s"),
        (CREATED, T0 - 1, "0s"),  # clock skew
        ("", T0, "<unknown>"),
        ("not a time", T0, "<unknown>"),
    ],
)
def test_age(created: str, now: float, shown: str) -> None:
    assert age(created, now) == shown


def test_the_object_is_kubernetes_shaped() -> None:
    p = proxy(
        spec=ProxySpec(provider="gcp", placement=Placement(zone="europe-west1-b", machine_type="e2-small"),
                       cloud_init=CloudInit(secret=SecretRef("init", "user-data")), port=8080),
        status=RUNNING, finalizers=("crawl.example.com/cleanup",), annotations={"crawl.example.com/skip-cleanup": "true"},
        resource_version="991",
    )
    assert to_object(p) == {
        "apiVersion": "crawl.example.com/v1alpha1",
        "kind": "Proxy",
        "metadata": {
            "name": "web-1", "namespace": "default", "uid": "u-1", "generation": 1, "resourceVersion": "991",
            "creationTimestamp": CREATED, "annotations": {"crawl.example.com/skip-cleanup": "true"},
            "finalizers": ["crawl.example.com/cleanup"],
        },
        "spec": {
            "provider": "gcp", "placement": {"zone": "europe-west1-b", "machineType": "e2-small"},
            "cloudInit": {"secretRef": {"name": "init", "key": "user-data"}}, "port": 8080,
        },
        "status": RUNNING.to_dict(),
    }


def test_empty_fields_are_left_out_as_the_api_server_does() -> None:
    p = Proxy(namespace="default", name="a", uid="", generation=0, spec=ProxySpec(provider="kvm"))
    assert to_object(p) == {
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "a", "namespace": "default", "uid": "", "generation": 0},
        "spec": {"provider": "kvm", "port": 3128},
    }


def test_an_object_round_trips_through_the_parser() -> None:
    p = proxy(
        spec=ProxySpec(provider="gcp", placement=Placement("r", "z", "m", "i"), cloud_init=CloudInit(secret=SecretRef("s", "k"))),
        status=RUNNING, finalizers=("crawl.example.com/cleanup",), annotations={"a": "b"}, resource_version="7",
        deleting=True, deletion_timestamp="2024-05-02T12:00:00Z",
    )
    assert parse_proxy(to_object(p)) == p
    assert parse_proxy(yaml.safe_load(as_yaml([p]))["items"][0]) == p
    assert parse_proxy(json.loads(as_json([p]))["items"][0]) == p


def test_inline_cloud_init_and_the_last_applied_annotation_are_redacted() -> None:
    last_applied = json.dumps({"spec": {"cloudInit": {"inline": SENTINEL}}})
    p = proxy(spec=ProxySpec(provider="kvm", cloud_init=CloudInit(inline=SENTINEL + "é")),
              annotations={"kubectl.kubernetes.io/last-applied-configuration": last_applied, "note": "kept"})
    obj = to_object(p)
    assert obj["spec"]["cloudInit"] == {"inline": f"<redacted: {len(SENTINEL) + 2} bytes>"}
    assert obj["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": f"<redacted: {len(last_applied)} bytes>", "note": "kept"}
    for text in (as_json([p]), as_yaml([p]), repr(obj)):
        assert SENTINEL not in text


def test_json_and_yaml_are_a_kubectl_list() -> None:
    ps = [proxy("b"), proxy("a", status=RUNNING)]
    data = json.loads(as_json(ps))
    assert data == as_list(ps) == yaml.safe_load(as_yaml(ps))
    assert list(data) == ["apiVersion", "items", "kind", "metadata"]  # sorted keys, as kubectl prints them
    assert (data["apiVersion"], data["kind"], data["metadata"]) == ("v1", "List", {"resourceVersion": ""})
    assert [item["metadata"]["name"] for item in data["items"]] == ["a", "b"]
    assert as_json(ps).startswith('{\n    "apiVersion": "v1",\n    "items": [')
    assert as_yaml(ps).startswith("apiVersion: v1\nitems:\n- apiVersion: crawl.example.com/v1alpha1\n  kind: Proxy\n")
    assert as_yaml([]) == "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: ''\n"
