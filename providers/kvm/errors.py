"""The one place libvirt and dial errors become provider error classes.

Also the kvm error types themselves: `DialError` tags a failed connection
attempt with its stage so the health check can name where it broke without
parsing messages, and the deadline errors the connection pool raises.

Decision (the seed's behaviour, kept on purpose): SSH authentication and
host-key failures are **Transient**, like every dial failure. Permanent is
latched per Proxy until its spec changes, but the fix for a rejected key or a
changed host key is in the provider's Secret or on the host, never in a Proxy
spec; key files are re-read on redial, so once the Secret is fixed the
retries succeed with no Proxy edit. sshd also refuses handshakes for
passing reasons (MaxStartups, restarts). The health check reports these as
`SSHHandshakeFailed` / `SSHMaterialUnavailable`, which is where an admin
looks.
"""

from __future__ import annotations

import enum

from providers import base

try:  # the codes are plain ints; keep classify importable without the extra
    import libvirt
except ImportError:  # pragma: no cover - the kvm extra is not installed
    libvirt = None  # type: ignore[assignment]


class Stage(enum.StrEnum):
    SSH_MATERIAL = "ssh-material"
    TCP = "tcp"
    SSH_HANDSHAKE = "ssh-handshake"
    LIBVIRT_CONNECT = "libvirt-connect"


class DialError(Exception):
    """A connection attempt that failed at `stage`; `__cause__` is the original."""

    def __init__(self, stage: Stage, message: str) -> None:
        self.stage = stage
        super().__init__(message)


class DeadlineError(TimeoutError):
    """The caller's deadline passed: waiting for a slot, a dial or an RPC."""


class ProbeBusyError(DeadlineError):
    """The previous check of this host is still waiting for libvirt to answer."""


def describe(exc: BaseException) -> str:
    """An exception for a DialError message: an OSError by its strerror and
    file, anything else by type and text."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}"


# libvirt error codes (virErrorNumber), spelled out so the table test pins them.
VIR_ERR_INTERNAL_ERROR = 1
VIR_ERR_NO_SUPPORT = 3
VIR_ERR_INVALID_ARG = 8
VIR_ERR_OPERATION_DENIED = 29
VIR_ERR_XML_ERROR = 27
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_AUTH_FAILED = 45
VIR_ERR_NO_STORAGE_POOL = 49
VIR_ERR_NO_STORAGE_VOL = 50
VIR_ERR_ACCESS_DENIED = 88
VIR_ERR_AUTH_CANCELLED = 79
VIR_ERR_AUTH_UNAVAILABLE = 94
VIR_ERR_XML_DETAIL = 35
VIR_ERR_CONFIG_UNSUPPORTED = 67

VIR_FROM_RPC = 7

NOT_FOUND_CODES = frozenset({VIR_ERR_NO_DOMAIN, VIR_ERR_NO_STORAGE_VOL})
PERMANENT_CODES = frozenset(
    {
        VIR_ERR_NO_SUPPORT,
        VIR_ERR_INVALID_ARG,
        VIR_ERR_OPERATION_DENIED,
        VIR_ERR_XML_ERROR,
        VIR_ERR_XML_DETAIL,
        VIR_ERR_CONFIG_UNSUPPORTED,
        VIR_ERR_AUTH_FAILED,
        VIR_ERR_AUTH_CANCELLED,
        VIR_ERR_AUTH_UNAVAILABLE,
        VIR_ERR_ACCESS_DENIED,
        VIR_ERR_NO_STORAGE_POOL,
    }
)


def libvirt_code(exc: BaseException) -> int | None:
    """The virErrorNumber of a libvirtError, else None."""
    if libvirt is not None and isinstance(exc, libvirt.libvirtError):
        return exc.get_error_code() or VIR_ERR_INTERNAL_ERROR  # raised without a last error
    return None


def is_libvirt_error(exc: BaseException) -> bool:
    return libvirt_code(exc) is not None


def is_transport_error(exc: BaseException) -> bool:
    """A libvirt RPC-layer failure (socket closed, EOF): evidence against the link."""
    if not is_libvirt_error(exc):
        return False
    domain = exc.get_error_domain() if hasattr(exc, "get_error_domain") else getattr(exc, "domain", None)
    return domain == VIR_FROM_RPC


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    """No domain / no volume → NotFound; XML, unsupported, invalid argument,
    auth, access and a missing pool → Permanent; everything else, including
    every dial failure and deadline, → Transient. Nothing is Quota, and the
    verb changes nothing (`op` is the boundary's signature)."""
    if isinstance(exc, base.ProviderError):
        return type(exc)
    code = libvirt_code(exc)
    if code is not None and not is_transport_error(exc):
        if code in NOT_FOUND_CODES:
            return base.NotFound
        if code in PERMANENT_CODES:
            return base.Permanent
    return base.Transient
