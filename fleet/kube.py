"""The controller's Kubernetes writer: one ProviderHealth per provider.

Reads are uncached GETs. An object is created when missing, labelled
`app.kubernetes.io/managed-by=egress-proxies-operator` and
`fleet.crawl.example.com/installation=<--installation>`; the writer touches
only objects carrying both (`foreign_owner`): anything else is left alone,
logged once and reported as FOREIGN. Its status is merge-patched only when
it changed, with the read resourceVersion in the patch so two replicas can't
interleave (a 409 re-reads and retries). A result older than the object's
lastCheckTime is dropped rather than written over a newer one. Every write
names the field manager `fleet-controller`. A 401/403 (RBAC) or a 404 on the
collection (CRD missing) becomes a ClusterAccessError naming the verb and
the resource.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleet.health.limits import LIMITS
from fleet.health.results import rfc3339
from fleet.health.status import merge_patch
from fleet.settings import Settings
from providers.kubernetes.client import default_kubeconfig, in_cluster, load_configuration

log = logging.getLogger("fleet.kube")

GROUP = "crawl.example.com"
VERSION = "v1alpha1"
PLURAL = "providerhealths"
KIND = "ProviderHealth"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "egress-proxies-operator"
LABEL_INSTALLATION = "fleet.crawl.example.com/installation"  # value: Settings.installation_id
FIELD_MANAGER = "fleet-controller"
RBAC_ROLE = "the ClusterRole fleet:<installation>:controller from `fleet render`"
# publish outcomes
PATCHED, UNCHANGED, STALE, FOREIGN = "patched", "unchanged", "stale", "foreign"
CONFLICT_RETRIES = 5
REQUEST_TIMEOUT = 10.0


class WriteConflict(Exception):
    """The object kept changing under us for every retry."""


class ClusterAccessError(Exception):
    """The API server refused a verb on a resource for a reason an admin
    fixes (credentials, RBAC, a missing CRD); the message says which."""

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


def access_error(status: int, verb: str, resource: str, name: str | None, server_message: str) -> ClusterAccessError | None:
    """The admin-facing error for a refused request, or None when the caller
    handles the status itself. `resource` is as RBAC names it
    (`providerhealths`, `providerhealths/status`); 404 counts as a missing
    CRD only on the collection (create, list): on a named object it means
    the object is gone."""
    plural, _, sub = resource.partition("/")
    what = f"{plural}.{GROUP}" + (f"/{sub}" if sub else "") + (f" {name!r}" if name else "")
    said = f" (API server: {server_message})" if server_message else ""
    if status == 401:
        msg = f"cannot {verb} {what}: the API server rejected the controller's credentials (401){said}"
    elif status == 403:
        msg = (
            f"cannot {verb} {what}: forbidden (403). The controller's ServiceAccount needs verb {verb!r} on resource "
            f"{resource!r} in API group {GROUP!r} ({RBAC_ROLE}){said}"
        )
    elif status == 404 and verb in ("create", "list"):
        msg = (
            f"cannot {verb} {what}: the API server does not serve {PLURAL}.{GROUP}/{VERSION} (404). Is the {KIND} CRD "
            f"installed? kubectl apply -k deploy{said}"
        )
    else:
        return None
    return ClusterAccessError(msg, verb, resource, status)


def _server_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message") or "")
    except (ValueError, AttributeError):
        return str(exc.reason or "")


def _refused(exc: ApiException, verb: str, resource: str = PLURAL, name: str | None = None) -> Exception:
    return access_error(exc.status or 0, verb, resource, name, _server_message(exc)) or exc


def cluster_configuration(settings: Settings) -> tuple[client.Configuration | None, str]:
    """The cluster to write to, and a sentence saying which mode that is.

    In-cluster service account, else an explicit --kubeconfig, $KUBECONFIG
    or ~/.kube/config; with none of them: standalone on Redis alone.
    """
    if settings.kubeconfig or settings.kube_context:
        cfg = load_configuration(settings.kubeconfig, settings.kube_context)
        return cfg, f"cluster mode: writing ProviderHealth objects to {cfg.host} (kubeconfig {settings.kubeconfig or default_kubeconfig()})"
    if in_cluster():
        cfg = load_configuration()
        return cfg, f"cluster mode: writing ProviderHealth objects to {cfg.host} (in-cluster service account)"
    path = default_kubeconfig()
    if all(os.path.exists(p) for p in path.split(os.pathsep) if p):
        cfg = load_configuration()
        return cfg, f"cluster mode: writing ProviderHealth objects to {cfg.host} (kubeconfig {path})"
    return None, "standalone mode: no cluster configured, results are kept in Redis only (fleet get ph)"


def connect(settings: Settings) -> tuple[HealthWriter | None, str]:
    """The controller's writer for the configured cluster (None standalone),
    and the sentence saying which mode that is (`cluster_configuration`)."""
    cfg, mode = cluster_configuration(settings)
    return (HealthWriter(client.ApiClient(cfg), settings.installation_id) if cfg is not None else None), mode


class HealthWriter:
    def __init__(self, api_client: client.ApiClient, installation: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.installation = installation
        self.writes = 0  # creates + patches, for the benchmark and tests
        self._reported: set[str] = set()  # foreign objects already logged by this process
        self._lock = threading.Lock()

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _refused(exc, "get", name=name) from exc

    def _create(self, name: str) -> dict[str, Any] | None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name, "labels": labels_for(self.installation)},
        }
        try:
            obj = self.api.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, body, field_manager=FIELD_MANAGER, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409:  # another replica, or another installation, was first
                return None
            raise _refused(exc, "create", name=name) from exc
        self.writes += 1
        log.info("created ProviderHealth", extra={"fields": {"name": name, "installation": self.installation}})
        return obj

    def _report_foreign(self, name: str, owner: str) -> None:
        with self._lock:
            first = name not in self._reported
            self._reported.add(name)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            f"{KIND} not ours: left alone",
            extra={"fields": {"name": name, "owner": owner, "installation": self.installation}},
        )

    def publish(self, name: str, checked_at: float | None, build: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
        """Create if missing, then patch the status `build(prev)` when it
        changed. Returns what happened: PATCHED, UNCHANGED, STALE, or FOREIGN
        (the object is not this installation's: nothing written)."""
        for _ in range(CONFLICT_RETRIES):
            obj = self._get(name) or self._create(name)
            if obj is None:
                continue
            owner = foreign_owner(obj, self.installation)
            if owner is not None:
                self._report_foreign(name, owner)
                return FOREIGN
            prev = obj.get("status") or {}
            last = prev.get("lastCheckTime")
            # a lastCheckTime past now + skew (a result from the future written
            # before messages were validated) does not block newer writes
            if checked_at is not None and last and rfc3339(checked_at) < last <= rfc3339(time.time() + LIMITS.clock_skew):
                return STALE
            new = build(prev)
            if new == prev:
                return UNCHANGED
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": merge_patch(prev, new)}
            try:
                self.api.patch_cluster_custom_object_status(
                    GROUP, VERSION, PLURAL, name, body, field_manager=FIELD_MANAGER,
                    _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT,
                )
            except ApiException as exc:
                if exc.status in (404, 409):  # deleted (recreate) or moved (re-read) under us
                    log.debug("object moved or gone, re-reading", extra={"fields": {"name": name, "status": exc.status}})
                    continue
                raise _refused(exc, "patch", f"{PLURAL}/status", name) from exc
            self.writes += 1
            return PATCHED
        raise WriteConflict(f"{KIND} {name}: still conflicting after {CONFLICT_RETRIES} attempts")

    def cleanup(self, keep: set[str]) -> list[str]:
        """Delete this installation's objects of providers not in `keep`;
        never unlabelled ones nor another installation's."""
        try:
            listed = self.api.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, label_selector=selector_for(self.installation), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            raise _refused(exc, "list") from exc
        deleted = []
        for item in listed.get("items") or ():
            name = (item.get("metadata") or {}).get("name", "")
            if name in keep or foreign_owner(item, self.installation) is not None:
                continue
            try:
                self.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as exc:
                if exc.status != 404:
                    raise _refused(exc, "delete", name=name) from exc
            deleted.append(name)
            log.info("deleted ProviderHealth of an unconfigured provider", extra={"fields": {"name": name}})
        return deleted
