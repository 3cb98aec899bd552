"""The errors of every Kubernetes request fleet makes: one tree (drawn in
`fleet.kube`'s docstring), and `translate`, which turns an API server's
answer (status, message) into one of them. `fleet.kube.connection.request`
applies it to every request; nothing else of the package raises the SDK's
or urllib3's exceptions.

Imports neither the kubernetes SDK nor urllib3.
"""

from __future__ import annotations

from fleet.kube.resources import Resource

RBAC_ROLE = ("the ClusterRole fleet:<installation>:controller from `fleet render`, or its Role of that name in each "
             "namespace of --proxy-namespaces")


class KubeError(Exception):
    """A Kubernetes request failed, or its answer cannot be used; the
    subclasses say how to react."""


class ClusterAccessError(KubeError):
    """The API server refused a verb on a resource for a reason an admin
    fixes (credentials, RBAC, a missing CRD); the message says which.
    `resource` is as RBAC names it (`providerhealths`, `providerhealths/status`)."""

    def __init__(self, message: str, verb: str, resource: str, status: int) -> None:
        super().__init__(message)
        self.verb, self.resource, self.status = verb, resource, status


class ApiUnavailable(KubeError):
    """5xx, 429, a refused or broken connection, a timeout, an answer that is
    not what was asked for: try again later."""


class Conflict(KubeError):
    """409: the object moved since the resourceVersion given: read it again."""


class NotFound(KubeError):
    """404 on a named object: it is gone (or never was)."""


class Expired(KubeError):
    """410: the resourceVersion (watch) or continue token (list) is too old: list again."""


class Rejected(KubeError):
    """400/415/422: the API server refused what was sent (schema, CEL rule); the message says why."""


class SecretError(KubeError):
    """A Secret key that cannot be used: missing, too large, not UTF-8. The
    message names namespace, Secret and key, never the value."""


class WriteConflict(KubeError):
    """`Writer.publish`: the object kept changing under us for every retry."""


def access_error(
    status: int, verb: str, resource: Resource, name: str | None, server_message: str, subresource: str = "",
    namespace: str | None = None,
) -> ClusterAccessError | None:
    """The admin-facing error for a refused request, or None when the caller
    handles the status itself. 404 counts as a missing CRD only on the
    collection (create, list, watch): on a named object it means the object is gone."""
    rbac = resource.plural + (f"/{subresource}" if subresource else "")
    what = resource.crd_name + (f"/{subresource}" if subresource else "") + (f" {name!r}" if name else "")
    if namespace:
        what += f" in namespace {namespace!r}"
    said = f" (API server: {server_message})" if server_message else ""
    if status == 401:
        msg = f"cannot {verb} {what}: the API server rejected the controller's credentials (401){said}"
    elif status == 403:
        msg = (
            f"cannot {verb} {what}: forbidden (403). The controller's ServiceAccount needs verb {verb!r} on resource "
            f"{rbac!r} in API group {resource.group!r} ({RBAC_ROLE}){said}"
        )
    elif status == 404 and verb in ("create", "list", "watch"):
        msg = (
            f"cannot {verb} {what}: the API server does not serve {resource.crd_name}/{resource.version} (404). "
            f"Is the {resource.kind} CRD installed? kubectl apply -k deploy{said}"
        )
    else:
        return None
    return ClusterAccessError(msg, verb, rbac, status)


def describe(resource: Resource, name: str | None, namespace: str | None, subresource: str = "") -> str:
    """How messages name the object: `Proxy/status ns/name`, `ProviderHealth x`."""
    out = resource.kind + (f"/{subresource}" if subresource else "")
    if name:
        out += f" {namespace}/{name}" if namespace else f" {name}"
    elif namespace:
        out += f" in {namespace}"
    return out


def translate(status: int, said: str, verb: str, resource: Resource, name: str | None = None,
              namespace: str | None = None, subresource: str = "", reason: str = "") -> KubeError:
    """The tree's error for an API server's answer `status` (0: none) with
    its message `said` (see `fleet.kube`)."""
    access = access_error(status, verb, resource, name, said, subresource, namespace)
    if access is not None:
        return access
    what = f"{verb} {describe(resource, name, namespace, subresource)}"
    detail = f" ({status}: {said})" if said else f" ({status})"
    if status == 404:
        return NotFound(f"{what}: not found{detail}")
    if status == 409:
        return Conflict(f"{what}: conflict{detail}")
    if status == 410:
        return Expired(f"{what}: expired{detail}")
    if status in (400, 415, 422):
        return Rejected(f"{what}: rejected{detail}")
    return ApiUnavailable(f"{what}: the API server answered{detail}" if status else f"{what}: {reason}")
