"""`fleet probe ready|live`: the exec probes of the deployed processes.

- `ready`: the broker answers PING within the timeout. A worker that cannot
  reach the broker cannot take work, so it is not ready.
- `live -p NAME`: when the broker answers, this pod's worker for NAME must
  have a fresh heartbeat key (fleet.heartbeat; the worker refreshes it every
  10 s, TTL 30 s). When the broker does not answer, the probe passes:
  restarting workers does not bring Redis back, and readiness already says it.

Neither looks at a backend: a dead hypervisor or cloud API shows in
ProviderHealth and the gauges, never as an unready or restarted pod. Kept
light (redis only), since it runs inside the process' memory limit.
"""

from __future__ import annotations

import socket
import sys

import redis

from fleet import heartbeat

OK, FAILED = 0, 1


def node_name(provider: str, hostname: str | None = None) -> str:
    """The worker's node name, as `-n <name>@%h` expands it in this pod."""
    return f"{provider}@{hostname or socket.gethostname()}"


def _client(url: str, timeout: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def ready(client: redis.Redis) -> tuple[int, str]:
    try:
        client.ping()
    except redis.RedisError as exc:
        return FAILED, f"not ready: broker unreachable: {exc}"
    return OK, "ready: broker answers"


def live(client: redis.Redis, provider: str, hostname: str | None = None) -> tuple[int, str]:
    key = f"{heartbeat.KEY}{provider}:{node_name(provider, hostname)}"
    try:
        fresh = client.exists(key)
    except redis.RedisError as exc:
        return OK, f"alive: broker unreachable ({exc}); not a reason to restart"
    if not fresh:
        return FAILED, f"not alive: no heartbeat at {key} (the worker never became ready, or stopped beating)"
    return OK, f"alive: heartbeat {key}"


def run(mode: str, url: str, provider: str | None, timeout: float) -> int:
    client = _client(url, timeout)
    try:
        code, message = ready(client) if mode == "ready" else live(client, provider or "")
    finally:
        client.close()
    print(message, file=sys.stderr if code else sys.stdout)
    return code
