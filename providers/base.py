"""The provider contract: what every backend implements and what callers rely on.

Callers (the Celery tasks, the controller, GC) branch only on the error class,
`Instance.state` and `TargetStatus`; nothing else about a backend leaks out.
The rules behind each method are in docs/providers.md (ported from the seed's
blueprint); this module holds the types and the shared vocabulary.

Error tree (one class per reaction the caller takes)::

    ProviderError            op, provider (configured name), id, cause
    ├── NotFound             the instance does not exist (and only then)
    ├── QuotaExceeded        quota or rate limit: retry slowly
    ├── Transient            network, 5xx, timeouts, anything unknown: retry
    └── Permanent            bad config or argument, auth, malformed id: latch

Each provider translates its SDK's errors at one boundary (its `classify`)
and raises `wrap(cls, ...)` from the SDK exception. An error that was never
classified counts as Transient (`error_class`).

`ErrorClass` is how a failed call's class is spelled wherever it leaves the
process (a call's outcome, the `result` label of metrics and spans): one
member per class of the tree (`ProviderError.label`), and two that only the
caller's task base answers, before any provider is called: `invalid` (a
malformed message) and `not_configured` (this worker's config lacks the
provider). It lives here, not in fleet, because `result_label` speaks it and
providers import nothing from fleet.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

from providers import names

# --- GC marks --------------------------------------------------------------

LABEL_MANAGED = "proxy-operator-managed"
LABEL_MANAGED_YES = "true"
LABEL_UID = "proxy-operator-uid"
# The installation (`--installation`, one per fleet) that created the
# instance: GC deletes only its own installation's orphans, so two fleets
# sharing a project, hypervisor, cluster or host never collect each other's.
LABEL_INSTALLATION = "proxy-operator-installation"
# The namespace of the Proxy the instance was created for: GC collects only
# instances of the namespaces whose Proxies it listed (--proxy-namespaces), so
# an instance of a namespace it does not watch is never taken for an orphan.
LABEL_NAMESPACE = "proxy-operator-namespace"
# What an installation id is (fleet.settings validates --installation the
# same way): a DNS-1123 label, so it fits a pod label, a GCE label value
# ([a-z0-9_-], at most 63), domain metadata and a state record alike.


def installation_problem(installation: str) -> str | None:
    """Why `installation` can't be an installation mark, or None. Empty is
    fine: it writes no mark."""
    if installation == "" or names.is_label(installation):
        return None
    return f"installation must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63), got {installation[:80]!r}"


def namespace_mark(request: CreateRequest) -> str:
    """The LABEL_NAMESPACE value a create writes: the Proxy's namespace when it
    is a DNS-1123 label (every Kubernetes namespace is), else "" (no mark)."""
    return request.namespace if names.is_label(request.namespace) else ""

# --- Shared check reasons ----------------------------------------------------
# Providers add their own only for failures an admin would fix differently.

REASON_REACHABLE = "Reachable"
REASON_TIMEOUT = "Timeout"
REASON_UNREACHABLE = "Unreachable"
REASON_UNAUTHORIZED = "Unauthorized"
REASON_FORBIDDEN = "Forbidden"
REASON_API_ERROR = "APIError"
# Ours: the checker broke its contract (raised, or overran its deadline).
REASON_CHECKER_ERROR = "CheckerError"

SHARED_REASONS = (
    REASON_REACHABLE,
    REASON_TIMEOUT,
    REASON_UNREACHABLE,
    REASON_UNAUTHORIZED,
    REASON_FORBIDDEN,
    REASON_API_ERROR,
)

# --- Deadlines -----------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """An absolute point on the monotonic clock: the Go `ctx` deadline.

    Every provider call gets one and must return promptly once it passes.
    """

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at


# --- Values --------------------------------------------------------------------


class State(str, enum.Enum):
    PROVISIONING = "Provisioning"
    RUNNING = "Running"  # only ever with a non-empty IP
    STOPPED = "Stopped"  # will not recover by itself; unknown states map here
    TERMINATED = "Terminated"


@dataclass(frozen=True)
class Placement:
    region: str = ""
    zone: str = ""
    machine_type: str = ""
    image: str = ""


@dataclass(frozen=True)
class CreateRequest:
    name: str  # from name_from_uid: idempotency key
    uid: str
    namespace: str = ""
    proxy_name: str = ""
    placement: Placement = field(default_factory=Placement)
    # May hold secrets: never logged, traced or shown in repr.
    cloud_init: str = field(default="", repr=False)
    port: int = 3128
    # The creating installation's id (LABEL_INSTALLATION); "" writes no mark.
    installation: str = ""

    def __repr__(self) -> str:  # dataclass repr=False still lists the field name
        fields = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name != "cloud_init"
        )
        return f"CreateRequest({fields}, cloud_init=<{len(self.cloud_init)} bytes>)"


@dataclass(frozen=True)
class Instance:
    id: str
    state: State
    ip: str = ""
    uid: str = ""
    # Read back from the backend; None (unknown) counts as very old for GC.
    created_at: datetime | None = None
    # The installation mark read back from the backend, never from memory;
    # "" when the instance carries none (created before marks, or by hand).
    installation: str = ""
    # The Proxy's namespace mark read back from the backend; "" when none.
    namespace: str = ""


@dataclass(frozen=True)
class TargetStatus:
    """One target's verdict from a Checker: a host, the apiserver, a project."""

    name: str
    address: str = ""
    ready: bool = False
    reason: str = ""
    message: str = ""
    latency: float = 0.0  # seconds
    details: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "ready": self.ready,
            "reason": self.reason,
            "message": self.message,
            "latencyMillis": int(self.latency * 1000),
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TargetStatus:
        return cls(
            name=d["name"],
            address=d.get("address", ""),
            ready=bool(d.get("ready", False)),
            reason=d.get("reason", ""),
            message=d.get("message", ""),
            latency=d.get("latencyMillis", 0) / 1000,
            details=dict(d.get("details") or {}),
        )


