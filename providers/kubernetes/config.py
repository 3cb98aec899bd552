"""The `kubernetes:` block of a provider entry.

Pure data and validation (no SDK import), so `fleet check -c` and the
controller's placement check can load it anywhere. docs/kubernetes-provider.md
describes each field.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from providers import names
from providers.blocks import Block, Runtime, SourceRange

DEFAULT_IMAGE = "ubuntu/squid:6.6-24.04_edge"

# Who may use a proxy pod when `allowedSources` is not set. The cluster's pod
# network cannot be discovered reliably (no portable API names it), so the
# default is the RFC 1918 private ranges, which hold the pod network of most
# clusters (kind: 10.244.0.0/16; GKE, EKS, AKS: 10.x by default).
RFC1918 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")

# The Debian/Ubuntu `proxy` user and group, which the default image's squid
# package runs as; squid needs no file it owns (config from the downward API,
# writable directories on emptyDir volumes), so any non-root id works.
DEFAULT_RUN_AS = 13

# Every Kubernetes API call the provider makes (provider.py, check.py), in
# the narrowest scope that serves it: managed pods across all namespaces
# (list, for ListByTag, GC and the health check) cluster-wide; pods in the
# proxies' namespace (create, get, delete) there only. Nothing else: the
# ownerReference on a pod has blockOwnerDeletion false, which needs no
# right on proxies/finalizers (pod.py).
CLUSTER_POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},)
NAMESPACED_POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "get"]},)

# Kubernetes quantities, restricted to what makes sense for each resource:
# CPU in cores ("1", "0.5") or millicores ("250m"); memory in bytes with a
# decimal or binary suffix. "128m" of memory (0.128 bytes: the classic typo)
# and the exotic forms (exponents, CPU in "k") are refused.
_CPU = re.compile(r"^(?:\d+(?:\.\d{1,3})?|\d+m)$")
_MEMORY = re.compile(r"^\d+(?:\.\d+)?(?:Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_SUFFIX = {
    "m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def quantity_value(q: str) -> Decimal:
    """A validated quantity as a number (cores or bytes), for comparisons."""
    m = re.match(r"^([\d.]+)(.*)$", q)
    assert m is not None, q
    return Decimal(m[1]) * _SUFFIX[m[2]]


def _as_text(v: Any) -> Any:
    """YAML reads `cpu: 1` and `cpu: 0.5` as numbers; take them as written."""
    if isinstance(v, bool):
        return v  # refused by the str field, not turned into "True"
    return str(v) if isinstance(v, int | float) else v


def _cpu(v: str) -> str:
    if not _CPU.match(v) or quantity_value(v) <= 0:
        raise ValueError("cpu must be a positive number of cores (e.g. 1, 0.5) or millicores (e.g. 250m)")
    return v


def _memory(v: str) -> str:
    if not _MEMORY.match(v) or quantity_value(v) <= 0:
        raise ValueError("memory must be a positive number of bytes with an optional suffix (e.g. 128Mi, 1Gi, 500M)")
    return v


Cpu = Annotated[str, BeforeValidator(_as_text), AfterValidator(_cpu)]
Memory = Annotated[str, BeforeValidator(_as_text), AfterValidator(_memory)]


Cidr = SourceRange


class Requests(Block):
    """What the scheduler reserves for each pod; null drops one."""

    cpu: Cpu | None = "100m"
    memory: Memory | None = "128Mi"


class Limits(Block):
    """The most each pod may use; null drops one. Squid holds about 100 MiB
    resident with the generated config, so keep memory well above that."""

    cpu: Cpu | None = "1"
    memory: Memory | None = "256Mi"


class Resources(Block):
    requests: Requests = Field(default_factory=Requests)
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for name in ("cpu", "memory"):
            req, lim = getattr(self.requests, name), getattr(self.limits, name)
            if req is not None and lim is not None and quantity_value(req) > quantity_value(lim):
                raise ValueError(f"requests.{name} {req!r} is more than limits.{name} {lim!r}")
        return self

    def to_pod(self) -> dict[str, dict[str, str]]:
        """The container's `resources`, leaving out what is null."""
        out: dict[str, dict[str, str]] = {}
        for key, part in (("requests", self.requests), ("limits", self.limits)):
            values = {k: v for k, v in part.model_dump().items() if v is not None}
            if values:
                out[key] = values
        return out


class KubernetesConfig(Block):
    """With neither kubeconfig nor context: in-cluster config, then
    $KUBECONFIG or ~/.kube/config.

    `namespace`: where proxy pods are created. Unset: in-cluster, the
    worker's own namespace (where `fleet render` grants it create/get/delete
    on pods); with a kubeconfig or context, the Proxy's namespace.

    `ownerReference`: whether a pod names its Proxy as owner (only ever when
    the pod is in the Proxy's namespace). Unset: only in-cluster, where the
    pods are in the cluster holding the Proxies; a kubeconfig or context may
    point at another cluster, or fleet may run without Proxy objects, and the
    garbage collector deletes a pod whose owner it cannot find.
    """

    image: str = Field(default=DEFAULT_IMAGE, min_length=1)
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = Field(default=None, min_length=1)
    namespace: str | None = None
    allowedSources: tuple[Cidr, ...] = RFC1918
    resources: Resources = Field(default_factory=Resources)
    runAsUser: int = Field(default=DEFAULT_RUN_AS, ge=1, le=2**31 - 1)
    runAsGroup: int = Field(default=DEFAULT_RUN_AS, ge=1, le=2**31 - 1)
    ownerReference: bool | None = None

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and not names.is_label(v):
            raise ValueError("namespace must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63)")
        return v

    @field_validator("allowedSources")
    @classmethod
    def _sources(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("allowedSources must name at least one network: an empty list would refuse every client")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if any(c.isspace() for c in v):
            raise ValueError("image must not contain whitespace")
        return v

    @property
    def uses_own_account(self) -> bool:
        """In-cluster, with the worker pod's ServiceAccount."""
        return not self.kubeconfig and not self.context

    @property
    def sets_owner_reference(self) -> bool:
        """`ownerReference`, or by default: in-cluster only."""
        return self.uses_own_account if self.ownerReference is None else self.ownerReference

    def runtime(self) -> Runtime:
        """With a kubeconfig: that file, mounted, and no token of this
        cluster. Without: the worker's own ServiceAccount, with the
        cluster-wide pod list and create/get/delete in `namespace` (None: the
        worker's namespace)."""
        if self.kubeconfig:
            return Runtime(files=(self.kubeconfig,))
        return Runtime(
            in_cluster=True,
            cluster_rules=CLUSTER_POD_RULES,
            namespaced_rules=NAMESPACED_POD_RULES,
            rules_namespace=self.namespace,
        )
