"""The ProviderHealth CRD is the seed's, and what the controller writes fits
it: the API server silently prunes fields a schema does not know."""

from pathlib import Path

import pytest
import yaml

from fleet.health import decide
from fleet.health.results import CheckResult
from fleet.kube import PROVIDER_HEALTH
from fleet.proxies.table import COLUMNS, WIDE_COLUMNS
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
    assert target["properties"]["message"]["maxLength"] == decide.MAX_MESSAGE


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
    st = decide.build_status(None, result)
    check(st, STATUS)
    v = decide.overdue_verdict(None, "provider.p", 135)
    check(decide.overdue_status(st, "kvm", v, 1.8e9 + 500), STATUS)


# --- the Proxy CRD (issue 12) ---------------------------------------------------------

PX_CRD = yaml.safe_load((ROOT / "deploy/crd/crawl.example.com_proxies.yaml").read_text())
(PX_VER,) = PX_CRD["spec"]["versions"]
PX_SCHEMA = PX_VER["schema"]["openAPIV3Schema"]
PX_SPEC = PX_SCHEMA["properties"]["spec"]
PX_STATUS = PX_SCHEMA["properties"]["status"]


def crds_in_deploy():
    from tests.deploy import kustomize

    return {o["metadata"]["name"]: o for o in kustomize.render(ROOT / "deploy") if o["kind"] == "CustomResourceDefinition"}


def test_every_crd_is_installed_by_kubectl_apply_k_deploy():
    assert set(crds_in_deploy()) == {"providerhealths.crawl.example.com", "proxies.crawl.example.com",
                                     "proxypools.crawl.example.com"}


def test_proxy_names_scope_and_subresource():
    from fleet.kube import PROXY

    spec = PX_CRD["spec"]
    assert PX_CRD["metadata"]["name"] == PROXY.crd_name == "proxies.crawl.example.com"
    assert (spec["group"], PX_VER["name"], spec["names"]["kind"]) == (PROXY.group, PROXY.version, PROXY.kind)
    assert spec["scope"] == "Namespaced" and PROXY.namespaced
    assert spec["names"]["shortNames"] == ["px"] == list(PROXY.short_names)
    assert (spec["names"]["singular"], spec["names"]["listKind"]) == ("proxy", "ProxyList")
    assert PX_VER["subresources"] == {"status": {}}
    assert PX_VER["served"] and PX_VER["storage"]


def test_proxy_printer_columns():
    cols = [(c["name"], c["jsonPath"], c["type"], c.get("priority", 0)) for c in PX_VER["additionalPrinterColumns"]]
    assert cols == [
        ("Provider", ".spec.provider", "string", 0),
        ("Phase", ".status.phase", "string", 0),
        ("IP", ".status.ip", "string", 0),
        ("Port", ".status.port", "integer", 0),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string", 0),
        ("Age", ".metadata.creationTimestamp", "date", 0),
        ("Member", ".status.member", "string", 1),  # `kubectl get px -o wide`, as `fleet get px -o wide`
    ]
    assert COLUMNS[1:] == tuple(c[0].upper() for c in cols if not c[3])
    assert WIDE_COLUMNS[:1] == tuple(c[0].upper() for c in cols if c[3])


def rules(schema):
    return [(v["rule"], v["message"]) for v in schema.get("x-kubernetes-validations", ())]


