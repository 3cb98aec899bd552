"""The controller's Kubernetes writer: one `publish` for every custom resource.

`Writer.publish(resource, name, namespace, decide)` takes the object as it
last wrote or read it from its cache (`StatusCache`, in Redis: shared by the
replicas), else reads it with a GET, and creates it when missing, labelled
`app.kubernetes.io/managed-by=egress-proxies-operator` and
`fleet.crawl.example.com/installation=<--installation>`. It touches only
objects carrying both (`foreign_owner`): anything else is left alone, logged
once and reported as FOREIGN. Then the feature's pure `decide(current)`
(`fleet.resources`: a `Patch` of the status or a `Skip`) says what to write;
the writer merge-patches the status subresource with the cached or read
resourceVersion in the patch, so two replicas can't interleave (a 409
re-reads, decides again and retries; a 404 drops the entry and recreates).
So an unchanged status costs no request and a changed one one PATCH. Only
objects that passed the ownership check are cached; an entry expires after
`CACHE_TTL`, so an object deleted or edited by hand while its status stays
the same is seen again within that time. Every write names the field manager
`fleet-controller`. A 401/403 (RBAC) or a 404 on the collection (CRD
missing) becomes a ClusterAccessError naming the verb and `plural.group`.
The kinds are data (`fleet.resources.Resource`); cluster-scoped and
namespaced ones go through the same code. This module knows no feature.

For a kind users write (Proxy), the writer also patches what a controller
owns on someone else's object, optimistically (the resourceVersion it read
in the patch): `patch_status` and `patch_finalizers` answer the new object
or raise `Conflict` (409: read again) or `NotFound` (404: gone); and
`read_secret_key` reads one key of a Secret (a Proxy's cloudInit.secretRef),
bounded and never logged. `list_page` and `WatchStream` are the two
requests `fleet.kubewatch` makes (list, watch), so the kubernetes SDK stays
in this module. Every failure is one of this module's exceptions:
ClusterAccessError (RBAC, credentials, CRD missing), Conflict, NotFound,
Expired (410), Rejected (the API server refused the content) or
ApiUnavailable (5xx, 429, connection errors, timeouts: retry later).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleet.resources import KNOWN, UNCHANGED, Decide, Resource, Skip
from fleet.settings import Settings
from providers.kubernetes.client import default_kubeconfig, in_cluster, load_configuration

log = logging.getLogger("fleet.kube")

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "egress-proxies-operator"
LABEL_INSTALLATION = "fleet.crawl.example.com/installation"  # value: Settings.installation_id
FIELD_MANAGER = "fleet-controller"
RBAC_ROLE = ("the ClusterRole fleet:<installation>:controller from `fleet render`, or its Role of that name in each "
             "namespace of --proxy-namespaces")
# publish outcomes besides a Skip's reason (UNCHANGED, or the feature's own)
PATCHED, FOREIGN = "patched", "foreign"
CONFLICT_RETRIES = 5
REQUEST_TIMEOUT = 10.0
CACHE_TTL = 3600.0  # seconds a cached object is trusted without a GET
MAX_SECRET_VALUE = 64 * 1024  # bytes of one Secret key read_secret_key accepts (decoded)
SECRETS_ROLE = ("the Role fleet:<installation>:controller that `fleet render` writes in each namespace of "
                "--proxy-namespaces (with '*': the ClusterRole fleet:<installation>:controller:secrets)")

# The SDK's client, for callers that hold one (fleet.kubewatch) without importing the SDK.
ApiClient = client.ApiClient


class StatusCache(Protocol):
    """Where the writer keeps each object's last known resourceVersion and
    status as a raw document (`fleet.store.Statuses`)."""

    def get(self, plural: str, namespace: str | None, name: str) -> bytes | str | None: ...

    def put(self, plural: str, namespace: str | None, name: str, resource_version: str, doc: str,
            ttl: float) -> bool: ...

    def drop(self, plural: str, namespace: str | None, name: str) -> None: ...


class WriteConflict(Exception):
    """The object kept changing under us for every retry."""


class KubeError(Exception):
    """A request failed; the subclasses say how to react."""


class Conflict(KubeError):
    """409: the object moved since the resourceVersion given: read it again."""


class NotFound(KubeError):
    """404 on a named object: it is gone (or never was)."""


class Expired(KubeError):
    """410: the resourceVersion (watch) or continue token (list) is too old: list again."""


class Rejected(KubeError):
    """400/415/422: the API server refused what was sent (schema, CEL rule); the message says why."""


class ApiUnavailable(KubeError):
    """5xx, 429, a refused or broken connection, a timeout: try again later."""


class SecretError(KubeError):
    """A Secret key that cannot be used: missing, too large, not UTF-8. The
    message names namespace, Secret and key, never the value."""


class ClusterAccessError(Exception):
    """The API server refused a verb on a resource for a reason an admin
    fixes (credentials, RBAC, a missing CRD); the message says which.
    `resource` is as RBAC names it (`providerhealths`, `providerhealths/status`)."""

    def __init__(self, message: str, verb: str, resource: str, status: int) -> None:
        super().__init__(message)
        self.verb, self.resource, self.status = verb, resource, status


def labels_for(installation: str) -> dict[str, str]:
    """The labels on everything this installation creates."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTALLATION: installation}


