"""A ProxyPool and its members as the pool decision sees them: plain frozen
values, parsed once at the boundary from Kubernetes objects.

`parse_pool(obj)` reads a ProxyPool object strictly, with the limits and
defaults of its table (`fleet.pools.schema`) and the CEL rules the API
server runs (so a fake or an older CRD cannot feed the decision nonsense):
errors are `PoolError`s naming the field. `member_of(obj)` reads a member
Proxy (through `fleet.proxies.manifests.parse_proxy`) plus the pool's
labels on it; its status leniently, as the Proxy controller writes it.

Names users see are defined here once: the member labels, the condition
types and reasons.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.durations import parse_rfc3339
from fleet.kube.crd import Field
from fleet.pools import schema
from fleet.proxies.decide import LATCHES, R_QUOTA
from fleet.proxies.manifests import ManifestError, parse_proxy
from fleet.proxies.model import FAILED, HEALTHY, LABEL_POOL, PROVISIONED, READY, RUNNING, CloudInit, Condition, Proxy
from providers import names
from providers.base import Placement

API_VERSION = "crawl.example.com/v1alpha1"
KIND = "ProxyPool"
# LABEL_POOL (on every member: its pool's name) is defined with the Proxy (fleet.proxies.model): its endpoint carries it
LABEL_HASH = "crawl.example.com/pool-template-hash"  # on every member: the template it was made from

# condition types
AVAILABLE, PROGRESSING, REMEDIATION_ALLOWED, SCALING_LIMITED = (
    "Available", "Progressing", "RemediationAllowed", "ScalingLimited")

_PERCENT = re.compile(r"^([0-9]{1,3})%$")


class PoolError(ValueError):
    """A ProxyPool object the controller cannot use; the message names the field."""


IntOrPercent = int | str  # 3 or "25%"


@dataclass(frozen=True)
class ProviderShare:
    provider: str
    weight: int = 1
    max: int | None = None
    placement: Placement | None = None  # replaces the template's for this provider's members


@dataclass(frozen=True)
class Strategy:
    max_surge: IntOrPercent = "25%"
    max_unavailable: IntOrPercent = 0


@dataclass(frozen=True)
class Autoscale:
    min: int
    max: int
    target_utilization: int = 80  # percent
    up_window: float = 0.0
    down_window: float = 300.0


@dataclass(frozen=True)
class Remediation:
    max_unhealthy: IntOrPercent = "40%"
    unhealthy_after: float = 300.0


@dataclass(frozen=True)
class Template:
    port: int
    placement: Placement = field(default_factory=Placement)
    cloud_init: CloudInit = field(default_factory=CloudInit)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as the object has it (cloudInit)


@dataclass(frozen=True)
class PoolSpec:
    replicas: int
    providers: tuple[ProviderShare, ...]
    template: Template
    max_age: float | None = None
    max_age_jitter: float = 0.0
    strategy: Strategy = field(default_factory=Strategy)
    autoscale: Autoscale | None = None
    remediation: Remediation = field(default_factory=Remediation)
    min_ready: float = 0.0
    progress_deadline: float = 600.0
    unique_egress: bool = False  # uniqueEgressIP: no two Running members on one egress address


@dataclass(frozen=True)
class PoolStatus:
    """What the last status said, read back for the next decision."""

    replicas: int = 0
    ready: int = 0
    available: int = 0
    updated: int = 0
    observed_generation: int = 0
    progress_time: float | None = None
    refused_at: Mapping[str, float] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class Pool:
    namespace: str
    name: str
    uid: str
    generation: int
    spec: PoolSpec
    status: PoolStatus = field(default_factory=PoolStatus)
    deleting: bool = False
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def selector(self) -> str:
        return f"{LABEL_POOL}={self.name}"


@dataclass(frozen=True)
class Member:
    """One member Proxy, as far as the pool decision cares."""

    name: str
    uid: str
    provider: str
    created_at: float  # epoch seconds
    template_hash: str = ""
    created: bool = False  # it has (had) an instance: status.providerID is set
    ready_since: float | None = None  # Ready=True since
    unhealthy_since: float | None = None  # Healthy=False since
    failed: bool = False  # phase Failed
    refused: bool = False  # Failed for good (a latch) or out of quota: its provider refuses
    deleting: bool = False
    leases: int = 0  # held now (the lease API)
    cooldowns: int = 0  # active now (the lease API)
    running: bool = False  # phase Running
    egress_ip: str = ""  # the prober's last egress address for this uid ("" unknown)


# --- parsing ------------------------------------------------------------------


def _int(value: Any, path: str, node: Field, default: int | None = None) -> int | None:
    if value is None:
        return default if default is not None else (node.default if isinstance(node.default, int) else None)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PoolError(f"{path}: must be an integer, got {type(value).__name__}")
    if node.minimum is not None and value < node.minimum:
        raise PoolError(f"{path}: must be at least {node.minimum}, got {value}")
    if node.maximum is not None and value > node.maximum:
        raise PoolError(f"{path}: must be at most {node.maximum}, got {value}")
    return value


def _bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PoolError(f"{path}: must be true or false, got {type(value).__name__}")
    return value


def _int_or_percent(value: Any, path: str, node: Field) -> IntOrPercent:
    if value is None:
        value = node.default
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if m and int(m.group(1)) <= 100:
            return value
    shown = value if isinstance(value, (int, str)) and len(str(value)) <= 16 else type(value).__name__
    raise PoolError(f"{path}: must be a non-negative integer or a percent from 0% to 100%, got {shown!r}")


def _obj(value: Any, path: str, node: Field) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PoolError(f"{path}: must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(node.names()))
    if unknown:
        raise PoolError(f"{path}: unknown field {unknown[0]!r}")
    return value


def _placement(value: Any, path: str) -> Placement:
    raw = _obj(value, path, schema.PROVIDER_ENTRY["placement"])
    vals = {}
    for k, attr in (("region", "region"), ("zone", "zone"), ("machineType", "machine_type"), ("image", "image")):
        v = raw.get(k)
        if v is not None and not isinstance(v, str):
            raise PoolError(f"{path}.{k}: must be a string")
        vals[attr] = v or ""
    return Placement(**vals)


def _template(raw: dict[str, Any], namespace: str, name: str) -> Template:
    """The template through the Proxy's own parser (a member is a Proxy)."""
    spec: dict[str, Any] = {"provider": "template", **raw}
    try:
        p = parse_proxy({"apiVersion": API_VERSION, "kind": "Proxy", "metadata": {"name": name, "namespace": namespace},
                         "spec": spec}, source="spec.template")
    except ManifestError as exc:
        where = exc.path.removeprefix("spec.") if exc.path.startswith("spec.") else exc.path
        raise PoolError(f"spec.template.{where}: {exc.message}" if where else f"spec.template: {exc.message}") from None
    return Template(port=p.spec.port, placement=p.spec.placement, cloud_init=p.spec.cloud_init, raw=dict(raw))


