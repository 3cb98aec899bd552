"""Proxy objects and manifest files in, Proxy values or named errors out:
every validation rule with a good and a bad value, the error text, the file
and directory behaviour, the bounds, and the cloud-init text never shown."""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import pytest

from fleet.proxies import manifests
from fleet.proxies.manifests import ManifestError, fingerprint, load_manifests, parse_proxy
from fleet.proxies.model import Condition, Proxy, SecretRef, to_object
from providers.base import Placement

SENTINEL = "s3cr3t-SENTINEL-7f1c"


def proxy_obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crawl.example.com/v1alpha1",
        "kind": "Proxy",
        "metadata": {"name": "web-1"},
        "spec": {"provider": "kvm", **spec},
    }


def setting(path: str, value: Any, obj: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of `obj` (default: a valid Proxy) with the dotted `path` set; a
    value of DELETE removes the key."""
    out = copy.deepcopy(obj if obj is not None else proxy_obj())
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return out


DELETE = object()


def error(obj: Any, source: str = "") -> ManifestError:
    with pytest.raises(ManifestError) as err:
        parse_proxy(obj, source=source)
    return err.value


# --- good values -------------------------------------------------------------------


def test_a_minimal_manifest_gets_the_defaults() -> None:
    p = parse_proxy(proxy_obj())
    assert p == Proxy(namespace="default", name="web-1", uid="", generation=0,
                      spec=p.spec, annotations={})
    assert p.spec.provider == "kvm"
    assert p.spec.port == 3128
    assert p.spec.placement == Placement()
    assert p.spec.cloud_init.inline is None and p.spec.cloud_init.secret is None
    assert (p.deleting, p.finalizers, p.resource_version, p.created_at) == (False, (), "", "")


@pytest.mark.parametrize(
    ("path", "value", "read"),
    [
        ("metadata.name", "a", lambda p: p.name == "a"),
        ("metadata.name", "web-1.eu.example", lambda p: p.name == "web-1.eu.example"),
        ("metadata.name", "a" * 63 + "." + "b" * 189, lambda p: len(p.name) == 253),
        ("metadata.namespace", "crawl", lambda p: p.namespace == "crawl"),
        ("metadata.namespace", "n" * 63, lambda p: p.namespace == "n" * 63),
        ("metadata.namespace", None, lambda p: p.namespace == "default"),
        ("metadata.uid", "3f1e-77", lambda p: p.uid == "3f1e-77"),
        ("metadata.generation", 0, lambda p: p.generation == 0),
        ("metadata.generation", 7, lambda p: p.generation == 7),
        ("metadata.resourceVersion", "12345", lambda p: p.resource_version == "12345"),
        ("metadata.creationTimestamp", "2024-05-01T12:00:00Z", lambda p: p.created_at == "2024-05-01T12:00:00Z"),
        ("metadata.creationTimestamp", "2024-05-01T12:00:00.123456789+02:00", lambda p: p.created_at.endswith("+02:00")),
        ("metadata.deletionTimestamp", "2024-05-01T12:00:00Z", lambda p: p.deleting and p.deletion_timestamp == "2024-05-01T12:00:00Z"),
        ("metadata.deletionTimestamp", None, lambda p: not p.deleting and p.deletion_timestamp == ""),
        ("metadata.finalizers", ["crawl.example.com/cleanup"], lambda p: p.finalizers == ("crawl.example.com/cleanup",)),
        ("metadata.finalizers", None, lambda p: p.finalizers == ()),
        ("metadata.annotations", {"crawl.example.com/skip-cleanup": "true"}, lambda p: p.skip_cleanup),
        ("metadata.annotations", None, lambda p: p.annotations == {}),
        ("metadata.labels", {"team": "crawl"}, lambda p: p.name == "web-1"),  # tolerated
        ("metadata.managedFields", [{"manager": "kubectl"}], lambda p: p.name == "web-1"),
        ("spec.provider", "home-kvm", lambda p: p.spec.provider == "home-kvm"),
        ("spec.provider", "p" * 63, lambda p: p.spec.provider == "p" * 63),
        ("spec.port", 1, lambda p: p.spec.port == 1),
        ("spec.port", 65535, lambda p: p.spec.port == 65535),
        ("spec.port", None, lambda p: p.spec.port == 3128),  # null is pruned, then defaulted
        ("spec.placement", {"region": "europe-west1", "zone": "europe-west1-b", "machineType": "e2-small", "image": "debian-12"},
         lambda p: p.spec.placement == Placement("europe-west1", "europe-west1-b", "e2-small", "debian-12")),
        ("spec.placement", {"zone": "nas1"}, lambda p: p.spec.placement == Placement(zone="nas1")),
        ("spec.placement", {"image": "i" * 512, "zone": None}, lambda p: len(p.spec.placement.image) == 512),
        ("spec.placement", None, lambda p: p.spec.placement == Placement()),
        ("spec.cloudInit", {"inline": "#cloud-config\n"}, lambda p: p.spec.cloud_init.inline == "#cloud-config\n"),
        ("spec.cloudInit", {"inline": "x" * 32768}, lambda p: len(p.spec.cloud_init.inline or "") == 32768),
        ("spec.cloudInit", {"inline": "", "secretRef": None}, lambda p: p.spec.cloud_init.inline == ""),
        ("spec.cloudInit", {"secretRef": {"name": "proxy-init", "key": "user-data.yaml"}},
         lambda p: p.spec.cloud_init.secret == SecretRef("proxy-init", "user-data.yaml")),
        ("spec.cloudInit", {"secretRef": {"name": "a.b-c", "key": "_K-.9"}}, lambda p: p.spec.cloud_init.secret is not None),
        ("spec.cloudInit", None, lambda p: p.spec.cloud_init.inline is None and p.spec.cloud_init.secret is None),
    ],
)
def test_good_values(path: str, value: Any, read: Any) -> None:
    assert read(parse_proxy(setting(path, value)))


# --- bad values -------------------------------------------------------------------------


BAD_VALUES = [
    ("web-1", "a Proxy must be a mapping, got 'web-1'"),
    (setting("apiVersion", "crawl.example.com/v1"), "apiVersion: must be 'crawl.example.com/v1alpha1', got 'crawl.example.com/v1'"),
    (setting("apiVersion", DELETE), "apiVersion: must be 'crawl.example.com/v1alpha1', got None"),
    (setting("kind", "ProviderHealth"), "kind: must be 'Proxy', got 'ProviderHealth'"),
    (setting("metadata", DELETE), "metadata: is required and must be a mapping, got None"),
    (setting("metadata", ["web-1"]), "metadata: is required and must be a mapping, got a list of 1 item(s)"),
    (setting("metadata.name", DELETE), "metadata.name: is required, got None"),
    (setting("metadata.name", ""), "metadata.name: is required, got ''"),
    (setting("metadata.name", 7), "metadata.name: must be a string, got 7"),
    (setting("metadata.name", "Web_1"), "metadata.name: must be a DNS-1123 subdomain (lowercase letters, digits and '-' "
                                        "in '.'-separated parts, starting and ending with a letter or digit), got 'Web_1'"),
    (setting("metadata.name", "web-"), "metadata.name: must be a DNS-1123 subdomain"),
    (setting("metadata.name", "a..b"), "metadata.name: must be a DNS-1123 subdomain"),
    (setting("metadata.name", "web-1\n"), "metadata.name: must be a DNS-1123 subdomain"),
    (setting("metadata.name", "a" * 254), "metadata.name: must be at most 253 characters, got 'aaaa"),
    (setting("metadata.namespace", "a.b"), "metadata.namespace: must be a DNS-1123 label (lowercase letters, digits and '-', "
                                           "starting and ending with a letter or digit), got 'a.b'"),
    (setting("metadata.namespace", "n" * 64), "metadata.namespace: must be at most 63 characters"),
    (setting("metadata.namespace", ""), "metadata.namespace: is required, got ''"),
    (setting("metadata.uid", 12), "metadata.uid: must be a string, got 12"),
    (setting("metadata.generation", -1), "metadata.generation: must be an integer of at least 0, got -1"),
    (setting("metadata.generation", "1"), "metadata.generation: must be an integer of at least 0, got '1'"),
    (setting("metadata.generation", True), "metadata.generation: must be an integer of at least 0, got True"),
    (setting("metadata.resourceVersion", 5), "metadata.resourceVersion: must be a string, got 5"),
    (setting("metadata.creationTimestamp", "yesterday"),
     "metadata.creationTimestamp: must be an RFC 3339 time such as 2024-05-01T12:00:00Z, got 'yesterday'"),
    (setting("metadata.creationTimestamp", "2024-13-01T00:00:00Z"), "metadata.creationTimestamp: must be an RFC 3339 time"),
    (setting("metadata.creationTimestamp", "2024-05-01"), "metadata.creationTimestamp: must be an RFC 3339 time"),
    (setting("metadata.deletionTimestamp", "now"), "metadata.deletionTimestamp: must be an RFC 3339 time"),
    (setting("metadata.finalizers", "crawl.example.com/cleanup"), "metadata.finalizers: must be a list of strings, got 'crawl"),
    (setting("metadata.finalizers", ["ok", 3]), "metadata.finalizers[1]: must be a string, got 3"),
    (setting("metadata.annotations", ["a"]), "metadata.annotations: must be a mapping of strings to strings, got a list"),
    (setting("metadata.annotations", {"crawl.example.com/skip-cleanup": True}),
     "metadata.annotations['crawl.example.com/skip-cleanup']: must be a string, got True"),
    (setting("metadata.annotations", {1: "x"}), "metadata.annotations[1]: keys must be strings"),
    (setting("spec", DELETE), "spec: is required and must be a mapping, got None"),
    (setting("spec", "kvm"), "spec: is required and must be a mapping, got 'kvm'"),
    (setting("spec.provider", DELETE), "spec.provider: is required, got None"),
    (setting("spec.provider", "Home_KVM"), "spec.provider: must be a DNS-1123 label (lowercase letters, digits and '-', "
                                           "starting and ending with a letter or digit), got 'Home_KVM'"),
    (setting("spec.provider", "a.b"), "spec.provider: must be a DNS-1123 label"),
    (setting("spec.provider", "p" * 64), "spec.provider: must be at most 63 characters"),
    (setting("spec.provider", ["kvm"]), "spec.provider: must be a string, got a list of 1 item(s)"),
    (setting("spec.port", 70000), "spec.port: must be an integer from 1 to 65535, got 70000"),
    (setting("spec.port", 0), "spec.port: must be an integer from 1 to 65535, got 0"),
    (setting("spec.port", -1), "spec.port: must be an integer from 1 to 65535, got -1"),
    (setting("spec.port", True), "spec.port: must be an integer from 1 to 65535, got True"),
    (setting("spec.port", "3128"), "spec.port: must be an integer from 1 to 65535, got '3128'"),
    (setting("spec.port", 3128.0), "spec.port: must be an integer from 1 to 65535, got 3128.0"),
    (setting("spec.port", 10**400), "spec.port: must be an integer from 1 to 65535, got an integer of about 401 digits"),
    (setting("spec.placement", "eu"), "spec.placement: must be a mapping of region, zone, machineType, image, got 'eu'"),
    (setting("spec.placement", {"zone": 3}), "spec.placement.zone: must be a string, got 3"),
    (setting("spec.placement", {"region": "r" * 129}), "spec.placement.region: must be at most 128 characters"),
    (setting("spec.placement", {"zone": "z" * 129}), "spec.placement.zone: must be at most 128 characters"),
    (setting("spec.placement", {"machineType": "m" * 129}), "spec.placement.machineType: must be at most 128 characters"),
    (setting("spec.placement", {"image": "i" * 513}), "spec.placement.image: must be at most 512 characters"),
    (setting("spec.placement", {"machine_type": "e2"}),
     "spec.placement.machine_type: unknown key; did you mean 'machineType'? (its value, a string of 2 characters, is not shown)"),
    (setting("spec.cloudInit", {}), "spec.cloudInit: must set exactly one of inline or secretRef, neither is set"),
    (setting("spec.cloudInit", {"inline": "x", "secretRef": {"name": "a", "key": "b"}}),
     "spec.cloudInit: must set exactly one of inline or secretRef, both are set"),
    (setting("spec.cloudInit", {"secretRef": "proxy-init"}),
     "spec.cloudInit.secretRef: must be a mapping with name and key, got a string of 10 characters (not shown)"),
    (setting("spec.cloudInit", {"secretRef": {"key": "k"}}), "spec.cloudInit.secretRef.name: is required, got None"),
    (setting("spec.cloudInit", {"secretRef": {"name": "Init_1", "key": "k"}}),
     "spec.cloudInit.secretRef.name: must be a DNS-1123 subdomain"),
    (setting("spec.cloudInit", {"secretRef": {"name": "n" * 254, "key": "k"}}),
     "spec.cloudInit.secretRef.name: must be at most 253 characters"),
    (setting("spec.cloudInit", {"secretRef": {"name": "init"}}),
     "spec.cloudInit.secretRef.key: is required and must be a string, got None"),
    (setting("spec.cloudInit", {"secretRef": {"name": "init", "key": ""}}), "spec.cloudInit.secretRef.key: is required"),
    (setting("spec.cloudInit", {"secretRef": {"name": "init", "key": "user data"}}),
     "spec.cloudInit.secretRef.key: must be a Secret key: at most 253 letters, digits, '-', '_' or '.', "
     "not '.', '..' or starting with '..' (as Kubernetes requires), got 'user data'"),
    (setting("spec.cloudInit", {"secretRef": {"name": "init", "key": "k" * 254}}),
     "spec.cloudInit.secretRef.key: must be a Secret key"),
    (setting("spec.cloudInit", {"secretRef": {"name": "init", "key": "k", "namespace": "x"}}),
     "spec.cloudInit.secretRef.namespace: unknown key; did you mean 'name'? (its value, a string of 1 characters, is not shown)"),
    (setting("spec.prot", 80), "spec.prot: unknown key; did you mean 'port'? (its value, an integer, is not shown)"),
    (setting("spec.replicas", 2), "spec.replicas: unknown key (its value, an integer, is not shown)"),
    (setting("extra", {}), "extra: unknown key (its value, a mapping, is not shown)"),
]


@pytest.mark.parametrize(
    ("obj", "expected"),
    BAD_VALUES,
)
def test_bad_values(obj: Any, expected: str) -> None:
    assert str(error(obj)).startswith(expected)


def test_the_message_names_source_field_and_value() -> None:
    err = error(setting("spec.port", 70000), source="proxies.yaml#2")
    assert str(err) == "proxies.yaml#2: spec.port: must be an integer from 1 to 65535, got 70000"
    assert (err.source, err.path) == ("proxies.yaml#2", "spec.port")
    assert err.message == "must be an integer from 1 to 65535, got 70000"
    assert repr(err) == f"ManifestError({str(err)!r})"


def test_a_huge_value_is_shown_bounded() -> None:
    err = error(setting("spec.provider", "X" * 1_000_000))
    assert len(str(err)) < 300
    assert "1000000 characters" in str(err)


# --- status: read leniently -----------------------------------------------------------------

STATUS = {
    "phase": "Running", "providerID": "kvm://nas1/px-3f1e", "ip": "10.0.0.7", "port": 3128, "specHash": "ab12",
    "observedGeneration": 3, "message": "",
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Running", "message": "ok", "observedGeneration": 3,
         "lastTransitionTime": "2024-05-01T12:00:00Z"},
        {"type": "Healthy", "status": "Unknown"},
    ],
}


def test_status_is_read() -> None:
    s = parse_proxy(setting("status", STATUS)).status
    assert (s.phase, s.provider_id, s.ip, s.port, s.spec_hash, s.observed_generation) == (
        "Running", "kvm://nas1/px-3f1e", "10.0.0.7", 3128, "ab12", 3)
    assert s.conditions == (
        Condition("Ready", "True", "Running", "ok", 3, "2024-05-01T12:00:00Z"),
        Condition("Healthy", "Unknown", ""),
    )
    assert s.to_dict()["conditions"][0] == STATUS["conditions"][0]


@pytest.mark.parametrize(
    "status",
    [
        "Running", [], 7, None,
        {"phase": 3, "ip": ["10.0.0.7"], "port": "3128", "observedGeneration": -2, "message": {"a": 1}, "conditions": "Ready"},
        {"port": True, "conditions": [None, "Ready", {"type": 1, "status": "True"}, {"status": "True"}, {"type": "Ready"},
                                      {"type": "", "status": "True"}]},
        {"surprise": {"deep": [1, 2]}},
    ],
)
def test_ill_typed_status_falls_back_to_defaults_never_an_error(status: Any) -> None:
    s = parse_proxy(setting("status", status)).status
    assert (s.phase, s.ip, s.port, s.observed_generation, s.message, s.conditions) == ("", "", 0, 0, "", ())


def test_a_malformed_condition_is_skipped_the_good_ones_kept() -> None:
    conditions = [{"type": "Ready"}, {"type": "Ready", "status": "False", "reason": 5, "observedGeneration": "x"}]
    s = parse_proxy(setting("status", {"conditions": conditions})).status
    assert s.conditions == (Condition("Ready", "False", ""),)


def test_an_object_from_the_api_server() -> None:
    obj = proxy_obj(port=8080, cloudInit={"secretRef": {"name": "init", "key": "user-data"}})
    obj["metadata"] = {
        "name": "web-1", "namespace": "crawl", "uid": "0b7c-11", "generation": 4, "resourceVersion": "9981",
        "creationTimestamp": "2024-05-01T12:00:00Z", "deletionTimestamp": "2024-05-02T12:00:00Z",
        "deletionGracePeriodSeconds": 0, "finalizers": ["crawl.example.com/cleanup"],
        "annotations": {"crawl.example.com/skip-cleanup": "true"}, "labels": {"a": "b"},
        "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}],
    }
    obj["status"] = STATUS
    p = parse_proxy(obj)
    assert (p.key, p.uid, p.generation, p.resource_version, p.created_at) == ("crawl/web-1", "0b7c-11", 4, "9981", "2024-05-01T12:00:00Z")
    assert p.deleting and p.skip_cleanup and p.finalizers == ("crawl.example.com/cleanup",)
    assert p.spec.port == 8080 and p.status.phase == "Running"


def test_what_the_model_writes_reads_back() -> None:
    """`model.to_object` (standalone mode keeps Proxies in Redis that way) and
    `parse_proxy` agree, inline cloud-init included."""
    obj = setting("spec.cloudInit", {"inline": SENTINEL})
    obj["metadata"].update(namespace="crawl", uid="u-9", generation=2, resourceVersion="5", creationTimestamp="2024-05-01T12:00:00Z",
                           deletionTimestamp="2024-05-02T12:00:00Z", finalizers=["crawl.example.com/cleanup"], annotations={"a": "b"})
    obj["spec"]["placement"] = {"zone": "nas1", "image": "debian-12"}
    obj["status"] = STATUS
    p = parse_proxy(obj)
    assert parse_proxy(to_object(p)) == p
    assert p.spec.cloud_init.inline == SENTINEL


def test_the_input_is_not_modified() -> None:
    obj = proxy_obj()
    before = copy.deepcopy(obj)
    parse_proxy(obj)
    assert obj == before


# --- cloud-init text never shown ---------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [
        setting("spec.cloudInit", {"inline": SENTINEL * 3000}),  # too long
        setting("spec.cloudInit", {"inline": [SENTINEL]}),
        setting("spec.cloudInit", {"inline": {"text": SENTINEL}}),
        setting("spec.cloudInit", SENTINEL),  # the text put where the block belongs
        setting("spec.cloudInit", {"inline": SENTINEL, "secretRef": {"name": "a", "key": "b"}}),
        setting("spec.cloudInit", {"inlined": SENTINEL}),
        setting("spec.cloudInit", {"secretRef": SENTINEL}),
        setting("spec.cloudinit", SENTINEL),
        setting("spec.port", 0, setting("spec.cloudInit", {"inline": SENTINEL})),
    ],
)
def test_cloud_init_text_never_appears_in_an_error(obj: Any) -> None:
    err = error(obj, source="x.yaml#1")
    for text in (str(err), repr(err), err.message, *map(str, err.args)):
        assert SENTINEL not in text
        assert SENTINEL[:8] not in text


def test_cloud_init_text_never_appears_in_a_repr() -> None:
    p = parse_proxy(setting("spec.cloudInit", {"inline": SENTINEL}))
    assert p.spec.cloud_init.inline == SENTINEL
    assert SENTINEL not in repr(p) and SENTINEL not in str(p)


def test_cloud_init_text_never_appears_in_file_errors(tmp_path: Any) -> None:
    (tmp_path / "a.yaml").write_text(
        f"apiVersion: crawl.example.com/v1alpha1\nkind: Proxy\nmetadata: {{name: a}}\n"
        f"spec:\n  provider: kvm\n  cloudInit:\n    inline: |\n      {SENTINEL}\n      : {SENTINEL} [\n    bad: {{{SENTINEL}\n"
    )
    (tmp_path / "b.yaml").write_text(f"spec:\n  cloudInit:\n    inline: \"{SENTINEL}\n  x: 1\n")
    (tmp_path / "c.yaml").write_text(f"a: 1\na: 2\nb: !!int {SENTINEL}\n")
    (tmp_path / "d.yaml").write_text(f"a: !!timestamp {SENTINEL}\n")
    proxies, errors = load_manifests(str(tmp_path))
    assert proxies == [] and len(errors) == 4
    for err in errors:
        assert SENTINEL not in str(err) and SENTINEL[:8] not in str(err), str(err)


# --- files -----------------------------------------------------------------------------------

GOOD = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata:
  name: {name}
spec:
  provider: kvm
"""


def write(path: Any, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_one_bad_document_does_not_stop_the_others(tmp_path: Any) -> None:
    text = "\n---\n".join([GOOD.format(name="a"), GOOD.format(name="b").replace("kvm", "KVM"), "", GOOD.format(name="c")])
    proxies, errors = load_manifests(write(tmp_path / "proxies.yaml", text + "\n---\n"))
    assert [p.name for p in proxies] == ["a", "c"]
    assert [str(e) for e in errors] == [
        f"{tmp_path}/proxies.yaml#2: spec.provider: must be a DNS-1123 label (lowercase letters, digits and '-', "
        "starting and ending with a letter or digit), got 'KVM' (line 14)"
    ]


def test_a_directory_is_read_sorted_and_one_bad_file_does_not_stop_the_others(tmp_path: Any) -> None:
    write(tmp_path / "b.yml", GOOD.format(name="b"))
    write(tmp_path / "a.yaml", GOOD.format(name="a"))
    write(tmp_path / "c.json", '{"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", '
                               '"metadata": {"name": "c", "namespace": "ns"}, "spec": {"provider": "gcp", "port": 8080}}')
    write(tmp_path / "broken.yaml", "metadata: {name: x\nspec: [\n")
    write(tmp_path / "notes.txt", GOOD.format(name="ignored"))
    write(tmp_path / "README.md", "# not a manifest")
    (tmp_path / "sub.yaml").mkdir()  # a directory with a manifest's name is one problem, not read into
    write(tmp_path / "sub.yaml" / "d.yaml", GOOD.format(name="d"))
    proxies, errors = load_manifests(str(tmp_path))
    assert [p.key for p in proxies] == ["default/a", "default/b", "ns/c"]
    assert proxies[2].spec.port == 8080
    assert len(errors) == 2
    assert str(errors[0]).startswith(f"{tmp_path}/broken.yaml#1: not valid YAML at line ")
    assert str(errors[0]).endswith("; the rest of the file is not read")
    assert str(errors[1]) == f"{tmp_path}/sub.yaml: the file must be a regular file, this is a directory"


def test_an_unreadable_directory_entry_is_one_problem_and_the_others_still_apply(tmp_path: Any) -> None:
    """A symlink loop once made the directory listing fail (DirEntry.is_file()
    raised ELOOP), so no manifest in it applied."""
    write(tmp_path / "a.yaml", GOOD.format(name="a"))
    os.symlink("loop2.yaml", tmp_path / "loop1.yaml")
    os.symlink("loop1.yaml", tmp_path / "loop2.yaml")
    os.symlink("nowhere.yaml", tmp_path / "dangling.yaml")
    locked = tmp_path / "locked.yaml"
    write(locked, GOOD.format(name="locked"))
    locked.chmod(0)
    write(tmp_path / "z.yaml", GOOD.format(name="z"))
    try:
        proxies, errors = load_manifests(str(tmp_path))
        readable = os.access(locked, os.R_OK)  # root reads it anyway
    finally:
        locked.chmod(0o644)
    assert [p.name for p in proxies] == ["a", *(["locked"] if readable else []), "z"]
    expected = [
        f"{tmp_path}/dangling.yaml: cannot read the file: No such file or directory",
        *([] if readable else [f"{tmp_path}/locked.yaml: cannot read the file: Permission denied"]),
        f"{tmp_path}/loop1.yaml: cannot read the file: Too many levels of symbolic links",
        f"{tmp_path}/loop2.yaml: cannot read the file: Too many levels of symbolic links",
    ]
    assert [str(e) for e in errors] == expected


def test_a_syntax_error_keeps_the_documents_before_it(tmp_path: Any) -> None:
    text = GOOD.format(name="a") + "---\n" + GOOD.format(name="b") + "---\nspec: {provider: [\n---\n" + GOOD.format(name="c")
    proxies, errors = load_manifests(write(tmp_path / "p.yaml", text))
    assert [p.name for p in proxies] == ["a", "b"]
    assert len(errors) == 1 and str(errors[0]).startswith(f"{tmp_path}/p.yaml#3: not valid YAML at line 16, column 1: ")


@pytest.mark.parametrize("kind", ["List", "ProxyList"])
def test_a_list_of_proxies(tmp_path: Any, kind: str) -> None:
    items = "".join("- " + GOOD.format(name=n).replace("\n", "\n  ").rstrip() + "\n" for n in ("a", "b"))
    text = f"apiVersion: v1\nkind: {kind}\nmetadata: {{resourceVersion: ''}}\nitems:\n{items}- {{kind: Proxy}}\n"
    proxies, errors = load_manifests(write(tmp_path / "list.yaml", text))
    assert [p.name for p in proxies] == ["a", "b"]
    assert [str(e) for e in errors] == [  # every problem of the item, at its line (a missing field: the item's)
        f"{tmp_path}/list.yaml#1: items[2].apiVersion: must be 'crawl.example.com/v1alpha1', got None (line 17)",
        f"{tmp_path}/list.yaml#1: items[2].metadata: is required and must be a mapping, got None (line 17)",
        f"{tmp_path}/list.yaml#1: items[2].metadata.name: is required, got None (line 17)",
        f"{tmp_path}/list.yaml#1: items[2].spec: is required and must be a mapping, got None (line 17)",
    ]


def test_list_items_must_be_a_list(tmp_path: Any) -> None:
    proxies, errors = load_manifests(write(tmp_path / "l.yaml", "kind: List\nitems: {a: 1}\n---\nkind: List\nitems:\n"))
    assert proxies == []
    assert [str(e) for e in errors] == [f"{tmp_path}/l.yaml#1: items: must be a list, got a mapping of 1 key(s) (line 2)"]


def test_a_duplicate_names_both_places(tmp_path: Any) -> None:
    write(tmp_path / "a.yaml", GOOD.format(name="web") + "---\n" + GOOD.format(name="web").replace("kvm", "gcp"))
    write(tmp_path / "b.yaml", "kind: List\nitems:\n- " + GOOD.format(name="web").replace("\n", "\n  "))
    proxies, errors = load_manifests(str(tmp_path))
    assert [(p.key, p.spec.provider) for p in proxies] == [("default/web", "kvm")]  # the first one wins
    assert [str(e) for e in errors] == [
        f"{tmp_path}/a.yaml#2: metadata.name: duplicate of default/web in {tmp_path}/a.yaml#1",
        f"{tmp_path}/b.yaml#1: items[0].metadata.name: duplicate of default/web in {tmp_path}/a.yaml#1",
    ]


def test_same_name_in_another_namespace_is_no_duplicate(tmp_path: Any) -> None:
    text = GOOD.format(name="web") + "---\n" + GOOD.format(name="web").replace("name: web", "name: web\n  namespace: other")
    proxies, errors = load_manifests(write(tmp_path / "p.yaml", text))
    assert [p.key for p in proxies] == ["default/web", "other/web"] and errors == []


def test_empty_files_and_documents_are_skipped(tmp_path: Any) -> None:
    write(tmp_path / "empty.yaml", "")
    write(tmp_path / "comments.yaml", "# nothing here\n---\n---\n...\n")
    assert load_manifests(str(tmp_path)) == ([], [])


MALFORMED_DOCUMENTS = [
    ("- a\n- b\n", "#1: a Proxy must be a mapping, got a list of 2 item(s)", True),
    ("just text\n", "#1: a Proxy must be a mapping, got 'just text'", True),
    ("a: 1\nb: 2\na: 3\n", "#1: a: duplicate key 'a' (first at line 1) (line 3)", True),
    ("metadata:\n  name: x\n  name: y\n", "#1: metadata.name: duplicate key 'name' (first at line 2) (line 3)", True),
    ("? [a]\n: 1\n", "#1: mapping keys must be plain strings or numbers", True),
    ("a: &x [1, *x]\n", "#1: a[1]: alias *x refers to a node that contains it (line 1)", True),
    ("a: " + "[" * 40 + "]" * 40 + "\n", "#1: a" + "[0]" * 32 + ": nested deeper than 32 levels", True),
    ("spec: {port: " + "9" * 5000 + "}\n",
     "#1: spec.port: not valid YAML at line 1, column 14: a number of 5000 characters (at most 40)", True),
    ("metadata: {creationTimestamp: 2024-13-45}\n",
     "#1: metadata.creationTimestamp: not valid YAML at line 1, column 31: not a valid timestamp (ValueError)", True),
    ("a: !!python/object:os.system x\n", "#1: a: not valid YAML at line 1, column 4: could not determine a constructor", True),
    ("a: *nowhere\n", "#1: not valid YAML at line 1, column 4: found undefined alias", False),
    ("a: b: c\n", "#1: not valid YAML at line 1, column 5: mapping values are not allowed", False),
]


@pytest.mark.parametrize(
    ("text", "expected", "goes_on"),
    MALFORMED_DOCUMENTS,
)
def test_malformed_documents_are_named(tmp_path: Any, text: str, expected: str, goes_on: bool) -> None:
    """A document that parses but cannot be used is skipped; a syntax error
    ends its file (the parser cannot find the next document)."""
    proxies, errors = load_manifests(write(tmp_path / "m.yaml", text + "---\n" + GOOD.format(name="after")))
    assert len(errors) == 1
    assert str(errors[0]).startswith(f"{tmp_path}/m.yaml" + expected), str(errors[0])
    assert [p.name for p in proxies] == (["after"] if goes_on else [])
    assert str(errors[0]).endswith("the rest of the file is not read") is not goes_on


def test_an_alias_bomb_stops_early(tmp_path: Any) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(9)]
    path = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n---\n" + GOOD.format(name="after"))
    start = time.monotonic()
    proxies, errors = load_manifests(path)
    assert time.monotonic() - start < 2
    assert proxies == [] and len(errors) == 1
    assert ("the file has more than 250000 values (aliases counted as they expand) (line 6); "
            "the rest of the file is not read") in str(errors[0])


def test_a_shared_alias_below_the_bound_is_fine(tmp_path: Any) -> None:
    text = "apiVersion: crawl.example.com/v1alpha1\nkind: Proxy\nmetadata: {name: a, labels: &l {x: y}, annotations: *l}\n" \
           "spec: {provider: kvm}\n"
    proxies, errors = load_manifests(write(tmp_path / "p.yaml", text))
    assert errors == [] and proxies[0].annotations == {"x": "y"}


def test_a_file_too_large(tmp_path: Any) -> None:
    path = write(tmp_path / "big.yaml", GOOD.format(name="a") + "#" * manifests.MAX_FILE_BYTES)
    proxies, errors = load_manifests(path)
    assert proxies == []
    assert [str(e) for e in errors] == [f"{path}: the file is {os.path.getsize(path)} bytes; at most 1048576 are read"]


def test_too_many_documents(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "MAX_DOCUMENTS", 3)
    text = "---\n".join(GOOD.format(name=n) for n in "abcde")
    proxies, errors = load_manifests(write(tmp_path / "many.yaml", text))
    assert [p.name for p in proxies] == ["a", "b", "c"]
    assert [str(e) for e in errors] == [f"{tmp_path}/many.yaml#4: more than 3 documents or List items; the rest of the file is not read"]


def test_ten_thousand_documents_are_read(tmp_path: Any) -> None:
    text = "---\n".join(GOOD.format(name=f"p{i}") for i in range(manifests.MAX_DOCUMENTS)) + "---\n" + GOOD.format(name="over")
    start = time.monotonic()
    proxies, errors = load_manifests(write(tmp_path / "many.yaml", text))
    assert len(proxies) == 10_000 and len(errors) == 1
    assert time.monotonic() - start < 30  # a bound on a runaway, not a benchmark


def test_too_many_files(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "MAX_FILES", 2)
    for n in "cab":
        write(tmp_path / f"{n}.yaml", GOOD.format(name=n))
    proxies, errors = load_manifests(str(tmp_path))
    assert [p.name for p in proxies] == ["a", "b"]
    assert [str(e) for e in errors] == [f"{tmp_path}: has 3 manifest files; only the first 2 (sorted) are read"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a: \xff\n", "the file is not UTF-8: invalid byte 0xff at offset 3 (line 1); save it as UTF-8"),
        ("a: 1\n".encode("utf-16"), "the file looks UTF-16 encoded; save it as UTF-8"),
        (b"\xef\xbb\xbf" + GOOD.format(name="bom").encode(), None),
    ],
)
def test_encodings(tmp_path: Any, data: bytes, expected: str | None) -> None:
    path = tmp_path / "e.yaml"
    path.write_bytes(data)
    proxies, errors = load_manifests(str(path))
    if expected is None:
        assert [p.name for p in proxies] == ["bom"] and errors == []
    else:
        assert [str(e) for e in errors] == [f"{path}: {expected}"]