def selector_for(installation: str) -> str:
    return ",".join(f"{k}={v}" for k, v in labels_for(installation).items())


def foreign_owner(obj: dict[str, Any], installation: str) -> str | None:
    """None when the object carries our labels; else who it seems to belong to."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        managed_by = labels.get(LABEL_MANAGED_BY)
        return f"managed by {managed_by!r}" if managed_by else f"not managed by fleet (no {LABEL_MANAGED_BY} label)"
    other = labels.get(LABEL_INSTALLATION)
    if other is None:
        return f"a fleet object without the {LABEL_INSTALLATION} label (created before installations, or by hand)"
    if other != installation:
        return f"installation {other!r}"
    return None


def access_error(
    status: int, verb: str, resource: Resource, name: str | None, server_message: str, subresource: str = "",
    namespace: str | None = None,
) -> ClusterAccessError | None:
    """The admin-facing error for a refused request, or None when the caller
    handles the status itself. 404 counts as a missing CRD only on the
    collection (create, list): on a named object it means the object is gone."""
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


def _server_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message") or "")
    except (ValueError, AttributeError):
        return str(exc.reason or "")


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


def connect(settings: Settings, cache: StatusCache | None = None) -> tuple[Writer | None, str]:
    """The controller's writer for the configured cluster (None standalone),
    and the sentence saying which mode that is (`cluster_configuration`).
    Its `api_client` serves a `fleet.kubewatch.Watcher` too."""
    api, mode = api_client(settings)
    return (Writer(api, settings.installation_id, cache) if api is not None else None), mode


def _what(resource: Resource, name: str | None, namespace: str | None, subresource: str = "") -> str:
    out = resource.kind + (f"/{subresource}" if subresource else "")
    if name:
        out += f" {namespace}/{name}" if namespace else f" {name}"
    return out


def translate(exc: ApiException, verb: str, resource: Resource, name: str | None = None, namespace: str | None = None,
              subresource: str = "") -> Exception:
    """This module's exception for an ApiException (see the module's docstring)."""
    status, said = exc.status or 0, _server_message(exc)
    access = access_error(status, verb, resource, name, said, subresource, namespace)
    if access is not None:
        return access
    what = f"{verb} {_what(resource, name, namespace, subresource)}"
    detail = f" ({status}: {said})" if said else f" ({status})"
    if status == 404:
        return NotFound(f"{what}: not found{detail}")
    if status == 409:
        return Conflict(f"{what}: conflict{detail}")
    if status == 410:
        return Expired(f"{what}: expired{detail}")
    if status in (400, 415, 422):
        return Rejected(f"{what}: rejected{detail}")
    return ApiUnavailable(f"{what}: the API server answered{detail}" if status else f"{what}: {exc.reason}")


# errors of the connection under the client: refused, reset, timed out, cut mid-response
CONNECTION_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)


def _list_call(api: client.ApiClient, resource: Resource, namespace: str | None, **kw: Any) -> Any:
    """CustomObjectsApi's list, in `namespace` or across all namespaces (None)."""
    objects = client.CustomObjectsApi(api)
    if namespace:
        return objects.list_namespaced_custom_object(resource.group, resource.version, namespace, resource.plural, **kw)
    return objects.list_cluster_custom_object(resource.group, resource.version, resource.plural, **kw)


