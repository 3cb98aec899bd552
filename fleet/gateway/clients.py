"""The gateway's clients: who may use it, with which token, namespaces and ports (`--gateway-clients-file`,
a mounted Secret in a cluster). YAML (or JSON):

```yaml
clients:
  acme:
    token: "at least 16 printable characters"   # the proxy password
    namespaces: [crawl, crawl-eu]  # the Proxy namespaces it may use (default: every one)
    ports: [443, 80]             # target ports (default [80, 443]; "*" any)
    maxTunnels: 200              # its tunnels at once (default --gateway-max-tunnels-per-client)
    intercept: false             # true: the gateway ends its TLS with fleet's CA (`fleet ca`) and sees inside
    sessions:                    # its sessions' life (default the --gateway-session-* flags)
      maxUses: 50                # leases on one proxy (0: never retired)
      maxAge: 50m
      maxErrorScore: 3
      errorScoreDecrement: 0.5   # taken off the score by each good exchange
```

`parse_clients` is pure; `ClientsFile` re-reads the file when its mtime, size or inode changed
(checked at most every `RECHECK` s), and keeps the last good table when a new version is broken
(logged once per version): `fleet.gateway.watched`. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from fleet.durations import parse_duration
from fleet.gateway.decide import _CLIENT, _NAMESPACE
from fleet.gateway.watched import WatchedFile
from fleet.untrusted import FileProblem, YamlLimits, YamlProblem, decode, load_one

LIMITS = YamlLimits(max_nodes=100_000)  # the one hostile-YAML reader's bounds (fleet.untrusted)
MIN_TOKEN = 16
DEFAULT_PORTS = frozenset({80, 443})
FIELDS = ("token", "namespaces", "ports", "maxTunnels", "intercept", "sessions")
SESSION_FIELDS = ("maxUses", "maxAge", "maxErrorScore", "errorScoreDecrement")


class ClientsError(ValueError):
    """The clients file is not usable (the message names the client and field)."""


@dataclass(frozen=True)
class SessionLimits:
    """A client's own limits of its sessions' life; None: the process's (--gateway-session-*)."""

    max_uses: int | None = None
    max_age: float | None = None
    max_error_score: float | None = None
    error_decrement: float | None = None


@dataclass(frozen=True)
class Client:
    name: str
    token: bytes
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    ports: frozenset[int] | None = DEFAULT_PORTS  # None: any port
    max_tunnels: int = 0  # 0: the process's per-client default
    intercept: bool = False  # its HTTPS is intercepted (fleet.gateway.intercept); never unless it asked
    sessions: SessionLimits = SessionLimits()

    def __repr__(self) -> str:  # never the token
        return (f"Client({self.name!r}, namespaces={self.namespaces}, ports={self.ports}, "
                f"max_tunnels={self.max_tunnels}, intercept={self.intercept})")


