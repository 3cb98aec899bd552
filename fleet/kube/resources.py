"""The custom resources fleet writes, as data, and what a feature may decide
to do to one.

A `Resource` names a kind the way the API server serves it (group, version,
plural, kind, scope); `tests/fleet/test_resources.py` pins every one against
its CRD in `deploy/crd/`, so a kind cannot be added here without its CRD.
`fleet.kube.Writer.publish` applies a feature's pure `decide(current)`,
which answers with a `Patch` of the status subresource or a `Skip`.

Infrastructure: knows no feature and imports nothing of fleet (nor the
kubernetes SDK), so pure feature modules can return these values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# what publish returned when decide skipped because the status is already right
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Resource:
    """One custom resource kind, as its CRD declares it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """`plural.group`: the CRD's name, and how errors name the resource."""
        return f"{self.plural}.{self.group}"


@dataclass(frozen=True)
class Patch:
    """Merge-patch the object's status subresource with `status` (RFC 7386)."""

    status: Mapping[str, Any]


@dataclass(frozen=True)
class Skip:
    """Write nothing; `reason` is what `publish` returns (e.g. UNCHANGED)."""

    reason: str


# A feature's decision on the current object (as read: metadata and status).
Decide = Callable[[dict[str, Any]], Patch | Skip]

PROVIDER_HEALTH = Resource("crawl.example.com", "v1alpha1", "providerhealths", "ProviderHealth", namespaced=False, short_names=("ph",))
PROXY = Resource("crawl.example.com", "v1alpha1", "proxies", "Proxy", namespaced=True, short_names=("px",))
PROXY_POOL = Resource("crawl.example.com", "v1alpha1", "proxypools", "ProxyPool", namespaced=True, short_names=("pxp",))

# Every kind fleet reads or writes; each has its CRD in deploy/crd/.
KNOWN: tuple[Resource, ...] = (PROVIDER_HEALTH, PROXY, PROXY_POOL)
