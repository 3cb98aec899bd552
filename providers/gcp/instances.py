"""Reading a Compute instance back into the contract's `Instance` (pure)."""

from __future__ import annotations

from datetime import datetime

from google.cloud import compute_v1

from providers import base
from providers.base import Instance, State

# GCE statuses → contract states. RUNNING needs a NAT IP (see state_of);
# REPAIRING recovers by itself, so it is not Stopped; anything else,
# including statuses added later, is Stopped (will not recover by itself).
_STATES = {
    "PROVISIONING": State.PROVISIONING,
    "STAGING": State.PROVISIONING,
    "REPAIRING": State.PROVISIONING,
    "RUNNING": State.RUNNING,
    "STOPPING": State.STOPPED,
    "STOPPED": State.STOPPED,
    "SUSPENDING": State.STOPPED,
    "SUSPENDED": State.STOPPED,
    "TERMINATED": State.TERMINATED,
}


def state_of(status: str, ip: str) -> State:
    state = _STATES.get(status, State.STOPPED)
    if state is State.RUNNING and not ip:
        return State.PROVISIONING
    return state


def nat_ip(inst: compute_v1.Instance) -> str:
    """The external (NAT) IPv4 of the first NIC that has one; internal
    addresses are never reported (clients connect from outside)."""
    for nic in inst.network_interfaces:
        for ac in nic.access_configs:
            if ac.nat_i_p:
                return ac.nat_i_p
    return ""


def parse_timestamp(text: str) -> datetime | None:
    """`creationTimestamp` (RFC 3339 with offset). Unparsable or absent →
    None, which GC treats as very old: accepted, because it never shields
    an orphan forever."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


def to_instance(provider_id: str, inst: compute_v1.Instance) -> Instance:
    ip = nat_ip(inst)
    state = state_of(inst.status, ip)
    return Instance(
        id=provider_id,
        state=state,
        ip=ip,
        uid=inst.labels.get(base.LABEL_UID, ""),
        created_at=parse_timestamp(inst.creation_timestamp),
        installation=inst.labels.get(base.LABEL_INSTALLATION, ""),
        namespace=inst.labels.get(base.LABEL_NAMESPACE, ""),
    )
