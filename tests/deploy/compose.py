"""docker-compose.yml read as Compose reads it, for the tests that check it without a container engine
(tests/deploy/test_compose.py) and run its commands with `fleet up` (tests/integration/test_compose_stack.py):
`${VAR:-default}` interpolation, the fleet image's services, their environments and where their mounts come from."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
IMAGE = "fleet:dev"
NET = "net"  # the service holding the proxies' network namespace
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` and `${VAR:-default}` as Compose substitutes them (an unset or empty VAR takes the default)."""
    return _VAR.sub(lambda m: environ.get(m.group(1)) or (m.group(2) or ""), value)


def fleet_services(compose: dict[str, Any], profiles: bool = False) -> dict[str, dict[str, Any]]:
    """The services of the fleet image; those behind a profile only with `profiles` (plain `up` skips them)."""
    return {n: s for n, s in compose["services"].items()
            if s.get("image") == IMAGE and (profiles or not s.get("profiles"))}


def environment(svc: dict[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    return {k: interpolate(str(v), environ) for k, v in (svc.get("environment") or {}).items()}


def mounts(svc: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, container path): a bind mount's source starts with ./ (relative to the compose file), a named
    volume's is its name."""
    return [(v.split(":")[0], v.split(":")[1]) for v in svc.get("volumes") or ()]


def source_of(svc: dict[str, Any], path: str) -> tuple[str, str] | None:
    """The mount that holds container `path`, and the path's rest below it; None when no mount holds it."""
    for source, target in mounts(svc):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return source, path[len(target):].lstrip("/")
    return None
