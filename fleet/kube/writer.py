"""The owned-object writer: one `publish` for every custom resource fleet owns.

`Writer.publish(resource, name, namespace, decide)` takes the object as it
last wrote or read it from its cache (`StatusCache`, in Redis: shared by the
replicas), else reads it with a GET, and creates it when missing, labelled
`app.kubernetes.io/managed-by=egress-proxies-operator` and
`fleet.crawl.example.com/installation=<--installation>`. It touches only
objects carrying both (`foreign_owner`): anything else is left alone, logged
once and reported as FOREIGN. Then the feature's pure `decide(current)`
(`fleet.kube.resources`: a `Patch` of the status or a `Skip`) says what to
write; the writer merge-patches the status subresource with the cached or
read resourceVersion in the patch, so two replicas can't interleave (a 409
re-reads, decides again and retries; a 404 drops the entry and recreates).
So an unchanged status costs no request and a changed one one PATCH. Only
objects that passed the ownership check are cached; an entry expires after
`CACHE_TTL`, so an object deleted or edited by hand while its status stays
the same is seen again within that time. Every write names the field manager
`fleet-controller`. `cleanup` deletes this installation's objects not kept.
The kinds are data (`fleet.kube.resources.Resource`); cluster-scoped and
namespaced ones go through the same code. This module knows no feature.

`Writer` also carries the package's other writes and reads, each in its
module: patches of objects users own (`fleet.kube.patches`), plain objects
fleet owns by name (`fleet.kube.objects`: the namespace claims' Leases) and
Secret reads (`fleet.kube.secrets`). Every request goes through
`fleet.kube.connection.request`, so every failure is one of the tree's
errors (`fleet.kube`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any, Protocol

from fleet.kube.connection import FIELD_MANAGER, ApiClient, an_object, api_client, check_scope
from fleet.kube.errors import ApiUnavailable, Conflict, NotFound, WriteConflict, describe
from fleet.kube.objects import Objects
from fleet.kube.patches import UserPatches
from fleet.kube.resources import UNCHANGED, Decide, Resource, Skip
from fleet.kube.secrets import Secrets
from fleet.settings import Settings

log = logging.getLogger("fleet.kube.writer")

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "egress-proxies-operator"
LABEL_INSTALLATION = "fleet.crawl.example.com/installation"  # value: Settings.installation_id
# publish outcomes besides a Skip's reason (UNCHANGED, or the feature's own)
PATCHED, FOREIGN = "patched", "foreign"
CONFLICT_RETRIES = 5
CACHE_TTL = 3600.0  # seconds a cached object is trusted without a GET
# objects per list page in `cleanup`: 300 ProviderHealths of 50 targets listed at once had
# peaked the controller at 148 MiB (issue 24)
CLEANUP_PAGE = 50


class _Unread:
    """publish's caller did not read the cache entry: publish reads it."""


UNREAD = _Unread()


class StatusCache(Protocol):
    """Where the writer keeps each object's last known resourceVersion and
    status as a raw document (`fleet.store.Statuses`)."""

    def get(self, plural: str, namespace: str | None, name: str) -> bytes | str | None: ...

    def put(self, plural: str, namespace: str | None, name: str, resource_version: str, doc: str,
            ttl: float) -> bool: ...

    def drop(self, plural: str, namespace: str | None, name: str) -> None: ...


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


def connect(settings: Settings, cache: StatusCache | None = None) -> tuple[Writer | None, str]:
    """The controller's writer for the configured cluster (None standalone),
    and the sentence saying which mode that is (`cluster_configuration`).
    Its `api_client` serves a `fleet.kube.Watcher` too."""
    api, mode = api_client(settings)
    return (Writer(api, settings.installation_id, cache) if api is not None else None), mode


