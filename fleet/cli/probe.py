"""`fleet probe ready|live`: the exec probes of the deployed processes.

- `ready`: the broker answers PING within the timeout. A worker that cannot
  reach the broker cannot take work, so it is not ready.
- `live -p NAME`: when the broker answers, this pod's worker for NAME must
  have a fresh heartbeat key (fleet.celery.presence; the worker refreshes it every
  10 s, TTL 30 s). When the broker does not answer, the probe passes:
  restarting workers does not bring Redis back, and readiness already says it.

Neither looks at a backend: a dead hypervisor or cloud API shows in
ProviderHealth and the gauges, never as an unready or restarted pod. Kept
light (fleet.store only), since it runs inside the process' memory limit.
"""

from __future__ import annotations

import socket
import sys

from fleet.store import Store, StoreError, keys

OK, FAILED = 0, 1


def node_name(provider: str, hostname: str | None = None) -> str:
    """The worker's node name, as `-n <name>@%h` expands it in this pod."""
    return f"{provider}@{hostname or socket.gethostname()}"


def _connect(url: str, timeout: float) -> Store:
    return Store.from_url(url, timeout=timeout, connect_timeout=timeout, health_check_interval=0)


def ready(store: Store) -> tuple[int, str]:
    try:
        store.ping()
    except StoreError as exc:
        return FAILED, f"not ready: broker unreachable: {exc}"
    return OK, "ready: broker answers"


def live(store: Store, provider: str, hostname: str | None = None) -> tuple[int, str]:
    node = node_name(provider, hostname)
    key = keys.worker(provider, node)
    try:
        fresh = store.heartbeats.alive(provider, node)
    except StoreError as exc:
        return OK, f"alive: broker unreachable ({exc}); not a reason to restart"
    if not fresh:
        return FAILED, f"not alive: no heartbeat at {key} (the worker never became ready, or stopped beating)"
    return OK, f"alive: heartbeat {key}"


def run(mode: str, url: str, provider: str | None, timeout: float) -> int:
    store = _connect(url, timeout)
    try:
        code, message = ready(store) if mode == "ready" else live(store, provider or "")
    finally:
        store.close()
    print(message, file=sys.stderr if code else sys.stdout)
    return code