def test_a_missing_path_and_a_fifo(tmp_path: Any) -> None:
    assert [str(e) for e in load_manifests(str(tmp_path / "nope.yaml"))[1]] == [
        f"{tmp_path}/nope.yaml: cannot read the file: No such file or directory"]
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert [str(e) for e in load_manifests(str(fifo))[1]] == [f"{fifo}: the file must be a regular file, this is a FIFO"]
    proxies, errors = load_manifests(str(tmp_path))  # in a directory too: reported, never opened blocking
    assert proxies == [] and [str(e) for e in errors] == [f"{fifo}: the file must be a regular file, this is a FIFO"]


def test_an_explicit_file_is_read_whatever_its_name(tmp_path: Any) -> None:
    proxies, errors = load_manifests(write(tmp_path / "proxies.txt", GOOD.format(name="a")))
    assert [p.name for p in proxies] == ["a"] and errors == []


def test_manifests_get_no_identity(tmp_path: Any) -> None:
    (proxy,), _ = load_manifests(write(tmp_path / "p.yaml", GOOD.format(name="a")))
    assert (proxy.uid, proxy.generation, proxy.namespace) == ("", 0, "default")


def test_an_unquoted_yaml_timestamp_becomes_rfc3339(tmp_path: Any) -> None:
    text = GOOD.format(name="a").replace("name: a", "name: a\n  creationTimestamp: 2024-05-01 12:00:00+02:00")
    (proxy,), errors = load_manifests(write(tmp_path / "p.yaml", text))
    assert proxy.created_at == "2024-05-01T10:00:00Z" and errors == []


