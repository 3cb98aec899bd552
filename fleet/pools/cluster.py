"""Cluster mode: where ProxyPools and their members live is the API server
(`InCluster`, the `Where` of `fleet.pools.controller.PoolController`).

Two lists per namespace a pass (pools, Proxies). Writes go through
`fleet.kube.Writer`: the create and a DELETE of Proxies, the pool's status
with its resourceVersion, spec.replicas by a merge patch (the path the scale
subresource names). Members are owned by their pool (ownerReferences), so the
API server's garbage collector deletes them with it and their finalizer
deletes their instance; without one (the fake API of the tests) the
controller's orphan rule does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet import kube
from fleet.pools.controller import Counters, Listing, NameTaken, PoolController
from fleet.pools.model import Pool

__all__ = ["Counters", "InCluster", "PoolController"]


class InCluster:
    def __init__(self, writer: kube.Writer) -> None:
        self.writer = writer

    def list(self, namespace: str | None) -> Listing:
        return Listing(_items(kube.list_page(self.writer.api_client, kube.PROXY_POOL, namespace=namespace)),
                       _items(kube.list_page(self.writer.api_client, kube.PROXY, namespace=namespace)))

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.writer.create(kube.PROXY, namespace, body)
        except kube.Conflict:
            raise NameTaken(str((body.get("metadata") or {}).get("name"))) from None

    def delete(self, namespace: str, name: str) -> bool:
        try:
            self.writer.call("delete", kube.PROXY, namespace, name)
        except kube.NotFound:
            return False
        return True

    def scale(self, pool: Pool, replicas: int) -> str:
        written = self.writer.patch(kube.PROXY_POOL, pool.namespace, pool.name,
                                    {"metadata": {"resourceVersion": pool.resource_version}, "spec": {"replicas": replicas}})
        meta = written.get("metadata") if isinstance(written, dict) else None
        return str((meta or {}).get("resourceVersion") or pool.resource_version)

    def write_status(self, pool: Pool, resource_version: str, status: Mapping[str, Any]) -> None:
        self.writer.patch_status(kube.PROXY_POOL, pool.namespace, pool.name, resource_version, status)


def _items(listed: dict[str, Any]) -> list[dict[str, Any]]:
    items = listed.get("items") or []
    if not isinstance(items, list):
        raise kube.ApiUnavailable("list: the items are not a list")
    return [i for i in items if isinstance(i, dict)]
