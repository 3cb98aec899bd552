"""Everything fleet says to the Kubernetes API server, by job:

    errors      the error tree (below) and `translate`, from an answer to the tree
    connection  which cluster (`cluster_configuration`, `api_client`) and `request`,
                the one translation boundary every custom-object request goes through
    watch       `list_page`, `WatchStream` and the list+watch loop `Watcher`
    writer      `Writer`: publish/cleanup of the objects fleet owns, with its cache
                (`StatusCache`), the ownership labels, `connect`
    patches     `Writer.patch_status` / `patch_finalizers` on objects users own (Proxy)
    objects     `Writer.read` / `create` / `patch` of whole objects (the claims' Leases)
    secrets     `Writer.read_secret_key`: one key of a Secret, bounded, never logged;
                `create_secret`: create one unless it exists (`fleet secrets ensure`)
    resources   the kinds as data (`Resource`) and a feature's `Patch` / `Skip`
    crd         a CRD's schema as a table (`Field`, `Crd`), from which
                deploy/crd/generate.py writes the CRDs (imported as
                `fleet.kube.crd`, not re-exported)

Call sites import the package (`from fleet import kube; kube.Writer`): every
name but `crd`'s is re-exported here. `resources` and `errors` import neither the SDK
nor the rest of fleet, so pure feature modules may use them; the other
names load on first use (`fleet.kube._lazy`). The kubernetes SDK is
imported in this package only (and in providers.kubernetes).

Every request raises only this tree (never an `ApiException` or a urllib3
error), so `except kube.KubeError` catches every failure:

    KubeError                   a request failed, or its answer cannot be used
    ├── ClusterAccessError      401/403, or 404 on a collection (CRD missing): an admin
    │                           fixes it; .verb, .resource (as RBAC names it), .status
    ├── ApiUnavailable          5xx, 429, a refused/reset/cut connection, a timeout, an
    │                           answer of the wrong shape: try again later
    ├── Conflict                409: the object moved since the resourceVersion given
    ├── NotFound                404 on a named object: it is gone
    ├── Expired                 410: the resourceVersion or continue token is too old
    ├── Rejected                400/415/422: the API server refused the content
    ├── SecretError             a Secret key that cannot be used (missing, too large, not UTF-8)
    └── WriteConflict           publish: still conflicting after CONFLICT_RETRIES attempts

A `ValueError` is no failure of a request but a caller's bug (a namespace
given for a cluster-scoped kind, or none for a namespaced one).

Infrastructure: knows no feature.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fleet.kube.errors import ApiUnavailable as ApiUnavailable
from fleet.kube.errors import ClusterAccessError as ClusterAccessError
from fleet.kube.errors import Conflict as Conflict
from fleet.kube.errors import Expired as Expired
from fleet.kube.errors import KubeError as KubeError
from fleet.kube.errors import NotFound as NotFound
from fleet.kube.errors import Rejected as Rejected
from fleet.kube.errors import SecretError as SecretError
from fleet.kube.errors import WriteConflict as WriteConflict
from fleet.kube.errors import access_error as access_error
from fleet.kube.errors import translate as translate
from fleet.kube.resources import KNOWN as KNOWN
from fleet.kube.resources import PROVIDER_HEALTH as PROVIDER_HEALTH
from fleet.kube.resources import PROXY as PROXY
from fleet.kube.resources import PROXY_POOL as PROXY_POOL
from fleet.kube.resources import UNCHANGED as UNCHANGED
from fleet.kube.resources import Decide as Decide
from fleet.kube.resources import Patch as Patch
from fleet.kube.resources import Resource as Resource
from fleet.kube.resources import Skip as Skip

if TYPE_CHECKING:
    from fleet.kube._lazy import *  # noqa: F403


if not TYPE_CHECKING:  # mypy sees the names above, and flags any other

    def __getattr__(name: str) -> Any:
        """The SDK-loading names (`fleet.kube._lazy`), imported on first use."""
        if name.startswith("_"):
            raise AttributeError(f"module 'fleet.kube' has no attribute {name!r}")
        _lazy = importlib.import_module("fleet.kube._lazy")
        if hasattr(_lazy, name):
            return getattr(_lazy, name)
        if name in globals():  # a submodule, bound here by importing _lazy
            return globals()[name]
        raise AttributeError(f"module 'fleet.kube' has no attribute {name!r}")
