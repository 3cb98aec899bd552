"""The controller's Kubernetes writer: one ProviderHealth per provider.

Reads are uncached GETs. An object is created when missing, labelled
`app.kubernetes.io/managed-by=egress-proxies-operator`; its status is merge-
patched only when it changed, with the read resourceVersion in the patch so
two replicas can't interleave (a 409 re-reads and retries). A result older
than the object's lastCheckTime is dropped rather than written over a newer one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleet.results import rfc3339
from fleet.settings import Settings
from fleet.status import merge_patch
from providers.kubernetes.client import default_kubeconfig, in_cluster, load_configuration

log = logging.getLogger("fleet.kube")

GROUP = "crawl.example.com"
VERSION = "v1alpha1"
PLURAL = "providerhealths"
KIND = "ProviderHealth"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "egress-proxies-operator"
CONFLICT_RETRIES = 5
REQUEST_TIMEOUT = 10.0


class WriteConflict(Exception):
    """The object kept changing under us for every retry."""


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


class HealthWriter:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.writes = 0  # creates + patches, for the benchmark and tests

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _create(self, name: str) -> dict[str, Any] | None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        }
        try:
            obj = self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:  # another replica was first
                return None
            raise
        self.writes += 1
        log.info("created ProviderHealth", extra={"fields": {"name": name}})
        return obj

    def publish(self, name: str, checked_at: float | None, build: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
        """Create if missing, then patch the status `build(prev)` when it
        changed. Returns what happened: patched, unchanged or stale."""
        for _ in range(CONFLICT_RETRIES):
            obj = self._get(name) or self._create(name)
            if obj is None:
                continue
            prev = obj.get("status") or {}
            last = prev.get("lastCheckTime")
            if checked_at is not None and last and last > rfc3339(checked_at):
                return "stale"
            new = build(prev)
            if new == prev:
                return "unchanged"
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": merge_patch(prev, new)}
            try:
                self.api.patch_cluster_custom_object_status(
                    GROUP, VERSION, PLURAL, name, body,
                    _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT,
                )
            except ApiException as exc:
                if exc.status == 409:
                    log.debug("status conflict, re-reading", extra={"fields": {"name": name}})
                    continue
                raise
            self.writes += 1
            return "patched"
        raise WriteConflict(f"ProviderHealth {name}: still conflicting after {CONFLICT_RETRIES} attempts")

    def cleanup(self, keep: set[str]) -> list[str]:
        """Delete our objects of providers not in `keep`; never unlabelled ones."""
        listed = self.api.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}", _request_timeout=REQUEST_TIMEOUT
        )
        deleted = []
        for item in listed.get("items") or ():
            meta = item.get("metadata") or {}
            name = meta.get("name", "")
            if name in keep or (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
                continue
            try:
                self.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            deleted.append(name)
            log.info("deleted ProviderHealth of an unconfigured provider", extra={"fields": {"name": name}})
        return deleted
