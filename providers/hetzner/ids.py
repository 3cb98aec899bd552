"""Provider ids (pure): `servers/<id>`, `servers/<id>/firewalls/<id>` (the
server and the firewall fleet made for it), `firewalls/<id>` (a firewall
fleet made whose server is gone: listed for GC)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ID = re.compile(r"^(?:servers/(?P<server>[1-9]\d{0,17})(?:/firewalls/(?P<sf>[1-9]\d{0,17}))?|firewalls/(?P<fw>[1-9]\d{0,17}))$")
SHAPE = "servers/<id>[/firewalls/<id>] or firewalls/<id>"


@dataclass(frozen=True)
class Ref:
    server: int = 0  # 0 for a leftover firewall
    firewall: int = 0  # fleet's firewall, 0 when none

    def __str__(self) -> str:
        if not self.server:
            return f"firewalls/{self.firewall}"
        return f"servers/{self.server}" + (f"/firewalls/{self.firewall}" if self.firewall else "")


def parse_id(provider_id: str) -> Ref | None:
    m = _ID.match(provider_id)
    if m is None:
        return None
    if m["server"]:
        return Ref(int(m["server"]), int(m["sf"] or 0))
    return Ref(0, int(m["fw"]))