def parse_clients(text: str | bytes) -> dict[str, Client]:
    try:
        doc = load_one(decode(text) if isinstance(text, bytes) else text, LIMITS)
    except (FileProblem, YamlProblem) as exc:
        raise ClientsError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("clients"), dict) or set(doc) != {"clients"}:
        raise ClientsError("the file must be a mapping with one key, clients: {NAME: {token: ...}}")
    out = {}
    for name, spec in doc["clients"].items():
        if not isinstance(name, str) or not _CLIENT.fullmatch(name):
            raise ClientsError(f"client {str(name)[:64]!r}: a name is 1 to 64 letters, digits, '_' or '.' (no '-')")
        if not isinstance(spec, dict):
            raise ClientsError(f"client {name}: must be a mapping with a token")
        unknown = set(spec) - set(FIELDS)
        if "pools" in unknown:
            raise ClientsError(f"client {name}: pools is now namespaces (the Proxy namespaces it may use); a pool is a "
                               f"ProxyPool, which a crawler picks with -pool-NAME in its username")
        if unknown:
            raise ClientsError(f"client {name}: unknown field {sorted(map(str, unknown))[0][:40]!r} "
                               f"(known: {', '.join(FIELDS)})")
        token = spec.get("token")
        if not isinstance(token, str) or len(token) < MIN_TOKEN or not token.isprintable() or " " in token:
            raise ClientsError(f"client {name}: token must be at least {MIN_TOKEN} printable characters, no spaces")
        spaces = spec.get("namespaces")
        if spaces is not None:
            if not isinstance(spaces, list) or not all(isinstance(n, str) and _NAMESPACE.fullmatch(n) for n in spaces):
                raise ClientsError(f"client {name}: namespaces must be a list of namespaces (DNS-1123 labels)")
            spaces = tuple(spaces)
        ports_raw = spec.get("ports", sorted(DEFAULT_PORTS))
        ports: frozenset[int] | None
        if ports_raw == "*":
            ports = None
        elif isinstance(ports_raw, list) and all(isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535
                                                 for p in ports_raw):
            ports = frozenset(ports_raw)
        else:
            raise ClientsError(f"client {name}: ports must be a list of port numbers or \"*\"")
        most = spec.get("maxTunnels", 0)
        if isinstance(most, bool) or not isinstance(most, int) or not 0 <= most <= 1_000_000:
            raise ClientsError(f"client {name}: maxTunnels must be a whole number from 0 to 1000000")
        intercepts = spec.get("intercept", False)
        if not isinstance(intercepts, bool):
            raise ClientsError(f"client {name}: intercept must be true or false")
        out[name] = Client(name, token.encode(), spaces, ports, most, intercepts, _session_limits(name, spec))
    return out


def _number(name: str, field: str, value: Any, low: float, high: float, whole: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not low <= value <= high:
        kind = "a whole number" if whole else "a number"
        raise ClientsError(f"client {name}: sessions.{field} must be {kind} from {low:g} to {high:g}")
    return value


def _session_limits(name: str, spec: dict[str, Any]) -> SessionLimits:
    raw = spec.get("sessions", {})
    if not isinstance(raw, dict):
        raise ClientsError(f"client {name}: sessions must be a mapping ({', '.join(SESSION_FIELDS)})")
    unknown = set(raw) - set(SESSION_FIELDS)
    if unknown:
        raise ClientsError(f"client {name}: sessions: unknown field {sorted(map(str, unknown))[0][:40]!r} "
                           f"(known: {', '.join(SESSION_FIELDS)})")
    age = raw.get("maxAge")
    if isinstance(age, str):
        try:
            age = parse_duration(age)
        except ValueError as exc:
            raise ClientsError(f"client {name}: sessions.maxAge: {exc}") from None
    if age is not None:
        age = _number(name, "maxAge (seconds, or a duration like 50m)", age, 1, MAX_AGE, False)
    uses, score, dec = (raw.get(k) for k in ("maxUses", "maxErrorScore", "errorScoreDecrement"))
    return SessionLimits(
        max_uses=None if uses is None else int(_number(name, "maxUses", uses, 0, 1_000_000, True)),
        max_age=age,
        max_error_score=None if score is None else _number(name, "maxErrorScore", score, 0.1, 1000, False),
        error_decrement=None if dec is None else _number(name, "errorScoreDecrement", dec, 0, 1000, False))


MAX_AGE = 86400.0  # a day, as --gateway-session-max-age and -sesstime-


class ClientsFile(WatchedFile[dict[str, Client]]):
    """The table from a file, re-read when it changes."""

    flag = "--gateway-clients-file"
    what = "clients"
    error = ClientsError

    def parse(self, raw: bytes) -> dict[str, Client]:
        return parse_clients(raw)

    def problem(self, exc: Exception) -> str:
        return str(exc) if isinstance(exc, FileProblem) else f"{self.flag} {self.path}: {exc}"

    def counts(self, value: dict[str, Client]) -> dict[str, int]:
        return {"clients": len(value)}

    @property
    def clients(self) -> dict[str, Client]:
        return self.value

    def check(self, name: str, password: str) -> Client | None:
        """The client when `password` is its token (constant time in the token), else None."""
        self.refresh()
        client = self.clients.get(name)
        given = password.encode()
        if client is None:
            hmac.compare_digest(given, b"x" * MIN_TOKEN)  # the same work for an unknown name
            return None
        return client if hmac.compare_digest(given, client.token) else None
