"""Labels, firewall rules and reading servers back (pure; hcloud's domain objects only)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from hcloud.firewalls.domain import FirewallRule

from providers import base, marks
from providers.base import CreateRequest, Instance, State
from providers.hetzner.ids import Ref
from providers.marks import ValueRule

MANAGED_SELECTOR = f"{base.LABEL_MANAGED}={base.LABEL_MANAGED_YES}"
# Label values: at most 63, alphanumeric at both ends, - _ . inside.
LABEL_VALUE = ValueRule("Hetzner label value", re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)$"),
                        "at most 63 letters, digits, -_.")

_STATES = {
    "initializing": State.PROVISIONING,
    "starting": State.PROVISIONING,
    "migrating": State.PROVISIONING,
    "rebuilding": State.PROVISIONING,
    "running": State.RUNNING,
    "stopping": State.STOPPED,
    "off": State.STOPPED,
    "deleting": State.STOPPED,  # a delete in progress: still there
}


def request_problem(req: CreateRequest) -> str | None:
    return marks.problem(req, LABEL_VALUE)


def rules(port: int, sources: Iterable[str]) -> list[FirewallRule]:
    return [FirewallRule(direction="in", protocol="tcp", port=str(port), source_ips=sorted(sources),
                         description="fleet proxy clients")]


def rule_set(rs: Iterable[FirewallRule]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(str(r.direction), str(r.protocol), str(r.port), tuple(sorted(r.source_ips or ()))) for r in rs}


def state_of(status: str, ip: str) -> State:
    state = _STATES.get(status, State.STOPPED)
    return State.PROVISIONING if state is State.RUNNING and not ip else state


def address(server: Any, internal: bool) -> str:
    if internal:
        nets = server.private_net or []
        return str(nets[0].ip) if nets else ""
    pn = server.public_net
    ip = pn.ipv4.ip if pn is not None and pn.ipv4 is not None else ""
    if ip is not None and not isinstance(ip, str):
        raise TypeError("public_net.ipv4.ip is not a string")
    return ip or ""


def created(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) and value.tzinfo is not None else None


def firewall_ids(server: Any) -> list[int]:
    pn = server.public_net
    return [int(f.firewall.id) for f in (pn.firewalls if pn is not None else [])]


def to_instance(ref: Ref, server: Any, internal: bool) -> Instance:
    if server.id != ref.server:
        raise ValueError(f"the answer is about server {server.id!r}, not {ref.server}")
    status = server.status
    if not isinstance(status, str):
        raise TypeError("status is not a string")
    lbl = server.labels or {}
    if not isinstance(lbl, dict):
        raise TypeError("labels is not an object")
    ip = address(server, internal)
    state = state_of(status, ip)
    return Instance(id=str(ref), state=state, ip=ip if state is State.RUNNING else "", uid=str(lbl.get(base.LABEL_UID, "")),
                    created_at=created(server.created), installation=str(lbl.get(base.LABEL_INSTALLATION, "")),
                    namespace=str(lbl.get(base.LABEL_NAMESPACE, "")))


def firewall_instance(ref: Ref, fw: Any) -> Instance:
    if fw.id != ref.firewall:
        raise ValueError(f"the answer is about firewall {fw.id!r}, not {ref.firewall}")
    lbl = fw.labels or {}
    return Instance(id=str(ref), state=State.TERMINATED, uid=str(lbl.get(base.LABEL_UID, "")),
                    created_at=created(fw.created), installation=str(lbl.get(base.LABEL_INSTALLATION, "")),
                    namespace=str(lbl.get(base.LABEL_NAMESPACE, "")))
