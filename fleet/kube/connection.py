"""Which cluster, the client for it, and the one translation boundary.

`cluster_configuration` / `api_client` say which cluster the controller
talks to (in-cluster service account, --kubeconfig, $KUBECONFIG or
~/.kube/config; none: standalone on Redis alone). `request` makes one
CustomObjectsApi call (`<verb>_{cluster,namespaced}_custom_object[_status]`,
a list across all namespaces for namespace None) and turns whatever goes
wrong, an `ApiException` or an error of the connection under the client
(refused, reset, timed out, cut mid-response), into the tree of
`fleet.kube.errors`; `guarded` does the same around any other SDK call.
`Client` holds the SDK's API objects for the writer's parts
(`fleet.kube.writer`, `patches`, `objects`, `secrets`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleet.kube.errors import ApiUnavailable, describe, translate
from fleet.kube.resources import KNOWN, Resource
from fleet.settings import Settings
from providers.kubernetes.client import default_kubeconfig, in_cluster, load_configuration

REQUEST_TIMEOUT = 10.0
FIELD_MANAGER = "fleet-controller"

# The SDK's client, for callers that hold one (fleet.kube.watch, fleet.gc) without importing the SDK.
ApiClient = client.ApiClient

# errors of the connection under the client: refused, reset, timed out, cut mid-response
CONNECTION_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)
# what the SDK raises decoding an answer that is not JSON (or not UTF-8)
UNREADABLE: tuple[type[Exception], ...] = (json.JSONDecodeError, UnicodeDecodeError)


def cluster_configuration(settings: Settings) -> tuple[client.Configuration | None, str]:
    """The cluster to write to, and a sentence saying which mode that is.

    In-cluster service account, else an explicit --kubeconfig, $KUBECONFIG
    or ~/.kube/config; with none of them: standalone on Redis alone.
    """
    kinds = " and ".join(r.kind for r in KNOWN)
    if settings.kubeconfig or settings.kube_context:
        cfg = load_configuration(settings.kubeconfig, settings.kube_context)
        return cfg, f"cluster mode: writing {kinds} objects to {cfg.host} (kubeconfig {settings.kubeconfig or default_kubeconfig()})"
    if in_cluster():
        cfg = load_configuration()
        return cfg, f"cluster mode: writing {kinds} objects to {cfg.host} (in-cluster service account)"
    path = default_kubeconfig()
    if all(os.path.exists(p) for p in path.split(os.pathsep) if p):
        cfg = load_configuration()
        return cfg, f"cluster mode: writing {kinds} objects to {cfg.host} (kubeconfig {path})"
    return None, "standalone mode: no cluster configured, results are kept in Redis only (fleet get ph)"


def api_client(settings: Settings) -> tuple[client.ApiClient | None, str]:
    """A client of the configured cluster (None standalone), and the sentence
    saying which mode that is (`cluster_configuration`)."""
    cfg, mode = cluster_configuration(settings)
    return (client.ApiClient(cfg) if cfg is not None else None), mode


def server_message(exc: ApiException) -> str:
    """The message of the API server's Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "").get("message") or "")
    except (ValueError, AttributeError, TypeError):
        return str(exc.reason or "")


def check_scope(resource: Resource, namespace: str | None) -> None:
    if resource.namespaced and not namespace:
        raise ValueError(f"{resource.kind} is namespaced: a namespace is required")
    if not resource.namespaced and namespace:
        raise ValueError(f"{resource.kind} is cluster-scoped: no namespace ({namespace!r})")


@contextmanager
def guarded(verb: str, resource: Resource, name: str | None = None, namespace: str | None = None,
            subresource: str = "") -> Iterator[None]:
    """Whatever the SDK or the connection raises inside, as the tree's error."""
    try:
        yield
    except ApiException as exc:
        raise translate(exc.status or 0, server_message(exc), verb, resource, name, namespace, subresource,
                        str(exc.reason or "")) from exc
    except CONNECTION_ERRORS as exc:
        raise ApiUnavailable(f"{verb} {describe(resource, name, namespace, subresource)}: {exc}") from exc
    except UNREADABLE as exc:  # the SDK decoding the answer
        raise ApiUnavailable(f"{verb} {describe(resource, name, namespace, subresource)}: the answer is not JSON "
                             f"({exc})") from exc


