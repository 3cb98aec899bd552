"""What `fleet get proxies` (`fleet get px`) prints: table rows shaped like
`kubectl get proxies`, or the objects as `kubectl get -o json|yaml` would
show them. Pure: Proxies in, rows or text out.

The columns are the CRD's printer columns, with NAMESPACE first when listing
every namespace (kubectl's `-A`); `-o wide` adds those kubectl shows with
`-o wide` too (MEMBER: `own`, or `upstream/http`, `upstream/socks5` for a
bought proxy), then what the object knows besides: the placement's REGION
and ZONE, the POOL it belongs to, the EGRESS IP the prober saw and the
provider's INSTANCE id (`<none>` where unset, as kubectl's wide columns).
`-o name` prints `proxy.crawl.example.com/NAME`, kubectl's form, with the namespace in front of the name
(`proxy.crawl.example.com/NAMESPACE/NAME`) when listing every namespace,
as the table adds its NAMESPACE column then: each line names one object. Cells follow kubectl: PORT is
`.status.port` (blank until the controller has written one, as a printer
column on a missing field is), READY the Ready condition's status, AGE
kubectl's own rounding (`45s`, `3m12s`, `5h4m`, `2d3h`, `<unknown>` without a
creation time). Rows come sorted by namespace and name, as the API lists
them. The text layout of the table is the CLI's (fleet.cli cannot be
imported from here).

Objects are printed Kubernetes-shaped, in a `List`, keys sorted, with one
deliberate difference: inline cloud-init is replaced by `<redacted: N
bytes>`, and so is kubectl's `last-applied-configuration` annotation (it
holds the whole applied manifest, inline text included). fleet's output gets
pasted into tickets and chats; `kubectl get` on the cluster still shows the
real object. A redacted object is for reading, not for applying back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from fleet.durations import age
from fleet.proxies import model
from fleet.proxies.model import LAST_APPLIED, READY, Proxy
from fleet.proxies.schema import CRD

# The CRD's printer columns as kubectl heads them; `-o wide` adds those of a priority above 0, then its own.
COLUMNS = ("NAME", *(c.name.upper() for c in CRD.columns if not c.priority))
WIDE_COLUMNS = (*(c.name.upper() for c in CRD.columns if c.priority), "REGION", "ZONE", "POOL", "EGRESS IP", "INSTANCE")
NAMESPACE_COLUMN = "NAMESPACE"
AGE_COLUMN = COLUMNS.index("AGE")  # of a row without NAMESPACE
NONE = "<none>"
NAME_PREFIX = f"{model.KIND.lower()}.{model.API_VERSION.split('/')[0]}"  # proxy.crawl.example.com


def columns(all_namespaces: bool = False, wide: bool = False) -> tuple[str, ...]:
    """The header row: COLUMNS (and WIDE_COLUMNS), after NAMESPACE when listing all namespaces."""
    head = (*COLUMNS, *WIDE_COLUMNS) if wide else COLUMNS
    return (NAMESPACE_COLUMN, *head) if all_namespaces else head


def row(p: Proxy, now: float, all_namespaces: bool = False, wide: bool = False) -> list[str]:
    """The Proxy's cells in `columns(all_namespaces, wide)` order; `now` is a Unix time, for AGE."""
    ready = p.status.condition(READY)
    cells = [
        p.name,
        p.spec.provider,
        p.status.phase,
        p.status.ip,
        str(p.status.port) if p.status.port else "",
        ready.status if ready is not None else "",
        age(p.created_at, now),
    ]
    if wide:
        pl = p.spec.placement
        cells += [p.status.member or NONE, pl.region or NONE, pl.zone or NONE, p.pool or NONE,
                  p.status.egress_ip or NONE, p.status.provider_id or NONE]
    return [p.namespace, *cells] if all_namespaces else cells


def rows(proxies: Sequence[Proxy], now: float, all_namespaces: bool = False, wide: bool = False) -> list[list[str]]:
    """One row of cells per Proxy, in `columns(all_namespaces, wide)` order,
    sorted by namespace then name; `now` is a Unix time, for AGE."""
    return [row(p, now, all_namespaces, wide) for p in ordered(proxies)]


def ordered(proxies: Sequence[Proxy]) -> list[Proxy]:
    """By namespace, then name: as the API lists them."""
    return sorted(proxies, key=lambda p: (p.namespace, p.name))


def name(p: Proxy, all_namespaces: bool = False) -> str:
    """Its `-o name` line: `proxy.crawl.example.com/NAME`, `.../NAMESPACE/NAME` when listing all namespaces."""
    return f"{NAME_PREFIX}/{p.namespace}/{p.name}" if all_namespaces else f"{NAME_PREFIX}/{p.name}"


REDACTED = re.compile(r"<redacted: [0-9]+ bytes>")


def redacted(text: str) -> str:
    """`<redacted: N bytes>`; a value already redacted (standalone stores the
    annotation so) is kept as it is."""
    return text if REDACTED.fullmatch(text) else f"<redacted: {len(text.encode('utf-8'))} bytes>"


def to_object(proxy: Proxy) -> dict[str, Any]:
    """The Proxy as a Kubernetes object (`model.to_object`), inline
    cloud-init and kubectl's last-applied annotation redacted."""
    obj = model.to_object(proxy, redact=True)
    annotations = obj["metadata"].get("annotations")
    if annotations and LAST_APPLIED in annotations:
        annotations[LAST_APPLIED] = redacted(annotations[LAST_APPLIED])
    return obj


def as_list(proxies: Sequence[Proxy]) -> dict[str, Any]:
    """The objects in a `List`, as `kubectl get -o yaml` wraps several."""
    items = [to_object(p) for p in ordered(proxies)]
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def as_json(proxies: Sequence[Proxy]) -> str:
    """`kubectl get proxies -o json`'s shape (4-space indent, sorted keys)."""
    return json.dumps(as_list(proxies), indent=4, sort_keys=True, ensure_ascii=False)


def as_yaml(proxies: Sequence[Proxy]) -> str:
    """`kubectl get proxies -o yaml`'s shape (sorted keys)."""
    return yaml.safe_dump(as_list(proxies), sort_keys=True, default_flow_style=False, allow_unicode=True)
