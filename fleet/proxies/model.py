"""A Proxy as the reconciler sees it: plain frozen values, parsed once at the
boundary (`fleet.proxies.manifests.parse_proxy`) from a Kubernetes object or a
standalone manifest, so the decisions never touch raw dicts.

Names users see (the CRD `proxies.crawl.example.com`, deploy/crd/) are
defined here once: phases, condition types and reasons, the finalizer and
the skip-cleanup annotation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.base import Placement

FINALIZER = "crawl.example.com/cleanup"
SKIP_CLEANUP = "crawl.example.com/skip-cleanup"  # annotation; value "true" releases without touching the backend
# kubectl's annotation holding the whole applied manifest (inline cloud-init included): redacted wherever fleet shows or stores it
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

DEFAULT_PORT = 3128

# status.phase
PENDING, PROVISIONING, RUNNING, REPLACING, DELETING, FAILED = (
    "Pending", "Provisioning", "Running", "Replacing", "Deleting", "Failed",
)
PHASES = (PENDING, PROVISIONING, RUNNING, REPLACING, DELETING, FAILED)

# status.member: a proxy fleet made, or a bought one of an upstream provider by how it is dialed (`member_kind`)
MEMBER_OWN, MEMBER_UPSTREAM = "own", "upstream"

# condition types
PROVISIONED, HEALTHY, READY = "Provisioned", "Healthy", "Ready"
CONDITIONS = (PROVISIONED, HEALTHY, READY)


def member_kind(endpoint: Mapping[str, Any]) -> str:
    """status.member from the endpoint the reconciler writes: `upstream/<scheme>` when its provider's dial hook gave
    it a scheme (a proxy fleet did not make, spoken to over http or socks5), else `own`."""
    scheme = endpoint.get("scheme")
    return f"{MEMBER_UPSTREAM}/{scheme}" if isinstance(scheme, str) and scheme else MEMBER_OWN


@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class InlineDigest:
    """Inline cloud-init kept out of Redis (standalone mode stores this in
    its place): the text's SHA-256 and size, and the manifest file the text
    is read from when a create is sent. Where it is read from is no part of
    the spec: moving a Proxy to another file changes no generation."""

    sha256: str  # hex, of the UTF-8 text
    size: int  # bytes
    file: str = field(default="", compare=False)

    @classmethod
    def of(cls, text: str, file: str = "") -> InlineDigest:
        data = text.encode()
        return cls(hashlib.sha256(data).hexdigest(), len(data), file)


@dataclass(frozen=True)
class CloudInit:
    """Exactly one of `inline` (the text), `secret` (where to read it) or
    `digest` (standalone's stored form of inline text: fleet.proxies.standalone)."""

    inline: str | None = field(default=None, repr=False)  # may hold secrets: never shown
    secret: SecretRef | None = None
    digest: InlineDigest | None = None

    def __repr__(self) -> str:
        if self.secret is not None:
            return f"CloudInit(secret={self.secret!r})"
        if self.digest is not None:
            return f"CloudInit(digest=<{self.digest.size} bytes from {self.digest.file or '?'}>)"
        return f"CloudInit(inline=<{len(self.inline or '')} characters>)"


@dataclass(frozen=True)
class ProxySpec:
    provider: str
    placement: Placement = field(default_factory=Placement)
    cloud_init: CloudInit = field(default_factory=CloudInit)
    port: int = DEFAULT_PORT


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""
    observed_generation: int = 0
    last_transition_time: str = ""  # RFC 3339, set when status changes

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type, "status": self.status, "reason": self.reason, "message": self.message,
            "observedGeneration": self.observed_generation, "lastTransitionTime": self.last_transition_time,
        }