# --- fingerprint ---------------------------------------------------------------------------


def test_fingerprint_changes_with_the_manifests(tmp_path: Any) -> None:
    a = tmp_path / "a.yaml"
    write(a, GOOD.format(name="a"))
    first = fingerprint(str(tmp_path))
    assert fingerprint(str(tmp_path)) == first
    write(tmp_path / "notes.txt", "not a manifest")
    assert fingerprint(str(tmp_path)) == first
    write(tmp_path / "b.yaml", GOOD.format(name="b"))
    second = fingerprint(str(tmp_path))
    assert second != first
    write(a, GOOD.format(name="a") + "# edited\n")
    assert fingerprint(str(tmp_path)) != second
    third = fingerprint(str(tmp_path))
    replacement = tmp_path / "a.new"
    write(replacement, GOOD.format(name="a") + "# edited\n")
    st = os.stat(a)
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, a)  # same size and mtime, a new inode
    assert fingerprint(str(tmp_path)) != third
    (tmp_path / "b.yaml").unlink()
    assert fingerprint(str(tmp_path)) not in (first, second, third)


def test_fingerprint_of_a_file_and_of_nothing(tmp_path: Any) -> None:
    a = tmp_path / "a.yaml"
    missing = fingerprint(str(a))
    assert missing == fingerprint(str(a)) and missing.startswith("missing:")
    write(a, GOOD.format(name="a"))
    present = fingerprint(str(a))
    assert present != missing
    write(a, GOOD.format(name="b") + "\n")
    assert fingerprint(str(a)) != present


@pytest.mark.parametrize("key", [".", "..", "..data", "../etc"])
def test_a_secret_key_cannot_climb_out_of_its_directory(key):
    doc = {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": "a"},
           "spec": {"provider": "p", "cloudInit": {"secretRef": {"name": "s", "key": key}}}}
    with pytest.raises(ManifestError, match=r"secretRef\.key"):
        parse_proxy(doc)
