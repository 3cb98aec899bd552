"""Which Proxy placements an upstream provider can satisfy (pure; the
registry's placement hook, judged on the controller before any call).

A list member has no placement: any field set is refused (an entry is where
it is). A vendor member's placement fills the username template through
`placementFields`: a field set whose placeholder the template lacks is
refused (the vendor would ignore it, so the Proxy's promise would be false),
and so is a placeholder the template holds that the placement leaves empty
(the username would be malformed). `values` is the same mapping for create.
"""

from __future__ import annotations

from providers.base import Placement
from providers.upstream.config import PLACEMENT_PLACEHOLDERS, PLACEMENT_VALUE, UpstreamConfig, template_placeholders

ATTRS = {"region": "region", "zone": "zone", "machineType": "machine_type", "image": "image"}


def values(block: UpstreamConfig, placement: Placement) -> tuple[tuple[str, str], ...]:
    """(placeholder, value) for each placement placeholder, in PLACEMENT_PLACEHOLDERS order."""
    got = {ph: getattr(placement, ATTRS[field]) for field, ph in block.placementFields.items()}
    return tuple((ph, got[ph]) for ph in PLACEMENT_PLACEHOLDERS if got.get(ph))


def placement_problem(block: UpstreamConfig, placement: Placement) -> str | None:
    for key, attr in ATTRS.items():
        value = getattr(placement, attr)
        if not value:
            continue
        if block.mode == "list":
            return (f"placement.{key} {value[:80]!r}: an upstream list member has no placement "
                    "(each entry is where it is); leave placement empty")
        placeholder = block.placementFields.get(key)
        if placeholder is None:
            mapped = ", ".join(sorted(block.placementFields)) or "none"
            return f"placement.{key} {value[:80]!r}: this upstream vendor provider maps only {mapped} (placementFields)"
        if placeholder not in template_placeholders(block.usernameTemplate):
            return (f"placement.{key} {value[:80]!r} fills {{{placeholder}}}, which usernameTemplate lacks: "
                    "the vendor would not place the exit there")
        if not PLACEMENT_VALUE.match(value):
            return f"placement.{key} {value[:80]!r}: must be letters, digits, '_', '.', '+' or '-' (at most 63)"
    if block.mode == "vendor":
        have = dict(values(block, placement))
        by_placeholder = {ph: f for f, ph in block.placementFields.items()}
        for ph in template_placeholders(block.usernameTemplate):
            if ph in PLACEMENT_PLACEHOLDERS and ph not in have:
                field = by_placeholder.get(ph)
                where = f"placement.{field}" if field else f"a placement field (placementFields maps none to {{{ph}}})"
                return f"usernameTemplate holds {{{ph}}}: give {where}"
    return None
