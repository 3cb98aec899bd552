"""The Proxy schema table is what the parser holds a manifest to: every
bound of the spec the table states -- each string's length, the port's range
and default, each pattern, the known keys -- accepted at its edge and refused
one past it, read from the table, so a changed table changes the parser (and
the CRD, tests/deploy/test_crd.py) together."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fleet.kube.crd import Field
from fleet.proxies import schema
from fleet.proxies.manifests import ManifestError, parse_proxy


def obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": "web-1"},
            "spec": {"provider": "kvm", **spec}}


def refused(o: dict[str, Any], path: str) -> None:
    with pytest.raises(ManifestError) as err:
        parse_proxy(o)
    assert err.value.path == path


def strings(node: Field, path: str) -> list[tuple[str, Field]]:
    if node.type == "string":
        return [(path, node)]
    return [item for key, child in (node.properties or {}).items() for item in strings(child, f"{path}.{key}")]


SPEC_STRINGS = strings(schema.SPEC, "spec")


def test_every_spec_string_is_bounded_and_known():
    assert [p for p, _ in SPEC_STRINGS] == [
        "spec.provider", "spec.placement.region", "spec.placement.zone", "spec.placement.machineType",
        "spec.placement.image", "spec.cloudInit.inline", "spec.cloudInit.secretRef.name", "spec.cloudInit.secretRef.key",
    ]
    assert all(f.max_length for _, f in SPEC_STRINGS)


def with_value(path: str, value: Any) -> dict[str, Any]:
    """A valid Proxy with the string at `path` set to `value` (its siblings valid)."""
    o = obj()
    spec = o["spec"]
    if path == "spec.provider":
        spec["provider"] = value
    elif path.startswith("spec.placement."):
        spec["placement"] = {path.rsplit(".", 1)[1]: value}
    elif path == "spec.cloudInit.inline":
        spec["cloudInit"] = {"inline": value}
    else:
        ref = {"name": "ci", "key": "user-data"}
        ref[path.rsplit(".", 1)[1]] = value
        spec["cloudInit"] = {"secretRef": ref}
    return o


@pytest.mark.parametrize(("path", "field"), SPEC_STRINGS, ids=[p for p, _ in SPEC_STRINGS])
def test_each_strings_max_length_is_the_tables(path, field):
    limit = field.bound("max_length")
    parse_proxy(with_value(path, "a" * limit))
    refused(with_value(path, "a" * (limit + 1)), path)


@pytest.mark.parametrize(("path", "bad"), [("spec.provider", "Kvm_1"), ("spec.cloudInit.secretRef.key", "user data")])
def test_each_pattern_is_the_tables(path, bad):
    field = schema.SPEC.at(path.removeprefix("spec."))
    assert field.pattern and not re.fullmatch(field.pattern, bad)
    refused(with_value(path, bad), path)


def test_the_port_range_and_default_are_the_tables():
    low, high = schema.PORT.bound("minimum"), schema.PORT.bound("maximum")
    assert parse_proxy(obj()).spec.port == schema.PORT.default == 3128
    for ok in (low, high):
        assert parse_proxy(obj(port=ok)).spec.port == ok
    for bad in (low - 1, high + 1):
        refused(obj(port=bad), "spec.port")


def test_the_known_keys_are_the_tables():
    assert schema.SPEC.names() == ("provider", "port", "placement", "cloudInit")
    for at, node in (("spec", schema.SPEC), ("spec.placement", schema.PLACEMENT), ("spec.cloudInit", schema.CLOUD_INIT)):
        o = obj()
        target = o["spec"]
        for part in at.split(".")[1:]:
            target = target.setdefault(part, {"inline": "x"} if part == "cloudInit" else {})
        target["surplus"] = 1
        refused(o, f"{at}.surplus")
        assert node.names()
    refused(obj(cloudInit={"secretRef": {"name": "ci", "key": "k", "surplus": 1}}), "spec.cloudInit.secretRef.surplus")


def test_a_field_without_a_bound_is_a_programming_error():
    with pytest.raises(TypeError, match="no max_length"):
        schema.PORT.bound("max_length")
