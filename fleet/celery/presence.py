"""Provider workers announce themselves in Redis, so the controller can
tell "no worker consumes this queue" from "the backend is down".

Each provider worker process refreshes its key per provider
(`fleet.store.keys.worker`) every PERIOD seconds with a TTL of 3 × PERIOD;
a key that lapsed is a worker that is gone (killed, partitioned, stuck).
Counting is one SCAN per scrape.
"""

from __future__ import annotations

import logging
import threading

from fleet.store import Store, StoreError

log = logging.getLogger("fleet.heartbeat")

PERIOD = 10.0
TTL = int(3 * PERIOD)


def beat_once(store: Store, providers: list[str], hostname: str) -> None:
    store.heartbeats.beat(providers, hostname, TTL)


def start(url: str, providers: list[str], hostname: str, period: float = PERIOD) -> threading.Event:
    """Refresh the keys in a daemon thread until the returned event is set."""
    stop = threading.Event()
    store = Store.from_url(url, timeout=5, connect_timeout=5, health_check_interval=0)

    def loop() -> None:
        while not stop.is_set():
            try:
                beat_once(store, providers, hostname)
            except StoreError as exc:  # the broker is down: so is the worker's use
                log.warning("heartbeat failed", extra={"fields": {"error": str(exc)}})
            stop.wait(period)

    threading.Thread(target=loop, name="fleet-heartbeat", daemon=True).start()
    return stop


def live_workers(store: Store) -> dict[str, list[str]]:
    """provider → hostnames with a live heartbeat."""
    return store.heartbeats.live()
