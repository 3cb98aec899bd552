"""Reading DescribeInstances entries into the contract's `Instance` (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from providers import base
from providers.aws.build import TAG_CREATED, tags_of
from providers.aws.ids import Ref
from providers.base import Instance, State

# EC2 states → contract states. running needs the address (state_of);
# shutting-down is a delete in progress (the instance is still there);
# terminated is handled by the provider (gone, once its group is gone too).
_STATES = {
    "pending": State.PROVISIONING,
    "running": State.RUNNING,
    "stopping": State.STOPPED,
    "stopped": State.STOPPED,
    "shutting-down": State.STOPPED,
    "terminated": State.TERMINATED,
}
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


def state_name(inst: Mapping[str, Any]) -> str:
    name = inst["State"]["Name"]
    if not isinstance(name, str):
        raise TypeError(f"State.Name is {type(name).__name__}")
    return name


def address(inst: Mapping[str, Any], internal: bool) -> str:
    value = inst.get("PrivateIpAddress" if internal else "PublicIpAddress") or ""
    if not isinstance(value, str):
        raise TypeError("the address is not a string")
    return value


def state_of(name: str, ip: str) -> State:
    state = _STATES.get(name, State.STOPPED)
    if state is State.RUNNING and not ip:
        return State.PROVISIONING
    return state


def launch_time(value: Any) -> datetime | None:
    """botocore parses LaunchTime into an aware datetime; anything else is None (very old for GC)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    return None


def parse_created(text: str) -> datetime | None:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


def group_ids(inst: Mapping[str, Any]) -> list[str]:
    return [str(g["GroupId"]) for g in inst.get("SecurityGroups") or ()]


def to_instance(ref: Ref, inst: Mapping[str, Any], internal: bool) -> Instance:
    if inst.get("InstanceId") != ref.instance:
        raise ValueError(f"the answer is about {inst.get('InstanceId')!r}, not {ref.instance}")
    tags = tags_of(inst)
    ip = address(inst, internal)
    state = state_of(state_name(inst), ip)
    return Instance(
        id=str(ref),
        state=state,
        ip=ip if state is State.RUNNING else "",
        uid=tags.get(base.LABEL_UID, ""),
        created_at=launch_time(inst.get("LaunchTime")),
        installation=tags.get(base.LABEL_INSTALLATION, ""),
        namespace=tags.get(base.LABEL_NAMESPACE, ""),
    )


def group_instance(ref: Ref, group: Mapping[str, Any]) -> Instance:
    """A group fleet made whose instance is gone, as GC sees it: Terminated,
    with its marks and the creation time fleet tagged it with."""
    if group.get("GroupId") != ref.group:
        raise ValueError(f"the answer is about {group.get('GroupId')!r}, not {ref.group}")
    tags = tags_of(group)
    return Instance(
        id=str(ref),
        state=State.TERMINATED,
        uid=tags.get(base.LABEL_UID, ""),
        created_at=parse_created(tags.get(TAG_CREATED, "")),
        installation=tags.get(base.LABEL_INSTALLATION, ""),
        namespace=tags.get(base.LABEL_NAMESPACE, ""),
    )
