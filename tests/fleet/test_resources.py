"""Every Resource fleet writes is pinned against its CRD in deploy/crd/:
group, version, plural, kind, scope and short names. A Resource without a
CRD fails here (add the CRD first); the CRDs ship what the writer needs
(the status subresource)."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleet.kube import KNOWN, PROVIDER_HEALTH, PROXY, Resource, resources

ROOT = Path(__file__).resolve().parents[2]


def crds() -> dict[str, dict]:
    """The CRDs of deploy/crd/, by name (`plural.group`)."""
    out = {}
    for path in sorted((ROOT / "deploy/crd").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                out[doc["metadata"]["name"]] = doc
    return out


def test_known_lists_every_resource_defined_in_the_module():
    defined = {v for v in vars(resources).values() if isinstance(v, Resource)}
    assert defined == set(KNOWN)
    assert len({r.crd_name for r in KNOWN}) == len(KNOWN)


def problems(resource: Resource, crds: dict[str, dict]) -> list[str]:
    """How `resource` disagrees with its CRD ([] when it matches)."""
    crd = crds.get(resource.crd_name)
    if crd is None:
        return [f"no CRD {resource.crd_name} in deploy/crd/"]
    spec, out = crd["spec"], []
    names = spec["names"]
    for what, theirs, ours in (
        ("group", spec["group"], resource.group),
        ("plural", names["plural"], resource.plural),
        ("kind", names["kind"], resource.kind),
        ("scope", spec["scope"], "Namespaced" if resource.namespaced else "Cluster"),
        ("shortNames", tuple(names.get("shortNames") or ()), resource.short_names),
    ):
        if theirs != ours:
            out.append(f"{what}: CRD {theirs!r}, Resource {ours!r}")
    version = next((v for v in spec["versions"] if v["name"] == resource.version), None)
    if version is None or not version.get("served") or not version.get("storage"):
        out.append(f"version {resource.version!r} is not the served storage version")
    elif version.get("subresources", {}).get("status") != {}:
        out.append("no status subresource (the writer patches it)")
    return out


@pytest.mark.parametrize("resource", KNOWN, ids=lambda r: r.crd_name)
def test_each_resource_matches_its_crd(resource):
    assert problems(resource, crds()) == []


@pytest.mark.parametrize("resource, want", [
    (Resource("crawl.example.com", "v1alpha1", "leases", "Lease", namespaced=True),
     ["no CRD leases.crawl.example.com in deploy/crd/"]),
    (dataclasses.replace(PROXY, namespaced=False, short_names=()),
     ["scope: CRD 'Namespaced', Resource 'Cluster'", "shortNames: CRD ('px',), Resource ()"]),
    (dataclasses.replace(PROVIDER_HEALTH, namespaced=True), ["scope: CRD 'Cluster', Resource 'Namespaced'"]),
    (dataclasses.replace(PROVIDER_HEALTH, kind="Health", short_names=()),
     ["kind: CRD 'ProviderHealth', Resource 'Health'", "shortNames: CRD ('ph',), Resource ()"]),
    (dataclasses.replace(PROVIDER_HEALTH, version="v1"), ["version 'v1' is not the served storage version"]),
])
def test_the_pin_fails_for_a_resource_that_does_not_match(resource, want):
    assert problems(resource, crds()) == want


def test_a_crd_is_listed_in_the_kustomization():
    kustomization = yaml.safe_load((ROOT / "deploy/crd/kustomization.yaml").read_text())
    files = {p.name for p in (ROOT / "deploy/crd").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_provider_health():
    want = Resource("crawl.example.com", "v1alpha1", "providerhealths", "ProviderHealth", namespaced=False, short_names=("ph",))
    assert want == PROVIDER_HEALTH
    assert (PROVIDER_HEALTH.api_version, PROVIDER_HEALTH.crd_name) == ("crawl.example.com/v1alpha1",
                                                                        "providerhealths.crawl.example.com")


def test_proxy():
    want = Resource("crawl.example.com", "v1alpha1", "proxies", "Proxy", namespaced=True, short_names=("px",))
    assert want == PROXY and PROXY in KNOWN
    assert (PROXY.api_version, PROXY.crd_name) == ("crawl.example.com/v1alpha1", "proxies.crawl.example.com")


def test_the_kinds_and_errors_load_without_the_sdk():
    """A pure module (and the `fleet` command's tables) may import the kinds and
    the error tree without loading the kubernetes SDK; `kube.Writer` loads it."""
    code = ("import sys; from fleet import kube; import fleet.health.decide, fleet.cli.tables; "
            "kube.PROXY, kube.KubeError; assert 'kubernetes' not in sys.modules, 'loaded early'; "
            "kube.Writer; assert 'kubernetes' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
