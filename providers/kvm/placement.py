"""Which host, machine type and image a Proxy's placement names (pure).

`zone` names a host (`hosts[].name`), `machineType` and `image` name
catalogue entries (`machineTypes`, `images`); each may be left empty when
there is exactly one to choose from. `region` is ignored. `choose` is what
`KvmProvider.create` uses before it touches a host; `placement_problem` is
the same rule for the controller (registered in `providers.registry`), so
the two can't disagree. Imports no SDK: only the config.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from providers.base import Placement
from providers.kvm.config import KvmConfig


@dataclass(frozen=True)
class Choice:
    host: str
    machine_type: str
    image: str


def _pick(field: str, value: str, where: str, choices: Collection[str]) -> tuple[str | None, str]:
    """(the entry `value` names, or the only one when it is empty, "") or
    (None, why not)."""
    have = ", ".join(choices) or "none"
    if value:
        if value in choices:
            return value, ""
        return None, f"placement.{field} {value!r} is not in {where} (have: {have})"
    if len(choices) == 1:
        return next(iter(choices)), ""
    if not choices:
        return None, f"placement.{field} is empty and {where} has no entries to choose from"
    return None, f"placement.{field} is required: {where} has more than one entry (have: {have})"


def choose(cfg: KvmConfig, placement: Placement) -> Choice | str:
    """The host, machine type and image to use, or why there are none (the
    first field that fails, named with its value)."""
    picked: list[str] = []
    for field, value, where, choices in (
        ("zone", placement.zone, "kvm.hosts", [h.name for h in cfg.hosts]),
        ("machineType", placement.machine_type, "kvm.machineTypes", list(cfg.machineTypes)),
        ("image", placement.image, "kvm.images", list(cfg.images)),
    ):
        entry, why = _pick(field, value, where, choices)
        if entry is None:
            return why
        picked.append(entry)
    return Choice(*picked)


def placement_problem(block: KvmConfig, placement: Placement) -> str | None:
    """Why no domain of this provider could ever have `placement`, or None."""
    got = choose(block, placement)
    return got if isinstance(got, str) else None
