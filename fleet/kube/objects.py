"""Plain objects of a kind fleet owns by name, read and written whole: the
namespace claims' Leases (`fleet.proxies.claims`).

`read` answers None for a missing object; `create` raises Conflict when it
exists already; `patch` is a merge patch, conditional when the body carries
metadata.resourceVersion (Conflict on 409, NotFound when gone). Every other
failure is one of the tree's errors (`fleet.kube`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.kube.connection import FIELD_MANAGER, Client, an_object
from fleet.kube.errors import NotFound
from fleet.kube.resources import Resource


class Objects(Client):
    """`Writer`'s reads and writes of whole objects."""

    def read(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none (404)."""
        try:
            out = self.call("get", resource, namespace, name)
        except NotFound:
            return None
        return out if isinstance(out, dict) else None

    def create(self, resource: Resource, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create `body` (its metadata names it); Conflict (409) when it exists already."""
        name = str((body.get("metadata") or {}).get("name") or "")
        out = self.call("create", resource, namespace, name, dict(body), field_manager=FIELD_MANAGER)
        obj = an_object(out, "create", resource, name, namespace)
        self.writes += 1
        return obj

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the object (a metadata.resourceVersion in `body` makes
        it conditional: Conflict on 409); NotFound when it is gone."""
        return self.merge_patch(resource, namespace, name, dict(body))