def list_page(api: client.ApiClient, resource: Resource, limit: int = 0, continue_token: str = "",
              namespace: str | None = None, field_selector: str = "") -> dict[str, Any]:
    """One page of the objects of `resource` in `namespace` (None: across all
    namespaces): the list as answered, with metadata.resourceVersion and
    .continue. Raises Expired when the continue token is too old (list again
    from the start)."""
    kw: dict[str, Any] = {"_request_timeout": REQUEST_TIMEOUT}
    if limit:
        kw["limit"] = limit
    if continue_token:
        kw["_continue"] = continue_token
    if field_selector:
        kw["field_selector"] = field_selector
    try:
        out = _list_call(api, resource, namespace, **kw)
    except ApiException as exc:
        raise translate(exc, "list", resource, namespace=namespace) from exc
    except CONNECTION_ERRORS as exc:
        raise ApiUnavailable(f"list {resource.kind}" + (f" in {namespace}" if namespace else "") + f": {exc}") from exc
    if not isinstance(out, dict):
        raise ApiUnavailable(f"list {resource.kind}: the answer is not an object")
    return out


class WatchStream:
    """One watch request of `resource` in `namespace` (None: across all namespaces), from
    `resource_version`: iterate for (type, object) pairs, as the API server
    sent them (the caller validates the objects). Lines that are not a JSON
    object with a string `type` are logged (not their content) and skipped;
    an ERROR event raises (410: Expired). The iteration ends when the server
    ends the response (timeout_seconds) or when `close()` is called, from
    any thread; a connection cut or a read timeout raises ApiUnavailable."""

    def __init__(self, api: client.ApiClient, resource: Resource, resource_version: str, *, timeout_seconds: int,
                 bookmarks: bool = True, read_timeout: float | None = None, namespace: str | None = None) -> None:
        self.api, self.resource, self.resource_version, self.namespace = api, resource, resource_version, namespace
        self.timeout_seconds, self.bookmarks = timeout_seconds, bookmarks
        self.read_timeout = read_timeout if read_timeout is not None else timeout_seconds + 30.0
        self._lock = threading.Lock()
        self._resp: Any = None
        self._closed = False

    def close(self) -> None:
        """End the iteration now: shut the connection's socket, so a blocked read returns."""
        with self._lock:
            self._closed = True
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # best effort: the read timeout bounds the read anyway
                log.debug("closing a watch connection failed", exc_info=True)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        r = self.resource
        resp: Any  # with _preload_content=False: the urllib3 response
        try:
            resp = _list_call(
                self.api, r, self.namespace, watch=True, resource_version=self.resource_version or None,
                allow_watch_bookmarks=self.bookmarks, timeout_seconds=self.timeout_seconds, _preload_content=False,
                _request_timeout=(REQUEST_TIMEOUT, self.read_timeout),
            )
        except ApiException as exc:
            raise translate(exc, "watch", r, namespace=self.namespace) from exc
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"watch {r.kind}: {exc}") from exc
        with self._lock:
            self._resp, closed = resp, self._closed
        try:
            if closed:
                return
            for line in _lines(resp):
                event = _event(line, r)
                if event is not None:
                    yield event
        except CONNECTION_ERRORS as exc:
            if not self._closed:
                raise ApiUnavailable(f"watch {r.kind}: {exc}") from exc
        finally:
            with self._lock:
                self._resp = None
            resp.close()
            resp.release_conn()


MAX_WATCH_LINE = 8 * 1024 * 1024  # bytes; an API server object is at most ~1.5 MiB


def _lines(resp: Any) -> Iterator[bytes]:
    """The newline-separated lines of a streamed response, as they arrive."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from lines
        if len(buffer) > MAX_WATCH_LINE:
            raise ApiUnavailable(f"a watch event longer than {MAX_WATCH_LINE} bytes")
    if buffer.strip():
        yield buffer


def _event(line: bytes, resource: Resource) -> tuple[str, Any] | None:
    """(type, object) of one watch line, None to skip it; raises on an ERROR event."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError:
        log.warning("watch: a line that is not JSON, skipped", extra={"fields": {"kind": resource.kind, "bytes": len(line)}})
        return None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        log.warning("watch: an event without a type, skipped", extra={"fields": {"kind": resource.kind}})
        return None
    if event["type"] == "ERROR":
        obj: dict[str, Any] = event["object"] if isinstance(event.get("object"), dict) else {}
        code, message = obj.get("code"), str(obj.get("message") or obj.get("reason") or "")
        if code == 410:
            raise Expired(f"watch {resource.kind}: {message or 'resourceVersion too old'} (410)")
        err = access_error(code, "watch", resource, None, message) if isinstance(code, int) else None
        raise err or ApiUnavailable(f"watch {resource.kind}: error event {code}: {message}")
    return event["type"], event.get("object")