def test_proxy_spec_provider_is_a_required_immutable_dns_label():
    assert PX_SCHEMA["required"] == ["spec"] and PX_SPEC["required"] == ["provider"]
    provider = PX_SPEC["properties"]["provider"]
    assert provider["maxLength"] == 63 and provider["minLength"] == 1
    assert provider["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    assert rules(provider) == [("self == oldSelf", "provider is immutable")]


@pytest.mark.parametrize(("name", "ok"), [
    ("kvm-home", True), ("a", True), ("gcp-eu-1", True), ("x" * 63, True),
    ("KVM", False), ("-kvm", False), ("kvm-", False), ("kvm_home", False), ("kvm.home", False), ("", False), ("x" * 64, False),
])
def test_the_provider_pattern_is_the_one_the_config_accepts(name, ok):
    import re

    from providers import names

    provider = PX_SPEC["properties"]["provider"]
    fits = bool(re.fullmatch(provider["pattern"].strip("^$"), name)) and 1 <= len(name) <= provider["maxLength"]
    assert fits is ok is names.is_label(name)


def test_proxy_spec_placement_port_and_cloud_init():
    props = PX_SPEC["properties"]
    placement = props["placement"]
    assert set(placement["properties"]) == {"region", "zone", "machineType", "image"}
    assert "required" not in placement
    for name, field in placement["properties"].items():
        assert field["type"] == "string" and 0 < field["maxLength"] <= 512, name
    port = props["port"]
    assert (port["type"], port["minimum"], port["maximum"], port["default"]) == ("integer", 1, 65535, 3128)
    from fleet.proxies.model import DEFAULT_PORT

    assert port["default"] == DEFAULT_PORT
    ci = props["cloudInit"]
    assert set(ci["properties"]) == {"inline", "secretRef"}
    assert ci["properties"]["inline"]["maxLength"] == 32768
    ref = ci["properties"]["secretRef"]
    assert ref["required"] == ["key", "name"] and all(ref["properties"][k]["maxLength"] == 253 for k in ("key", "name"))
    assert rules(ci) == [("has(self.inline) != has(self.secretRef)",
                          "exactly one of cloudInit.inline or cloudInit.secretRef must be set")]


def every_cel_rule(schema, path="$"):
    out = [(path, r) for r, _ in rules(schema)]
    for k, v in (schema.get("properties") or {}).items():
        out += every_cel_rule(v, f"{path}.{k}")
    if "items" in schema:
        out += every_cel_rule(schema["items"], f"{path}[]")
    return out


def test_proxy_cel_rules_are_the_two_and_bounded():
    """Every CEL rule, where it sits: the API server estimates a rule's cost
    from the bounds of what it reads, so every string under spec is bounded."""
    assert every_cel_rule(PX_SCHEMA) == [
        ("$.spec.cloudInit", "has(self.inline) != has(self.secretRef)"),
        ("$.spec.provider", "self == oldSelf"),
    ]

    def unbounded(schema, path):
        if schema.get("type") == "string" and "maxLength" not in schema and "enum" not in schema:
            yield path
        for k, v in (schema.get("properties") or {}).items():
            yield from unbounded(v, f"{path}.{k}")

    assert list(unbounded(PX_SPEC, "spec")) == []
    assert list(unbounded(PX_STATUS, "status")) == []


def test_proxy_status_phases_and_conditions_are_the_models():
    from fleet.proxies import model

    props = PX_STATUS["properties"]
    assert props["phase"]["enum"] == list(model.PHASES)
    assert set(props) == {"phase", "providerID", "ip", "port", "specHash", "observedGeneration", "message", "conditions",
                          "egressIP", "member"}
    conditions = props["conditions"]
    assert (conditions["x-kubernetes-list-type"], conditions["x-kubernetes-list-map-keys"]) == ("map", ["type"])
    item = conditions["items"]
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert set(item["properties"]) == {"type", "status", "reason", "message", "observedGeneration", "lastTransitionTime"}
    # the same condition shape as ProviderHealth's (metav1.Condition)
    assert item == STATUS["properties"]["conditions"]["items"]


@pytest.mark.parametrize("phase", ["Pending", "Provisioning", "Running", "Replacing", "Deleting", "Failed"])
def test_what_the_proxy_model_writes_fits_the_schema(phase):
    from fleet.proxies.model import HEALTHY, PROVISIONED, READY, Condition, ProxyStatus

    conds = tuple(Condition(t, s, "SomeReason", "m" * 100, 3, "2026-01-01T00:00:00Z")
                  for t, s in ((PROVISIONED, "True"), (HEALTHY, "Unknown"), (READY, "False")))
    st = ProxyStatus(phase, "projects/p/zones/z/instances/px-1", "10.0.0.7", 3128, "a" * 64, 3, "ok", conds,
                     egress_ip="203.0.113.9", member="upstream/socks5")
    check(st.to_dict(), PX_STATUS)


def test_a_proxy_manifest_fits_the_spec_schema():
    for cloud_init in ({"inline": "#cloud-config\n"}, {"secretRef": {"name": "ci", "key": "user-data"}}):
        check({"provider": "kvm-home", "placement": {"zone": "nas1", "machineType": "small"}, "cloudInit": cloud_init,
               "port": 3128}, PX_SPEC, "spec")
    with pytest.raises(AssertionError, match=r"spec\.provider is required"):
        check({"port": 3128}, PX_SPEC, "spec")
    with pytest.raises(AssertionError, match="not in the CRD schema"):
        check({"provider": "p", "cloudinit": {}}, PX_SPEC, "spec")


# --- one source: the CRDs and the docs' tables of their fields are generated -----------


def _generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fleet_crd_generate", ROOT / "deploy/crd/generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_crds_are_freshly_generated():
    gen = _generator()
    outputs = gen.outputs()
    assert set(outputs) == {ROOT / "deploy/crd/crawl.example.com_proxies.yaml",
                            ROOT / "deploy/crd/crawl.example.com_providerhealths.yaml",
                            ROOT / "deploy/crd/crawl.example.com_proxypools.yaml"}
    for path, text in outputs.items():
        assert path.read_text() == text, f"{path.name} is stale: run python deploy/crd/generate.py"
    assert gen.main(["--check"]) == 0


def test_the_generator_check_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    gen = _generator()
    stale = tmp_path / "crd"
    stale.mkdir()
    for crd, _, _ in gen.CRDS:
        (stale / crd.file).write_text((gen.HERE / crd.file).read_text())
    (stale / "crawl.example.com_proxies.yaml").write_text("# stale\n")
    monkeypatch.setattr(gen, "HERE", stale)
    assert gen.main(["--check"]) == 1
    assert "crawl.example.com_proxies.yaml is stale" in capsys.readouterr().err


def test_the_crds_are_the_tables_and_claim_no_generator_they_lack():
    from fleet.health import schema as health_schema
    from fleet.proxies import schema as proxy_schema

    assert proxy_schema.CRD.document() == PX_CRD
    assert health_schema.CRD.document() == CRD
    assert "annotations" not in CRD["metadata"]  # no controller-gen wrote it


def test_the_docs_tables_name_every_field_with_its_limits():
    """docs/reference/resources.md (docs/generate.py) holds each CRD's table, from the same schema tables."""
    from tests.docsgen import REFERENCE, generator

    page = (REFERENCE / "resources.md").read_text()
    assert page == generator().resources_page(), "docs/reference/resources.md is stale: run python docs/generate.py"
    assert "| `spec.provider` | string | 1–63 characters; `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`; provider is immutable" in page
    assert "| `spec.port` | integer | 1–65535 | `3128` |" in page
    assert "| `status.targets[].message` | string | at most 1024 characters |" in page
    assert "| `status.targets[].details` | map of string |" in page
    for kind in ("Proxy", "ProxyPool", "ProviderHealth"):
        assert f"\n## {kind}\n" in page


def test_the_provider_health_type_names_every_registered_provider_type():
    from providers.registry import TYPES

    description = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["type"]["description"]
    assert all(name in description for name in TYPES), (description, sorted(TYPES))