def request(api: client.CustomObjectsApi, verb: str, resource: Resource, namespace: str | None, name: str | None = None,
            body: Any = None, *, status: bool = False, **kw: Any) -> Any:
    """One CustomObjectsApi call: `verb` is get, create, patch, delete, list
    or watch (a list with watch=True; `name` is for the messages only on
    create); `status` targets the status subresource; a list or watch with
    namespace None is across all namespaces.
    `_request_timeout` defaults to REQUEST_TIMEOUT. Raises only the tree's
    errors (see `fleet.kube`)."""
    scope = "namespaced" if namespace else "cluster"
    sdk_verb = "list" if verb == "watch" else verb
    method = getattr(api, f"{sdk_verb}_{scope}_custom_object" + ("_status" if status else ""))
    where = (namespace, resource.plural) if namespace else (resource.plural,)
    args = [name] if name is not None and verb != "create" else []
    if body is not None:
        args.append(body)
    kw.setdefault("_request_timeout", REQUEST_TIMEOUT)
    with guarded(verb, resource, name, namespace, "status" if status else ""):
        return method(resource.group, resource.version, *where, *args, **kw)


def an_object(out: Any, verb: str, resource: Resource, name: str | None, namespace: str | None) -> dict[str, Any]:
    """`out` when the answer is a JSON object, else ApiUnavailable."""
    if not isinstance(out, dict):
        raise ApiUnavailable(f"{verb} {describe(resource, name, namespace)}: the answer is not an object")
    return out


def scale(api_client: client.ApiClient, resource: Resource, namespace: str, name: str,
          replicas: int | None = None) -> dict[str, Any]:
    """The object's scale subresource (an autoscaling/v1 Scale): read, or
    with `replicas` a merge patch of its spec.replicas (what `kubectl scale`
    sends). Raises only the tree's errors (NotFound: no such object; 422
    Rejected: the CRD's limits)."""
    check_scope(resource, namespace)
    api = client.CustomObjectsApi(api_client)
    verb = "get" if replicas is None else "patch"
    with guarded(verb, resource, name, namespace, "scale"):
        if replicas is None:
            out = api.get_namespaced_custom_object_scale(resource.group, resource.version, namespace, resource.plural, name,
                                                         _request_timeout=REQUEST_TIMEOUT)
        else:
            out = api.patch_namespaced_custom_object_scale(
                resource.group, resource.version, namespace, resource.plural, name, {"spec": {"replicas": replicas}},
                field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)
    return an_object(out, verb, resource, name, namespace)


class Client:
    """The SDK's API objects of one cluster, and the writer's request
    (`call`): what the writer's parts share."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.api = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.writes = 0  # creates + patches, for the benchmark and tests

    def call(self, verb: str, resource: Resource, namespace: str | None, name: str | None = None, body: Any = None,
             *, status: bool = False, **kw: Any) -> Any:
        """`request` on this client, for one object of `resource`'s scope."""
        check_scope(resource, namespace)
        return request(self.api, verb, resource, namespace, name, body, status=status, **kw)

    def merge_patch(self, resource: Resource, namespace: str | None, name: str, body: dict[str, Any],
                    status: bool = False) -> dict[str, Any]:
        """An RFC 7386 merge patch of the object (or its status), as this
        controller's field manager; the object as written."""
        out = self.call("patch", resource, namespace, name, body, status=status, field_manager=FIELD_MANAGER,
                        _content_type="application/merge-patch+json")
        obj = an_object(out, "patch", resource, name, namespace)
        self.writes += 1
        return obj
