"""Provider ids (pure), self-contained, parsed strictly:

- `regions/<region>/instances/<i-…>`: an instance with no group of fleet's;
- `regions/<region>/instances/<i-…>/security-groups/<sg-…>`: an instance and
  the security group fleet made for it (delete removes both);
- `regions/<region>/security-groups/<sg-…>`: a group fleet made whose
  instance is gone (list_by_tag reports it so GC collects it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
_INSTANCE = r"i-[0-9a-f]{8,17}"
_GROUP = r"sg-[0-9a-f]{8,17}"
_ID = re.compile(
    rf"^regions/(?P<region>{_REGION})/(?:instances/(?P<instance>{_INSTANCE})(?:/security-groups/(?P<ig>{_GROUP}))?"
    rf"|security-groups/(?P<group>{_GROUP}))$"
)
SHAPE = "regions/<region>/instances/<i-…>[/security-groups/<sg-…>] or regions/<region>/security-groups/<sg-…>"


@dataclass(frozen=True)
class Ref:
    region: str
    instance: str = ""  # "" for a leftover group
    group: str = ""  # fleet's group, "" when none

    def __str__(self) -> str:
        if not self.instance:
            return f"regions/{self.region}/security-groups/{self.group}"
        tail = f"/security-groups/{self.group}" if self.group else ""
        return f"regions/{self.region}/instances/{self.instance}{tail}"


def parse_id(provider_id: str) -> Ref | None:
    m = _ID.match(provider_id)
    if m is None:
        return None
    if m["instance"]:
        return Ref(m["region"], m["instance"], m["ig"] or "")
    return Ref(m["region"], "", m["group"])
