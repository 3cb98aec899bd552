"""Who probes what, and when (pure).

- `Endpoint`: a Running Proxy's `{"uid", "ip", "port"}` as the controller
  keeps it in `fleet:px:endpoints`; `Endpoints` decodes the hash, reusing
  the previous decode of an unchanged document (the hash is re-read every
  interval).
- Rendezvous hashing: a Proxy belongs to the live replica with the highest
  `score(member, key)`. Every replica computes the same owner from the same
  member list, without coordination; when a replica joins or leaves, only
  the Proxies it gains or held move.
- `phase`: each Proxy's fixed offset within the interval, so probes of a
  replica's share are spread over the interval rather than all at once.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleet import upstream

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*", re.ASCII)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """`ip`: an IP literal, or a bought proxy's host name; `scheme`, `credentials` (a reference, never a secret) and
    `username` (a template with `{user}` left) as the controller writes them for such a member."""

    uid: str
    ip: str
    port: int
    scheme: str = upstream.HTTP
    credentials: str = ""
    username: str = ""


def parse_endpoint(raw: bytes | str) -> Endpoint | None:
    """The controller's endpoint document, or None when it is not a usable one."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    uid, ip, port = doc.get("uid"), doc.get("ip"), doc.get("port")
    if not isinstance(uid, str) or not uid or len(uid) > 128 or not isinstance(ip, str) or len(ip) > 253:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return None
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        if len(ip) > 253 or not _HOST.fullmatch(ip):
            return None
    scheme, ref, username = doc.get("scheme", upstream.HTTP), doc.get("credentials", ""), doc.get("username", "")
    if scheme not in upstream.SCHEMES or not isinstance(ref, str) or not isinstance(username, str) or len(username) > 512:
        return None
    return Endpoint(uid, ip, port, scheme, ref, username)


class Endpoints:
    """Decodes `fleet:px:endpoints` snapshots; an unchanged document is not decoded again."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[bytes | str, Endpoint | None]] = {}
        self.invalid: list[str] = []  # keys whose document the last snapshot could not use

    def update(self, raw: Mapping[str, bytes | str]) -> dict[str, Endpoint]:
        seen: dict[str, tuple[bytes | str, Endpoint | None]] = {}
        out: dict[str, Endpoint] = {}
        invalid = []
        for key, doc in raw.items():
            prev = self._seen.get(key)
            if prev is not None and prev[0] == doc:
                seen[key] = prev  # the same tuple: an unchanged hash allocates nothing per Proxy
                ep = prev[1]
            else:
                ep = parse_endpoint(doc)
                seen[key] = (doc, ep)
            if ep is None:
                invalid.append(key)
            else:
                out[key] = ep
        self._seen, self.invalid = seen, sorted(invalid)
        return out


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def score(member: str, key: str) -> int:
    return _h64(f"{member}\0{key}")


def owner(members: Iterable[str], key: str) -> str | None:
    """The member that probes `key` (highest score; ties by name), or None without members."""
    best: tuple[int, str] | None = None
    for m in members:
        candidate = (score(m, key), m)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


def share(members: Iterable[str], me: str, keys: Iterable[str]) -> set[str]:
    """The keys `me` probes among `keys`, given the live `members` (`me` counts as live)."""
    everyone = sorted(set(members) | {me})
    return {k for k in keys if owner(everyone, k) == me}


def phase(key: str, interval: float) -> float:
    """The Proxy's fixed offset in [0, interval)."""
    return (_h64(key) / 2.0**64) * interval


def next_start(now: float, offset: float, interval: float) -> float:
    """The first time ≥ now that is `offset` into an interval (on the same clock as now)."""
    cycles = (now - offset) // interval
    at = cycles * interval + offset
    return at if at >= now else at + interval