def _check_scope(resource: Resource, namespace: str | None) -> None:
    if resource.namespaced and not namespace:
        raise ValueError(f"{resource.kind} is namespaced: a namespace is required")
    if not resource.namespaced and namespace:
        raise ValueError(f"{resource.kind} is cluster-scoped: no namespace ({namespace!r})")


class Writer:
    """Creates, status-patches and cleans up this installation's custom
    objects of any `Resource`, cluster-scoped or namespaced."""

    def __init__(self, api_client: client.ApiClient, installation: str, cache: StatusCache | None = None,
                 cache_ttl: float = CACHE_TTL) -> None:
        self.api_client = api_client
        self.api = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.installation = installation
        self.cache, self.cache_ttl = cache, cache_ttl
        self.writes = 0  # creates + patches, for the benchmark and tests
        self._reported: set[tuple[str, str, str]] = set()  # (kind, namespace, name) logged as foreign by this process
        self._lock = threading.Lock()

    def _call(self, verb: str, resource: Resource, namespace: str | None, *args: Any, status: bool = False, **kw: Any) -> Any:
        """CustomObjectsApi's `<verb>_{cluster,namespaced}_custom_object[_status]`."""
        scope = "namespaced" if resource.namespaced else "cluster"
        method = getattr(self.api, f"{verb}_{scope}_custom_object" + ("_status" if status else ""))
        where = (namespace, resource.plural) if resource.namespaced else (resource.plural,)
        return method(resource.group, resource.version, *where, *args, _request_timeout=REQUEST_TIMEOUT, **kw)

    def _refused(self, exc: ApiException, verb: str, resource: Resource, name: str | None = None,
                 namespace: str | None = None, subresource: str = "") -> Exception:
        err = access_error(exc.status or 0, verb, resource, name, _server_message(exc), subresource, namespace)
        return err or exc

    def _get(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._call("get", resource, namespace, name)
            return obj
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._refused(exc, "get", resource, name, namespace) from exc

    def _create(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        metadata: dict[str, Any] = {"name": name, "labels": labels_for(self.installation)}
        if namespace:
            metadata["namespace"] = namespace
        body = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}
        try:
            obj: dict[str, Any] = self._call("create", resource, namespace, body, field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status == 409:  # another replica, or another installation, was first
                return None
            raise self._refused(exc, "create", resource, name, namespace) from exc
        self.writes += 1
        log.info(f"created {resource.kind}", extra={"fields": {"name": name, **_ns(namespace), "installation": self.installation}})
        return obj

    def _report_foreign(self, resource: Resource, name: str, namespace: str | None, owner: str) -> None:
        with self._lock:
            key = (resource.kind, namespace or "", name)
            first = key not in self._reported
            self._reported.add(key)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            f"{resource.kind} not ours: left alone",
            extra={"fields": {"name": name, **_ns(namespace), "owner": owner, "installation": self.installation}},
        )

    def _cached(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        """The object as last written or read (resourceVersion and status), or None."""
        raw = self.cache.get(resource.plural, namespace, name) if self.cache is not None else None
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
            rv, status = doc["resourceVersion"], doc["status"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(rv, str) or not isinstance(status, dict):
            return None
        metadata: dict[str, Any] = {"name": name, "resourceVersion": rv, "labels": labels_for(self.installation)}
        if namespace:
            metadata["namespace"] = namespace
        return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata, "status": status}

    def _remember(self, resource: Resource, name: str, namespace: str | None, obj: dict[str, Any]) -> None:
        """Cache an object that passed the ownership check, as written or read."""
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if self.cache is None or not isinstance(rv, str):
            return
        doc = json.dumps({"resourceVersion": rv, "status": obj.get("status") or {}}, separators=(",", ":"))
        self.cache.put(resource.plural, namespace, name, rv, doc, self.cache_ttl)

    def _forget(self, resource: Resource, name: str, namespace: str | None) -> None:
        if self.cache is not None:
            self.cache.drop(resource.plural, namespace, name)

    def publish(self, resource: Resource, name: str, namespace: str | None, decide: Decide) -> str:
        """Create the object if missing, then apply `decide(current)`: patch
        its status, or skip. `current` is the cached object when there is
        one (no request), else the one read. Returns PATCHED, FOREIGN (not
        this installation's: nothing written), or the Skip's reason."""
        _check_scope(resource, namespace)
        cached = self._cached(resource, name, namespace)
        for _ in range(CONFLICT_RETRIES):
            obj, cached = cached, None
            if obj is None:
                obj = self._get(resource, name, namespace) or self._create(resource, name, namespace)
                if obj is None:
                    continue
                owner = foreign_owner(obj, self.installation)
                if owner is not None:
                    self._forget(resource, name, namespace)
                    self._report_foreign(resource, name, namespace, owner)
                    return FOREIGN
                self._remember(resource, name, namespace, obj)
            decision = decide(obj)
            if isinstance(decision, Skip):
                return decision.reason
            if not decision.status:  # an empty merge patch changes nothing
                return UNCHANGED
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": dict(decision.status)}
            try:
                patched = self._call("patch", resource, namespace, name, body, status=True, field_manager=FIELD_MANAGER,
                                     _content_type="application/merge-patch+json")
            except ApiException as exc:
                if exc.status in (404, 409):  # deleted (recreate) or moved (re-read) under us
                    log.debug("object moved or gone, re-reading", extra={"fields": {"name": name, **_ns(namespace), "status": exc.status}})
                    if exc.status == 404:
                        self._forget(resource, name, namespace)
                    continue
                raise self._refused(exc, "patch", resource, name, namespace, "status") from exc
            self.writes += 1
            if isinstance(patched, dict):
                self._remember(resource, name, namespace, patched)
            return PATCHED
        where = f"{namespace}/{name}" if namespace else name
        raise WriteConflict(f"{resource.kind} {where}: still conflicting after {CONFLICT_RETRIES} attempts")

    def cleanup(self, resource: Resource, keep: set[str], namespace: str | None = None, why: str = "") -> list[str]:
        """Delete this installation's objects (in `namespace`, for a
        namespaced kind) whose names are not in `keep`; never unlabelled
        ones nor another installation's. `why` ends the log line."""
        _check_scope(resource, namespace)
        try:
            listed = self._call("list", resource, namespace, label_selector=selector_for(self.installation))
        except ApiException as exc:
            raise self._refused(exc, "list", resource, namespace=namespace) from exc
        deleted = []
        for item in listed.get("items") or ():
            name = (item.get("metadata") or {}).get("name", "")
            if name in keep or foreign_owner(item, self.installation) is not None:
                continue
            try:
                self._call("delete", resource, namespace, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise self._refused(exc, "delete", resource, name, namespace) from exc
            self._forget(resource, name, namespace)
            deleted.append(name)
            log.info(f"deleted {resource.kind}" + (f" {why}" if why else ""), extra={"fields": {"name": name, **_ns(namespace)}})
        return deleted


    # --- a controller's writes on objects users own (Proxy) ---------------------------

    def _patch(self, resource: Resource, namespace: str | None, name: str, body: dict[str, Any], status: bool) -> dict[str, Any]:
        _check_scope(resource, namespace)
        try:
            out = self._call("patch", resource, namespace, name, body, status=status, field_manager=FIELD_MANAGER,
                             _content_type="application/merge-patch+json")
        except ApiException as exc:
            raise translate(exc, "patch", resource, name, namespace, "status" if status else "") from exc
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"patch {_what(resource, name, namespace)}: {exc}") from exc
        if not isinstance(out, dict):
            raise ApiUnavailable(f"patch {_what(resource, name, namespace)}: the answer is not an object")
        self.writes += 1
        return out

    def patch_status(self, resource: Resource, namespace: str | None, name: str, resource_version: str,
                     status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource (RFC 7386: a None value removes
        a field, a list replaces the list), only if the object is still at
        `resource_version`. Returns the object as written; Conflict (409: it
        moved, read again), NotFound (404: gone)."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        return self._patch(resource, namespace, name, body, status=True)

    def patch_finalizers(self, resource: Resource, namespace: str | None, name: str, resource_version: str,
                         finalizers: Sequence[str]) -> dict[str, Any]:
        """Set metadata.finalizers to `finalizers` (the whole list: add or
        remove ours, keep the others as read), only if the object is still at
        `resource_version`. Returns the object as written (an object being
        deleted whose last finalizer goes is deleted: the answer is its last
        state); Conflict (409), NotFound (404)."""
        body = {"metadata": {"resourceVersion": resource_version, "finalizers": list(finalizers)}}
        return self._patch(resource, namespace, name, body, status=False)

    # --- plain objects of a kind fleet owns by name (its namespace claims: Leases) -------------

    def read(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none (404)."""
        _check_scope(resource, namespace)
        try:
            out = self._call("get", resource, namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise translate(exc, "get", resource, name, namespace) from exc
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"get {_what(resource, name, namespace)}: {exc}") from exc
        return out if isinstance(out, dict) else None

    def create(self, resource: Resource, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create `body` (its metadata names it); Conflict (409) when it exists already."""
        _check_scope(resource, namespace)
        name = str((body.get("metadata") or {}).get("name") or "")
        try:
            out = self._call("create", resource, namespace, dict(body), field_manager=FIELD_MANAGER)
        except ApiException as exc:
            raise translate(exc, "create", resource, name, namespace) from exc
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"create {_what(resource, name, namespace)}: {exc}") from exc
        if not isinstance(out, dict):
            raise ApiUnavailable(f"create {_what(resource, name, namespace)}: the answer is not an object")
        self.writes += 1
        return out

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the object (a metadata.resourceVersion in `body` makes
        it conditional: Conflict on 409); NotFound when it is gone."""
        return self._patch(resource, namespace, name, dict(body), status=False)

    def read_secret_key(self, namespace: str, name: str, key: str) -> str:
        """The UTF-8 text under `key` of Secret `namespace/name` (a Proxy's
        cloudInit.secretRef), at most MAX_SECRET_VALUE bytes. A missing Secret
        or key, an oversized or undecodable value: SecretError naming
        namespace, name and key; never the value, which is not logged."""
        where = f"Secret {namespace}/{name}"
        resp: Any  # with _preload_content=False: the urllib3 response, read here (no model, no copies)
        try:
            resp = self.core.read_namespaced_secret(name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            raw = resp.data
        except ApiException as exc:
            said, status = _server_message(exc), exc.status or 0
            if status == 404:
                raise SecretError(f"{where} not found (key {key!r} wanted)") from None
            if status in (401, 403):
                raise ClusterAccessError(
                    f"cannot get {where}: {'forbidden' if status == 403 else 'credentials rejected'} ({status}). The "
                    f"controller's ServiceAccount needs verb 'get' on resource 'secrets' in API group '' in namespace "
                    f"{namespace!r} ({SECRETS_ROLE}) (API server: {said})",
                    "get", "secrets", status) from None
            raise ApiUnavailable(f"get {where}: the API server answered ({status})") from None
        except CONNECTION_ERRORS as exc:
            raise ApiUnavailable(f"get {where}: {exc}") from None
        try:
            data = json.loads(raw).get("data") or {}
        except (ValueError, AttributeError):
            raise ApiUnavailable(f"get {where}: the answer is not a Secret") from None
        encoded = data.get(key) if isinstance(data, dict) else None
        if encoded is None:
            keys = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else ""
            raise SecretError(f"{where} has no key {key!r} (keys: {keys or 'none'})")
        if not isinstance(encoded, str) or len(encoded) > 4 * (MAX_SECRET_VALUE // 3 + 1):
            raise SecretError(f"{where} key {key!r}: larger than {MAX_SECRET_VALUE} bytes")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SecretError(f"{where} key {key!r}: not base64 (as the API server sends it)") from None
        if len(value) > MAX_SECRET_VALUE:
            raise SecretError(f"{where} key {key!r}: larger than {MAX_SECRET_VALUE} bytes")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError(f"{where} key {key!r}: not UTF-8 text") from None


def _ns(namespace: str | None) -> dict[str, str]:
    """The log field of a namespaced object (none for a cluster-scoped one)."""
    return {"namespace": namespace} if namespace else {}
