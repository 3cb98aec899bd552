"""The gateway's clients: who may use it, with which token, namespaces and ports (`--gateway-clients-file`,
a mounted Secret in a cluster). YAML (or JSON):

```yaml
clients:
  acme:
    token: "at least 16 printable characters"   # the proxy password
    namespaces: [crawl, crawl-eu]  # the Proxy namespaces it may use (default: every one)
    ports: [443, 80]             # target ports (default [80, 443]; "*" any)
    maxTunnels: 200              # its tunnels at once (default --gateway-max-tunnels-per-client)
```

`parse_clients` is pure; `ClientsFile` re-reads the file when its mtime, size or inode changed
(checked at most every `RECHECK` s), and keeps the last good table when a new version is broken
(logged once per version): `fleet.gateway.watched`. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fleet.gateway.decide import _CLIENT, _NAMESPACE
from fleet.gateway.watched import WatchedFile
from fleet.untrusted import FileProblem, YamlLimits, YamlProblem, decode, load_one

LIMITS = YamlLimits(max_nodes=100_000)  # the one hostile-YAML reader's bounds (fleet.untrusted)
MIN_TOKEN = 16
DEFAULT_PORTS = frozenset({80, 443})
FIELDS = ("token", "namespaces", "ports", "maxTunnels")


class ClientsError(ValueError):
    """The clients file is not usable (the message names the client and field)."""


@dataclass(frozen=True)
class Client:
    name: str
    token: bytes
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    ports: frozenset[int] | None = DEFAULT_PORTS  # None: any port
    max_tunnels: int = 0  # 0: the process's per-client default

    def __repr__(self) -> str:  # never the token
        return f"Client({self.name!r}, namespaces={self.namespaces}, ports={self.ports}, max_tunnels={self.max_tunnels})"


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
        out[name] = Client(name, token.encode(), spaces, ports, most)
    return out


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
