"""Provider workers announce themselves in Redis, so the controller can
tell "no worker consumes this queue" from "the backend is down".

Each provider worker process refreshes `fleet:worker:<provider>:<hostname>`
every PERIOD seconds with a TTL of 3 × PERIOD; a key that lapsed is a worker
that is gone (killed, partitioned, stuck). Counting is one SCAN per scrape.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

log = logging.getLogger("fleet.heartbeat")

KEY = "fleet:worker:"
PERIOD = 10.0
TTL = int(3 * PERIOD)


def beat_once(client: redis.Redis, providers: list[str], hostname: str) -> None:
    pipe = client.pipeline(transaction=False)
    for p in providers:
        pipe.set(f"{KEY}{p}:{hostname}", repr(time.time()), ex=TTL)
    pipe.execute()


def start(url: str, providers: list[str], hostname: str, period: float = PERIOD) -> threading.Event:
    """Refresh the keys in a daemon thread until the returned event is set."""
    stop = threading.Event()
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def loop() -> None:
        while not stop.is_set():
            try:
                beat_once(client, providers, hostname)
            except redis.RedisError as exc:  # the broker is down: so is the worker's use
                log.warning("heartbeat failed", extra={"fields": {"error": str(exc)}})
            stop.wait(period)

    threading.Thread(target=loop, name="fleet-heartbeat", daemon=True).start()
    return stop


def live_workers(client: redis.Redis) -> dict[str, list[str]]:
    """provider → hostnames with a live heartbeat."""
    out: dict[str, list[str]] = {}
    for key in client.scan_iter(match=KEY + "*", count=1000):
        name = key.decode() if isinstance(key, bytes) else key
        provider, _, host = name[len(KEY):].partition(":")
        out.setdefault(provider, []).append(host)
    return {p: sorted(h) for p, h in out.items()}