# --- Interfaces ----------------------------------------------------------------


@runtime_checkable
class Provider(Protocol):
    """Four verbs over one VM-like instance, identified by an opaque id.

    Must be safe for concurrent use, including two calls for the same name.
    """

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        """Idempotent by request.name; returns a self-contained provider id."""
        ...

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        """Raises NotFound when, and only when, the instance is gone."""
        ...

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        """Idempotent; also fine while an earlier delete is in progress."""
        ...

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        """Only managed instances; raises rather than return a list it can't vouch for."""
        ...


@runtime_checkable
class Checker(Protocol):
    """Optional: a provider that can tell whether its backend is usable.

    `check` never raises — a failure is a verdict — returns one verdict per
    target in a stable order, and returns promptly once the deadline passes.
    """

    def check(self, deadline: Deadline) -> list[TargetStatus]: ...


# --- Errors ----------------------------------------------------------------------

OPS = ("create", "get", "delete", "list")


class ErrorClass(enum.StrEnum):
    """A failed call's class as it travels (module docstring); str-valued, so
    JSON and metric labels carry the plain words."""

    NOT_FOUND = "not_found"
    QUOTA_EXCEEDED = "quota_exceeded"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    INVALID = "invalid"  # the task base refused the message: no call was made
    NOT_CONFIGURED = "not_configured"  # the task base: this worker's config lacks the provider


class ProviderError(Exception):
    """Base of the four classes; never raised itself."""

    kind: ClassVar[str] = "error"
    label: ClassVar[ErrorClass]  # how the class travels

    def __init__(self, op: str, provider: str, id: str = "", cause: BaseException | str = "") -> None:
        self.op = op
        self.provider = provider
        self.id = id
        self.cause = cause
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.provider} {self.op}"
        if self.id:
            where += f" {self.id}"
        return f"{where}: {self.kind}: {self.cause}"

    def __reduce__(self) -> tuple[type[ProviderError], tuple[Any, ...]]:  # picklable for any result backend
        return (type(self), (self.op, self.provider, self.id, str(self.cause)))


class NotFound(ProviderError):
    kind = "not found"
    label = ErrorClass.NOT_FOUND


class QuotaExceeded(ProviderError):
    kind = "quota exceeded"
    label = ErrorClass.QUOTA_EXCEEDED


class Transient(ProviderError):
    kind = "transient"
    label = ErrorClass.TRANSIENT


class Permanent(ProviderError):
    kind = "permanent"
    label = ErrorClass.PERMANENT


ERROR_CLASSES: tuple[type[ProviderError], ...] = (NotFound, QuotaExceeded, Transient, Permanent)


def wrap(cls: type[ProviderError], op: str, provider: str, id: str, cause: BaseException | str) -> ProviderError:
    """Build a classified error; raise it `from` the SDK exception."""
    if cls not in ERROR_CLASSES:
        raise TypeError(f"not an error class: {cls!r}")
    return cls(op, provider, id, cause)


def error_class(exc: BaseException) -> type[ProviderError]:
    """The class callers react to. Unclassified means Transient."""
    for cls in ERROR_CLASSES:
        if isinstance(exc, cls):
            return cls
    return Transient


def result_label(exc: BaseException | None) -> str:
    """The `result` label of metrics and spans: ok, or the error class."""
    if exc is None:
        return "ok"
    return error_class(exc).label.value


# --- Naming ----------------------------------------------------------------------


def name_from_uid(uid: str) -> str:
    """`proxy-` plus 16 lowercase base32 characters of the UID's SHA-256.

    Deterministic, so a repeated Create finds the same instance; valid as a
    GCP name, a DNS label and a libvirt domain name.
    """
    digest = hashlib.sha256(uid.encode()).digest()
    return "proxy-" + base64.b32encode(digest).decode().lower()[:16]
