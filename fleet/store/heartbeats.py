"""Provider workers' heartbeats: `fleet:worker:<provider>:<node>`, one key
per provider a worker serves, refreshed with a TTL (`fleet.celery.presence` says
how often). A lapsed key is a worker gone."""

from __future__ import annotations

import time

import redis

from fleet.store import keys


class Heartbeats:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def beat(self, providers: list[str], node: str, ttl: int) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for p in providers:
            pipe.set(keys.worker(p, node), repr(time.time()), ex=ttl)
        pipe.execute()

    def alive(self, provider: str, node: str) -> bool:
        return bool(self._redis.exists(keys.worker(provider, node)))

    def live(self) -> dict[str, list[str]]:
        """provider → node names with a live heartbeat (one SCAN)."""
        out: dict[str, list[str]] = {}
        for key in self._redis.scan_iter(match=keys.WORKER + "*", count=1000):
            provider, _, node = keys.text(key)[len(keys.WORKER):].partition(":")
            out.setdefault(provider, []).append(node)
        return {p: sorted(n) for p, n in out.items()}