def parse_pool(obj: Mapping[str, Any]) -> Pool:
    """asc ProxyPool object as the decision's value; PoolError names what is wrong."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not isinstance(meta.get("namespace"), str):
        raise PoolError("metadata: a namespaced object with a name is required")
    name, namespace = meta["name"], meta["namespace"]
    if not names.is_label(name, schema.MAX_POOL_NAME):
        raise PoolError(f"metadata.name: a DNS-1123 label of at most {schema.MAX_POOL_NAME} characters, got {name[:80]!r}")
    sp = schema.SPEC
    spec = _obj(obj.get("spec"), "spec", sp)
    providers_raw = spec.get("providers")
    if not isinstance(providers_raw, list) or not providers_raw:
        raise PoolError("spec.providers: at least one provider is required")
    if len(providers_raw) > schema.MAX_PROVIDERS:
        raise PoolError(f"spec.providers: at most {schema.MAX_PROVIDERS} providers")
    shares, seen = [], set()
    ent = schema.PROVIDER_ENTRY
    for i, entry in enumerate(providers_raw):
        path = f"spec.providers[{i}]"
        raw = _obj(entry, path, ent)
        prov = raw.get("provider")
        if not isinstance(prov, str) or not names.is_label(prov):
            raise PoolError(f"{path}.provider: a DNS-1123 label is required")
        if prov in seen:
            raise PoolError(f"{path}.provider: {prov!r} is listed twice")
        seen.add(prov)
        placement = _placement(raw["placement"], f"{path}.placement") if raw.get("placement") is not None else None
        shares.append(ProviderShare(prov, _int(raw.get("weight"), f"{path}.weight", ent["weight"]) or 1,
                                    _int(raw.get("max"), f"{path}.max", ent["max"]), placement))
    st = _obj(spec.get("strategy"), "spec.strategy", schema.STRATEGY)
    strategy = Strategy(_int_or_percent(st.get("maxSurge"), "spec.strategy.maxSurge", schema.STRATEGY["maxSurge"]),
                        _int_or_percent(st.get("maxUnavailable"), "spec.strategy.maxUnavailable",
                                        schema.STRATEGY["maxUnavailable"]))
    if _zero(strategy.max_surge) and _zero(strategy.max_unavailable):
        raise PoolError("spec.strategy: maxSurge and maxUnavailable cannot both be 0")
    autoscale = None
    if spec.get("autoscale") is not None:
        asc = schema.AUTOSCALE
        a = _obj(spec["autoscale"], "spec.autoscale", asc)
        if a.get("min") is None or a.get("max") is None:
            raise PoolError("spec.autoscale: min and max are required")
        lo, hi = _int(a["min"], "spec.autoscale.min", asc["min"]), _int(a["max"], "spec.autoscale.max", asc["max"])
        assert lo is not None and hi is not None
        if lo > hi:
            raise PoolError("spec.autoscale: min must not exceed max")
        autoscale = Autoscale(lo, hi, _int(a.get("targetUtilization"), "spec.autoscale.targetUtilization",
                                           asc["targetUtilization"]) or 80,
                              float(_int(a.get("scaleUpStabilizationSeconds"), "spec.autoscale.scaleUpStabilizationSeconds",
                                         asc["scaleUpStabilizationSeconds"]) or 0),
                              float(_int(a.get("scaleDownStabilizationSeconds"),
                                         "spec.autoscale.scaleDownStabilizationSeconds",
                                         asc["scaleDownStabilizationSeconds"]) or 0))
    rem = schema.REMEDIATION
    r = _obj(spec.get("remediation"), "spec.remediation", rem)
    remediation = Remediation(_int_or_percent(r.get("maxUnhealthy"), "spec.remediation.maxUnhealthy", rem["maxUnhealthy"]),
                              float(_int(r.get("unhealthyAfterSeconds"), "spec.remediation.unhealthyAfterSeconds",
                                         rem["unhealthyAfterSeconds"]) or 0))
    max_age = _int(spec.get("maxAgeSeconds"), "spec.maxAgeSeconds", sp["maxAgeSeconds"])
    pool_spec = PoolSpec(
        replicas=_int(spec.get("replicas"), "spec.replicas", sp["replicas"]) or 0,
        providers=tuple(shares),
        template=_template(_obj(spec.get("template"), "spec.template", sp["template"]), namespace, name),
        max_age=float(max_age) if max_age is not None else None,
        max_age_jitter=float(_int(spec.get("maxAgeJitterSeconds"), "spec.maxAgeJitterSeconds", sp["maxAgeJitterSeconds"]) or 0),
        strategy=strategy, autoscale=autoscale, remediation=remediation,
        min_ready=float(_int(spec.get("minReadySeconds"), "spec.minReadySeconds", sp["minReadySeconds"]) or 0),
        progress_deadline=float(_int(spec.get("progressDeadlineSeconds"), "spec.progressDeadlineSeconds",
                                     sp["progressDeadlineSeconds"]) or 600),
        unique_egress=_bool(spec.get("uniqueEgressIP"), "spec.uniqueEgressIP"),
    )
    gen = meta.get("generation")
    return Pool(namespace=namespace, name=name, uid=str(meta.get("uid") or ""),
                generation=gen if isinstance(gen, int) and not isinstance(gen, bool) else 0,
                spec=pool_spec, status=_status(obj.get("status")), deleting=bool(meta.get("deletionTimestamp")),
                resource_version=str(meta.get("resourceVersion") or ""))


def _zero(v: IntOrPercent) -> bool:
    return v == 0 or v == "0%"


def _time(v: Any) -> float | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        return parse_rfc3339(v)
    except ValueError:
        return None


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _status(raw: Any) -> PoolStatus:
    """The last status, leniently: what cannot be read is as if absent."""
    if not isinstance(raw, dict):
        return PoolStatus()
    refused = {}
    for entry in raw.get("providers") or ():
        if isinstance(entry, dict) and isinstance(entry.get("provider"), str):
            t = _time(entry.get("refusedAt"))
            if t is not None:
                refused[entry["provider"]] = t
    conds = []
    for c in raw.get("conditions") or ():
        if isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("type", "status", "reason")):
            conds.append(Condition(c["type"], c["status"], c["reason"], str(c.get("message") or ""),
                                   _count(c.get("observedGeneration")), str(c.get("lastTransitionTime") or "")))
    return PoolStatus(_count(raw.get("replicas")), _count(raw.get("readyReplicas")), _count(raw.get("availableReplicas")),
                      _count(raw.get("updatedReplicas")), _count(raw.get("observedGeneration")),
                      _time(raw.get("progressTime")), refused, tuple(conds))


def _since(p: Proxy, type_: str, status: str) -> float | None:
    c = p.status.condition(type_)
    if c is None or c.status != status:
        return None
    return _time(c.last_transition_time) or 0.0


def member_of(obj: Mapping[str, Any], leases: int = 0, cooldowns: int = 0, egress_ip: str = "") -> Member:
    """A member Proxy object as the decision's value (ManifestError if it is no Proxy fleet can read)."""
    p = parse_proxy(dict(obj), source="the API server")
    meta = obj.get("metadata")
    raw_labels = meta.get("labels") if isinstance(meta, dict) else None
    labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
    provisioned = p.status.condition(PROVISIONED)
    refused = (p.status.phase == FAILED and provisioned is not None and provisioned.reason in LATCHES) or (
        provisioned is not None and provisioned.status == "False" and provisioned.reason == R_QUOTA)
    return Member(
        name=p.name, uid=p.uid, provider=p.spec.provider, created_at=_time(p.created_at) or 0.0,
        template_hash=str(labels.get(LABEL_HASH) or ""), created=bool(p.status.provider_id),
        ready_since=_since(p, READY, "True"), unhealthy_since=_since(p, HEALTHY, "False"),
        failed=p.status.phase == FAILED, refused=refused, deleting=p.deleting, leases=leases, cooldowns=cooldowns,
        running=p.status.phase == RUNNING, egress_ip=egress_ip)
