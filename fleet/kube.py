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
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Protocol

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
RBAC_ROLE = "the ClusterRole fleet:<installation>:controller from `fleet render`"
# publish outcomes besides a Skip's reason (UNCHANGED, or the feature's own)
PATCHED, FOREIGN = "patched", "foreign"
CONFLICT_RETRIES = 5
REQUEST_TIMEOUT = 10.0
CACHE_TTL = 3600.0  # seconds a cached object is trusted without a GET



class StatusCache(Protocol):
    """Where the writer keeps each object's last known resourceVersion and
    status as a raw document (`fleet.store.Statuses`)."""

    def get(self, plural: str, namespace: str | None, name: str) -> bytes | str | None: ...

    def put(self, plural: str, namespace: str | None, name: str, resource_version: str, doc: str,
            ttl: float) -> bool: ...

    def drop(self, plural: str, namespace: str | None, name: str) -> None: ...


class WriteConflict(Exception):
    """The object kept changing under us for every retry."""


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
    elif status == 404 and verb in ("create", "list"):
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


def connect(settings: Settings, cache: StatusCache | None = None) -> tuple[Writer | None, str]:
    """The controller's writer for the configured cluster (None standalone),
    and the sentence saying which mode that is (`cluster_configuration`)."""
    cfg, mode = cluster_configuration(settings)
    return (Writer(client.ApiClient(cfg), settings.installation_id, cache) if cfg is not None else None), mode


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
        self.api = client.CustomObjectsApi(api_client)
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


def _ns(namespace: str | None) -> dict[str, str]:
    """The log field of a namespaced object (none for a cluster-scoped one)."""
    return {"namespace": namespace} if namespace else {}
