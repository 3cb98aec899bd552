"""Provider ids of upstream members: a credential-free URL with every fact a
dialer needs but the secret (decision 0125).

- list member: `<scheme>://<host>:<port>`, e.g. `socks5://203.0.113.7:1080`:
  derived from the entry, so the same entry always has the same id.
- vendor member: `<scheme>://<host>:<port>/sessions/<session>` plus the
  placement values its username is rendered with, as a query in placeholder
  order: `http://gate.vendor.example:7777/sessions/k3x9…?country=us&city=berlin`.

The reconciler writes the id to `status.providerID` and to the endpoint the
gateway and prober read (its `instance`), so whoever dials the member parses
it here (`parse`, pure) and renders the username with the secret it holds.
Values in an id can't hold its separators: hosts are host names or IP
literals, sessions lowercase letters and digits, placement values
`config.PLACEMENT_VALUE`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from providers.upstream.config import (
    PLACEMENT_PLACEHOLDERS,
    PLACEMENT_VALUE,
    USER,
    Endpoint,
    UpstreamConfig,
    parse_url,
    render_username,
)
from providers.upstream.config import (
    SESSION as SESSION_PLACEHOLDER,
)

SESSIONS = "/sessions/"
SESSION = re.compile(r"^[a-z0-9]{8,32}$")


class MalformedId(ValueError):
    """An id that can't be one of ours."""


@dataclass(frozen=True)
class Member:
    endpoint: Endpoint
    session: str = ""  # "" for a list member
    placement: tuple[tuple[str, str], ...] = ()  # (placeholder, value), in PLACEMENT_PLACEHOLDERS order

    @property
    def id(self) -> str:
        if not self.session:
            return self.endpoint.url
        query = "&".join(f"{k}={v}" for k, v in self.placement)
        return f"{self.endpoint.url}{SESSIONS}{self.session}" + (f"?{query}" if query else "")


def parse(pid: str) -> Member:
    """An id → its member; MalformedId for anything `Member.id` can't make."""
    if not isinstance(pid, str) or len(pid) > 1024:
        raise MalformedId("not an upstream member id")
    base, sep, rest = pid.partition(SESSIONS)
    try:
        endpoint = parse_url(base, credentials=False).endpoint
    except ValueError as exc:
        raise MalformedId(f"malformed id {pid[:120]!r}: want scheme://host:port[/sessions/<id>] ({exc})") from None
    if endpoint.url != base:
        raise MalformedId(f"malformed id {pid[:120]!r}: want {endpoint.url}")
    if not sep:
        return Member(endpoint)
    session, _, query = rest.partition("?")
    if not SESSION.match(session):
        raise MalformedId(f"malformed id {pid[:120]!r}: a session is 8-32 lowercase letters and digits")
    placement: list[tuple[str, str]] = []
    for part in query.split("&") if query else ():
        key, eq, value = part.partition("=")
        if not eq or key not in PLACEMENT_PLACEHOLDERS or not PLACEMENT_VALUE.match(value):
            raise MalformedId(f"malformed id {pid[:120]!r}: bad placement {part[:40]!r}")
        placement.append((key, value))
    order = [PLACEMENT_PLACEHOLDERS.index(k) for k, _ in placement]
    if order != sorted(set(order)):
        raise MalformedId(f"malformed id {pid[:120]!r}: placement out of order or repeated")
    return Member(endpoint, session, tuple(placement))


def dial_facts(name: str, cfg: UpstreamConfig, pid: str) -> dict[str, Any] | None:
    """The registry's `dial` hook: a member's endpoint fields (pure, no file read). `credentials` is the provider's
    name when the block names credential files (the gateway and prober read them from their own mount of the
    provider's Secret); a vendor member's `username` is the template rendered with its session and placement, its
    `{user}` left for whoever holds the secret. None for an id that is not a member's."""
    try:
        member = parse(pid)
    except MalformedId:
        return None
    ep = member.endpoint
    facts: dict[str, Any] = {"ip": ep.host, "port": ep.port, "scheme": ep.scheme}
    if cfg.usernameFile or cfg.listFile:
        facts["credentials"] = name
    if member.session and cfg.usernameTemplate:
        values = {**dict(member.placement), SESSION_PLACEHOLDER: member.session, USER: "{" + USER + "}"}
        facts["username"] = render_username(cfg.usernameTemplate, values)
    return facts