class Writer(UserPatches, Objects, Secrets):
    """Creates, status-patches and cleans up this installation's custom
    objects of any `Resource`, cluster-scoped or namespaced (and, from its
    bases, the package's other requests)."""

    def __init__(self, api_client: ApiClient, installation: str, cache: StatusCache | None = None,
                 cache_ttl: float = CACHE_TTL) -> None:
        super().__init__(api_client)
        self.installation = installation
        self.cache, self.cache_ttl = cache, cache_ttl
        self._reported: set[tuple[str, str, str]] = set()  # (kind, namespace, name) logged as foreign by this process
        self._lock = threading.Lock()

    def _get(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            return _readable(self.call("get", resource, namespace, name), "get", resource, name, namespace)
        except NotFound:
            return None

    def _create(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        metadata: dict[str, Any] = {"name": name, "labels": labels_for(self.installation)}
        if namespace:
            metadata["namespace"] = namespace
        body = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}
        try:
            out = self.call("create", resource, namespace, name, body, field_manager=FIELD_MANAGER)
        except Conflict:  # another replica, or another installation, was first
            return None
        obj = _readable(out, "create", resource, name, namespace)
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

    def _cached(self, resource: Resource, name: str, namespace: str | None,
                raw: bytes | str | _Unread | None = UNREAD) -> dict[str, Any] | None:
        """The object as last written or read (resourceVersion and status), or
        None. `raw`: the cache entry, when the caller read it already."""
        if isinstance(raw, _Unread):
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

    def publish(self, resource: Resource, name: str, namespace: str | None, decide: Decide,
                cached_entry: bytes | str | _Unread | None = UNREAD) -> str:
        """Create the object if missing, then apply `decide(current)`: patch
        its status, or skip. `current` is the cached object when there is
        one (no request), else the one read. `cached_entry`: the object's
        cache entry as the caller read it from `self.cache` in its own round
        trip (None: absent), so publish does not read it again. Returns
        PATCHED, FOREIGN (not this installation's: nothing written), or the
        Skip's reason."""
        check_scope(resource, namespace)
        cached = self._cached(resource, name, namespace, cached_entry)
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
                patched = self.call("patch", resource, namespace, name, body, status=True, field_manager=FIELD_MANAGER,
                                    _content_type="application/merge-patch+json")
            except (NotFound, Conflict) as exc:  # deleted (recreate) or moved (re-read) under us
                log.debug("object moved or gone, re-reading", extra={"fields": {
                    "name": name, **_ns(namespace), "status": 404 if isinstance(exc, NotFound) else 409}})
                if isinstance(exc, NotFound):
                    self._forget(resource, name, namespace)
                continue
            self.writes += 1
            self._remember(resource, name, namespace, _readable(patched, "patch", resource, name, namespace))
            return PATCHED
        where = f"{namespace}/{name}" if namespace else name
        raise WriteConflict(f"{resource.kind} {where}: still conflicting after {CONFLICT_RETRIES} attempts")

    def cleanup(self, resource: Resource, keep: set[str], namespace: str | None = None, why: str = "") -> list[str]:
        """Delete this installation's objects (in `namespace`, for a
        namespaced kind) whose names are not in `keep`; never unlabelled
        ones nor another installation's. `why` ends the log line."""
        doomed = []
        token = ""
        while True:  # CLEANUP_PAGE objects at a time: the controller never holds every object at once
            page: dict[str, Any] = {"label_selector": selector_for(self.installation), "limit": CLEANUP_PAGE}
            if token:
                page["_continue"] = token
            listed = an_object(self.call("list", resource, namespace, **page), "list", resource, None, namespace)
            items = listed.get("items") or []
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ApiUnavailable(f"list {describe(resource, None, namespace)}: the items are not objects")
            for item in items:
                name = (item.get("metadata") or {}).get("name", "")
                if name not in keep and foreign_owner(item, self.installation) is None:
                    doomed.append(name)
            token = (listed.get("metadata") or {}).get("continue") or ""
            del listed, items
            if not token:
                break
        deleted = []
        for name in doomed:
            with contextlib.suppress(NotFound):  # gone already
                self.call("delete", resource, namespace, name)
            self._forget(resource, name, namespace)
            deleted.append(name)
            log.info(f"deleted {resource.kind}" + (f" {why}" if why else ""), extra={"fields": {"name": name, **_ns(namespace)}})
        return deleted


def _ns(namespace: str | None) -> dict[str, str]:
    """The log field of a namespaced object (none for a cluster-scoped one)."""
    return {"namespace": namespace} if namespace else {}


def _readable(out: Any, verb: str, resource: Resource, name: str, namespace: str | None) -> dict[str, Any]:
    """An answered object publish can use (metadata with a resourceVersion), else ApiUnavailable."""
    obj = an_object(out, verb, resource, name, namespace)
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("resourceVersion"), str) or not isinstance(
            meta.get("labels") or {}, dict):
        raise ApiUnavailable(f"{verb} {describe(resource, name, namespace)}: the answer has no usable metadata")
    return obj
