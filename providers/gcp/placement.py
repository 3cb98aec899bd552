"""Which Proxy placements the gcp provider can never satisfy (pure).

`zone`, `machineType` and `image` are required; the zone must look like a
zone (it becomes part of the provider id), the machine type and image may not
contain whitespace, and a machine type given as a URL must be in the same
zone. With the config's `zones` / `machineTypes` allow-lists set, the value
must be on them (a machine type URL is judged by its last segment). `region`
is ignored. `GcpProvider.create` applies this before any API call, and the
controller applies the same function (registered in `providers.registry`).
Imports no SDK: only the config.
"""

from __future__ import annotations

import re

from providers.base import Placement
from providers.gcp.config import ZONE, GcpConfig

_MAX_ZONE = 63  # an RFC 1035 label, as providers.gcp.ids parses it
_URL_ZONE = re.compile(r"(?:^|/)zones/([^/]+)/machineTypes/")


def placement_problem(block: GcpConfig, placement: Placement) -> str | None:
    """Why no instance of this provider could ever have `placement` (naming
    the field and the value), or None."""
    p = placement
    for field, value in (("zone", p.zone), ("machineType", p.machine_type), ("image", p.image)):
        if not value.strip():
            return f"placement.{field} is required by gcp (got {value!r})"
    if not ZONE.match(p.zone) or len(p.zone) > _MAX_ZONE:
        return f"placement.zone must be a GCE zone such as europe-west1-b (got {p.zone!r})"
    for field, value in (("machineType", p.machine_type), ("image", p.image)):
        if any(c.isspace() for c in value):
            return f"placement.{field} must not contain whitespace (got {value!r})"
    if block.zones and p.zone not in block.zones:
        return f"placement.zone {p.zone!r} is not one of this provider's zones: {', '.join(block.zones)}"
    url_zone = _URL_ZONE.search(p.machine_type)
    if url_zone and url_zone[1] != p.zone:
        return (
            f"placement.machineType {p.machine_type!r} is in zone {url_zone[1]!r}, "
            f"not in placement.zone {p.zone!r}"
        )
    name = p.machine_type.rstrip("/").rsplit("/", 1)[-1]
    if block.machineTypes and name not in block.machineTypes:
        return f"placement.machineType {p.machine_type!r} is not in machineTypes: {', '.join(block.machineTypes)}"
    return None
