"""Which placements the hetzner provider can never satisfy (pure; no SDK).

`zone` is the location (fsn1, nbg1, hel1, ash, hil, sin), else the
config's `location`; `machineType` the server type (cx22, cpx11), else
`serverType`; `image` an image name or id, else `image`. All three are
needed in the end. `region` (a network zone such as eu-central) is ignored.
"""

from __future__ import annotations

import re

from providers.base import Placement
from providers.hetzner.config import IMAGE, HetznerConfig

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def resolved(block: HetznerConfig, p: Placement) -> tuple[str, str, str]:
    """(location, server type, image), the config's defaults filled in."""
    return p.zone or block.location or "", p.machine_type or block.serverType or "", p.image or block.image or ""


def placement_problem(block: HetznerConfig, placement: Placement) -> str | None:
    location, server_type, image = resolved(block, placement)
    for field, default, value in (("zone", "location", location), ("machineType", "serverType", server_type),
                                  ("image", "image", image)):
        if not value:
            return f"placement.{field} is required by hetzner unless the provider's config sets {default} (got '')"
    if not _NAME.match(location):
        return f"placement.zone must be a Hetzner location such as fsn1 (got {location!r})"
    if block.locations and location not in block.locations:
        return f"placement.zone {location!r} is not one of this provider's locations: {', '.join(block.locations)}"
    if not _NAME.match(server_type):
        return f"placement.machineType must be a Hetzner server type such as cx22 (got {server_type!r})"
    if not IMAGE.match(image):
        return f"placement.image must be an image name such as ubuntu-24.04 or an image id (got {image!r})"
    return None