@dataclass(frozen=True)
class ProxyStatus:
    phase: str = ""
    provider_id: str = ""
    ip: str = ""
    port: int = 0
    spec_hash: str = ""
    observed_generation: int = 0
    message: str = ""
    conditions: tuple[Condition, ...] = ()
    egress_ip: str = ""  # what the prober's echoing target saw (issue 13)
    member: str = ""  # MEMBER_OWN or upstream/<scheme>: the reconciler's, from the endpoint it writes ("" not yet)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def to_dict(self) -> dict[str, Any]:
        """The status subresource; an empty phase is left out (the CRD's enum has no empty value)."""
        out = {
            "phase": self.phase, "providerID": self.provider_id, "ip": self.ip, "port": self.port,
            "specHash": self.spec_hash, "observedGeneration": self.observed_generation, "message": self.message,
            "conditions": [c.to_dict() for c in self.conditions],
        }
        if self.egress_ip:
            out["egressIP"] = self.egress_ip
        if self.member:
            out["member"] = self.member
        if not self.phase:
            del out["phase"]
        return out


@dataclass(frozen=True)
class Proxy:
    """One Proxy object: identity, spec, lifecycle marks and its last status."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: ProxySpec
    status: ProxyStatus = field(default_factory=ProxyStatus)
    deleting: bool = False  # metadata.deletionTimestamp is set (standalone: its manifest is gone)
    finalizers: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""  # Kubernetes only: for optimistic writes
    created_at: str = ""  # metadata.creationTimestamp (RFC 3339), for AGE
    deletion_timestamp: str = ""  # metadata.deletionTimestamp (RFC 3339) when `deleting`
    pool: str = ""  # its LABEL_POOL label: the ProxyPool it belongs to ("" none), what leases filter by

    @property
    def key(self) -> str:
        """`namespace/name`: the reconciler's key, in Redis and in logs."""
        return f"{self.namespace}/{self.name}"

    @property
    def skip_cleanup(self) -> bool:
        return self.annotations.get(SKIP_CLEANUP) == "true"


API_VERSION = "crawl.example.com/v1alpha1"
KIND = "Proxy"
LABEL_POOL = "crawl.example.com/pool"  # on every ProxyPool member: its pool's name (fleet.pools writes it)
POOL_OWNER = "crawl.example.com/pool-uid"  # standalone: the annotation of a ProxyPool's member, its pool's uid (no manifest sets it)
INLINE_DIGEST = "inlineDigest"  # spec.cloudInit's key in standalone's stored form (never in a manifest)


def to_object(p: Proxy, *, redact: bool = False) -> dict[str, Any]:
    """The Kubernetes-shaped object (what `parse_proxy` reads back; a
    `digest` cloud-init is standalone's stored form, which only
    `fleet.proxies.standalone` reads). `redact` replaces inline cloud-init
    (text or digest) with its size, for anything shown to people."""
    ci: dict[str, Any] = {}
    cloud_init = p.spec.cloud_init
    if cloud_init.secret is not None:
        ci = {"secretRef": {"name": cloud_init.secret.name, "key": cloud_init.secret.key}}
    elif cloud_init.digest is not None:
        d = cloud_init.digest
        ci = {"inline": f"<redacted: {d.size} bytes>"} if redact else {
            INLINE_DIGEST: {"sha256": d.sha256, "bytes": d.size, "file": d.file}}
    elif cloud_init.inline is not None:
        text = cloud_init.inline
        ci = {"inline": f"<redacted: {len(text.encode())} bytes>" if redact else text}
    pl = p.spec.placement
    placement = {k: v for k, v in (("region", pl.region), ("zone", pl.zone), ("machineType", pl.machine_type),
                                   ("image", pl.image)) if v}
    spec: dict[str, Any] = {"provider": p.spec.provider, "port": p.spec.port}
    if placement:
        spec["placement"] = placement
    if ci:
        spec["cloudInit"] = ci
    meta: dict[str, Any] = {"name": p.name, "namespace": p.namespace, "uid": p.uid, "generation": p.generation}
    for key, value in (("resourceVersion", p.resource_version), ("creationTimestamp", p.created_at),
                       ("deletionTimestamp", p.deletion_timestamp), ("finalizers", list(p.finalizers)),
                       ("annotations", dict(p.annotations)), ("labels", {LABEL_POOL: p.pool} if p.pool else {})):
        if value:
            meta[key] = value
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
    if p.status != ProxyStatus():
        obj["status"] = p.status.to_dict()
    return obj
