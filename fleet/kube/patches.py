"""What a controller owns on someone else's object (a Proxy users write):
its status and its finalizer, each patched optimistically, with the
resourceVersion it read in the patch.

`patch_status` and `patch_finalizers` answer the object as written or raise
the tree's errors (`fleet.kube`): Conflict (409: it moved, read again),
NotFound (404: gone), and the rest as for any request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.kube.connection import Client
from fleet.kube.resources import Resource


class UserPatches(Client):
    """The merge patches of `Writer` on objects it does not own."""

    def patch_status(self, resource: Resource, namespace: str | None, name: str, resource_version: str,
                     status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource (RFC 7386: a None value removes
        a field, a list replaces the list), only if the object is still at
        `resource_version`. Returns the object as written; Conflict (409: it
        moved, read again), NotFound (404: gone)."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        return self.merge_patch(resource, namespace, name, body, status=True)

    def patch_finalizers(self, resource: Resource, namespace: str | None, name: str, resource_version: str,
                         finalizers: Sequence[str]) -> dict[str, Any]:
        """Set metadata.finalizers to `finalizers` (the whole list: add or
        remove ours, keep the others as read), only if the object is still at
        `resource_version`. Returns the object as written (an object being
        deleted whose last finalizer goes is deleted: the answer is its last
        state); Conflict (409), NotFound (404)."""
        body = {"metadata": {"resourceVersion": resource_version, "finalizers": list(finalizers)}}
        return self.merge_patch(resource, namespace, name, body)
