"""The gateway's settings, one frozen value built by `fleet.gateway.process.config_of` from the process's flags:
the core's (leases, attempts, tunnels, cooldowns), the dialer's (connect timeout) and the HTTP/1.1 front-end's
(head, body and response bounds, the ban signature)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet.gateway import decide


@dataclass(frozen=True)
class GatewayConfig:
    max_per_proxy: int = 1
    lease_ttl: float = 60.0
    session_ttl: float = 600.0
    session_connections: int = 16
    session_max_uses: int = 50
    session_max_age: float = 3000.0
    session_max_error_score: int = 3
    max_attempts: int = 3
    connect_timeout: float = 5.0
    response_timeout: float = 30.0
    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    tunnel_max_duration: float = 3600.0
    max_tunnels: int = 10_000
    max_tunnels_per_client: int = 1000
    ban_statuses: frozenset[int] = frozenset(decide.DEFAULT_BAN_STATUSES)
    cooldown_blocked: float = 600.0
    cooldown_errors: int = 3
    cooldown_global: float = 300.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body: int = 10 * 1024 * 1024
    body_timeout: float = 30.0
    ban_pattern: re.Pattern[str] | None = None
