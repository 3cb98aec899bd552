"""The pod the kubernetes provider creates, as the API server receives it
(recorded by the HTTP-level fake): ownerReference, restricted security,
resources and a Squid config that is not an open proxy."""

from __future__ import annotations

import kubernetes_validate
import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.kubernetes.config import KubernetesConfig
from providers.kubernetes.pod import SQUID_CONF_ANNOTATION
from providers.kubernetes.provider import new

K8S_VERSION = "1.30"


def request(namespace: str = "crawl", **more) -> CreateRequest:
    return CreateRequest(name="proxy-abc", uid="7c1e-uid", namespace=namespace, proxy_name="eu-1", port=3129, **more)


def created(kubeapi, block: dict, req: CreateRequest | None = None) -> dict:
    """Create through the real client and return the body the fake received."""
    p = new("k", KubernetesConfig(kubeconfig=kubeapi.kubeconfig_path, **block))
    p.create(req or request(), Deadline.after(5))
    (post,) = [r for r in kubeapi.requests if r.method == "POST"]
    return post.body


def test_the_pod_fits_the_kubernetes_schema(kubeapi):
    body = created(kubeapi, {"ownerReference": True})
    kubernetes_validate.validate(body, K8S_VERSION, strict=True)


def test_owner_reference_names_the_proxy(kubeapi):
    body = created(kubeapi, {"ownerReference": True})
    assert body["metadata"]["ownerReferences"] == [{
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "name": "eu-1", "uid": "7c1e-uid",
        "controller": True, "blockOwnerDeletion": False,
    }]


@pytest.mark.parametrize(
    ("block", "req"),
    [
        # the pods go elsewhere than the Proxy: an owner there would be unresolvable,
        # and the garbage collector would delete the pod
        ({"ownerReference": True, "namespace": "proxies"}, request("crawl")),
        ({"ownerReference": True}, request("")),  # no Proxy namespace: pods go in "default"
        ({"ownerReference": False}, request("crawl")),
        ({}, request("crawl")),  # a kubeconfig: maybe another cluster, so off unless asked
        ({"ownerReference": True}, CreateRequest(name="proxy-abc", uid="u", namespace="crawl")),  # no Proxy name
    ],
)
def test_no_owner_reference_where_it_could_not_resolve(kubeapi, block, req):
    body = created(kubeapi, block, req)
    assert "ownerReferences" not in body["metadata"]


def test_the_pod_runs_restricted(kubeapi):
    body = created(kubeapi, {"runAsUser": 65534, "runAsGroup": 65534})
    spec = body["spec"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                       "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and (sc["runAsUser"], sc["runAsGroup"]) == (65534, 65534)
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # what squid writes is on emptyDir volumes; the config is read-only
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path in ("/var/run/squid", "/var/spool/squid", "/var/log/squid", "/tmp"):
        assert volumes[mounts[path]["name"]] == {"name": mounts[path]["name"], "emptyDir": {}}
    assert mounts["/etc/squid-fleet"]["readOnly"] is True
    # the Pod Security Standard "restricted" allows these volume types only
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    assert all(set(v) - {"name"} <= allowed for v in spec["volumes"])


def test_resources_come_from_the_config(kubeapi):
    body = created(kubeapi, {"resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": None, "memory": "512Mi"}}})
    (c,) = body["spec"]["containers"]
    assert c["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def test_default_resources(kubeapi):
    (c,) = created(kubeapi, {})["spec"]["containers"]
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


def test_squid_reads_the_generated_config_which_is_not_an_open_proxy(kubeapi):
    body = created(kubeapi, {"allowedSources": ["10.244.0.0/16", "fd00::/8"]})
    conf = body["metadata"]["annotations"][SQUID_CONF_ANNOTATION]
    lines = conf.splitlines()
    assert "http_port 3129" in lines
    assert "acl fleet_sources src 10.244.0.0/16 fd00::/8" in lines
    access = [ln for ln in lines if ln.startswith("http_access")]
    assert access == ["http_access deny manager", "http_access allow fleet_sources", "http_access deny all"]
    assert "allow all" not in conf
    # the file squid runs with is that annotation, through the downward API
    (c,) = body["spec"]["containers"]
    assert c["command"] == ["squid", "-N", "-f", "/etc/squid-fleet/squid.conf"]
    assert c["ports"] == [{"containerPort": 3129, "name": "proxy", "protocol": "TCP"}]
    (config,) = [v for v in body["spec"]["volumes"] if v["name"] == "config"]
    assert config["downwardAPI"]["items"] == [
        {"path": "squid.conf", "fieldRef": {"fieldPath": f"metadata.annotations['{SQUID_CONF_ANNOTATION}']"}}
    ]
    assert "env" not in c


def test_default_sources_are_the_private_ranges(kubeapi):
    conf = created(kubeapi, {})["metadata"]["annotations"][SQUID_CONF_ANNOTATION]
    assert "acl fleet_sources src 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16" in conf.splitlines()


def test_placement_and_cloud_init_are_ignored(kubeapi):
    req = request(placement=Placement(region="r", zone="z", machine_type="huge", image="other:1"), cloud_init="SECRET")
    body = created(kubeapi, {"image": "squid:test"}, req)
    (c,) = body["spec"]["containers"]
    assert c["image"] == "squid:test"
    assert "SECRET" not in repr(body)
    assert body["metadata"]["labels"] == {base.LABEL_MANAGED: "true", base.LABEL_UID: "7c1e-uid",  # no installation: no mark
                                          base.LABEL_NAMESPACE: "crawl"}
