"""The kubernetes block: allowed sources, resources, the pod's user and the
ownerReference switch, validated at load with the field and value named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleet.config import ConfigError, parse
from providers.kubernetes.config import RFC1918, KubernetesConfig


def test_defaults():
    c = KubernetesConfig()
    assert c.allowedSources == RFC1918 == ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    assert c.resources.to_pod() == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "1", "memory": "256Mi"}}
    assert (c.runAsUser, c.runAsGroup, c.ownerReference) == (13, 13, None)


@pytest.mark.parametrize(
    ("block", "want"),
    [
        ({"allowedSources": ["10.1.0.0/16", "fd00::/8"]}, ("10.1.0.0/16", "fd00::/8")),
        ({"allowedSources": ["10.1.2.3/32"]}, ("10.1.2.3/32",)),
        ({"allowedSources": ["FD00:0::/8"]}, ("fd00::/8",)),  # normalised
    ],
)
def test_allowed_sources(block, want):
    assert KubernetesConfig(**block).allowedSources == want


def problems(block: dict) -> str:
    with pytest.raises(ConfigError) as err:
        parse({"providers": [{"name": "k8s", "type": "kubernetes", "kubernetes": block}]})
    return str(err.value)


@pytest.mark.parametrize(
    ("block", "field", "value", "why"),
    [
        ({"allowedSources": ["10.0.0.1/8"]}, "allowedSources[0]", "10.0.0.1/8", "host bits set"),
        ({"allowedSources": ["10.0.0.0/8", "10.0.0.300/32"]}, "allowedSources[1]", "10.0.0.300/32", "CIDR"),
        ({"allowedSources": ["10.1.2.3"]}, "allowedSources[0]", "10.1.2.3", "prefix length"),
        ({"allowedSources": ["0.0.0.0/0"]}, "allowedSources[0]", "0.0.0.0/0", "open to every address"),
        ({"allowedSources": ["::/0"]}, "allowedSources[0]", "::/0", "open to every address"),
        ({"allowedSources": ["pods"]}, "allowedSources[0]", "pods", "CIDR"),
        ({"allowedSources": []}, "allowedSources", "[]", "at least one network"),
        ({"allowedSources": "10.0.0.0/8"}, "allowedSources", "10.0.0.0/8", "tuple"),
        ({"resources": {"requests": {"memory": "128m"}}}, "resources.requests.memory", "128m", "bytes"),
        ({"resources": {"limits": {"memory": "0"}}}, "resources.limits.memory", "0", "positive"),
        ({"resources": {"limits": {"cpu": "1k"}}}, "resources.limits.cpu", "1k", "millicores"),
        ({"resources": {"limits": {"cpu": "-1"}}}, "resources.limits.cpu", "-1", "cores"),
        ({"resources": {"limits": {"cpu": True}}}, "resources.limits.cpu", "True", "string"),
        ({"resources": {"requests": {"gpu": "1"}}}, "resources.requests", "gpu", "unknown key"),
        ({"resources": {"requests": {"cpu": "2"}}}, "resources", "requests.cpu '2' is more than limits.cpu '1'", ""),
        ({"resources": {"requests": {"memory": "1Gi"}}}, "resources", "requests.memory '1Gi'", "limits.memory '256Mi'"),
        ({"runAsUser": 0}, "runAsUser", "0", "greater than or equal to 1"),
        ({"runAsGroup": -5}, "runAsGroup", "-5", "greater than or equal to 1"),
        ({"ownerReference": "sometimes"}, "ownerReference", "sometimes", "boolean"),
        ({"image": "squid latest"}, "image", "squid latest", "whitespace"),
    ],
)
def test_invalid_values_name_field_and_value(block, field, value, why):
    msg = problems(block)
    assert f"providers[0].kubernetes.{field}" in msg
    assert value in msg and why in msg


@pytest.mark.parametrize(
    ("resources", "want"),
    [
        ({"requests": {"cpu": 0.5}}, {"requests": {"cpu": "0.5", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ({"limits": {"cpu": None}}, {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}),
        ({"requests": {"cpu": None, "memory": None}, "limits": {"cpu": 2, "memory": "1Gi"}},
         {"limits": {"cpu": "2", "memory": "1Gi"}}),
        ({"requests": {"memory": "256Mi"}}, {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ({"requests": {"memory": "200M"}}, {"requests": {"cpu": "100m", "memory": "200M"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ({"requests": {"cpu": "1500m"}, "limits": {"cpu": "1.5"}},
         {"requests": {"cpu": "1500m", "memory": "128Mi"}, "limits": {"cpu": "1.5", "memory": "256Mi"}}),
    ],
)
def test_resources_as_written_with_null_dropping_one(resources, want):
    assert KubernetesConfig(resources=resources).resources.to_pod() == want


@pytest.mark.parametrize(
    ("block", "want"),
    [
        ({}, True),  # in-cluster: the pods are in the Proxies' cluster
        ({"kubeconfig": "/k"}, False),  # maybe another cluster, or no Proxy objects
        ({"context": "kind"}, False),
        ({"kubeconfig": "/k", "ownerReference": True}, True),
        ({"ownerReference": False}, False),
    ],
)
def test_owner_reference_default_is_in_cluster_only(block, want):
    assert KubernetesConfig(**block).sets_owner_reference is want


def test_blocks_stay_immutable():
    c = KubernetesConfig()
    with pytest.raises(ValidationError):
        c.allowedSources = ("10.0.0.0/8",)  # type: ignore[misc]
