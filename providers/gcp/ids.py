"""Provider ids: `zones/<zone>/instances/<name>`, self-contained (the
project comes from the config), parsed strictly."""

from __future__ import annotations

import re

# GCE names: lowercase RFC 1035 labels; zones look like europe-west1-b.
_LABEL = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_ID = re.compile(rf"^zones/(?P<zone>{_LABEL})/instances/(?P<name>{_LABEL})$")

SHAPE = "zones/<zone>/instances/<name>"


def format_id(zone: str, name: str) -> str:
    return f"zones/{zone}/instances/{name}"


def parse_id(provider_id: str) -> tuple[str, str] | None:
    """(zone, name), or None when the id is malformed."""
    m = _ID.match(provider_id)
    if m is None:
        return None
    return m["zone"], m["name"]


def last_segment(url: str) -> str:
    """`https://…/zones/europe-west1-b` → `europe-west1-b`."""
    return url.rstrip("/").rsplit("/", 1)[-1]
