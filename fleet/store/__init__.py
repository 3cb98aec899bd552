"""fleet's state in Redis: the only package that talks to Redis, and the
one place each key is defined (`fleet.store.keys`).

One module per concern, each a thin set of Redis calls on raw values:
`results` (each provider's latest check result, compare-and-set),
`marks` (first expected, overdue logged), `heartbeats` (provider workers),
`beat` (beat's lock, last round, schedule, skipped checks), `statuses`
(the Kubernetes writer's cache of the objects it last wrote), `proxies`
(the Proxy reconciler's due times, calls in flight and standalone objects),
`leases` (the lease API's state), `pools` (the ProxyPool loop's lock; standalone pools' records and scale overrides). The store knows
no feature: it keeps the documents a feature hands it, and the feature
decodes and judges them (`fleet.health.stored` for check results).

`Store` holds one connection pool; `StoreError` is what any of its calls
raises when Redis does not answer (callers never import redis).
"""

from __future__ import annotations

from typing import Any

import redis

from fleet.store import installation as installation_marker
from fleet.store import keys, target
from fleet.store.beat import BeatState
from fleet.store.gc import GcState
from fleet.store.heartbeats import Heartbeats
from fleet.store.leases import Leases
from fleet.store.marks import Marks
from fleet.store.pools import PoolLock, PoolRecords
from fleet.store.prober import ProberMembers
from fleet.store.proxies import Proxies
from fleet.store.results import Raw, Results
from fleet.store.statuses import Statuses

StoreError = redis.RedisError
# The store not reachable for now (a Sentinel failover, Redis restarting, a demoted master refusing writes), as
# against an error of the call itself (a script's): what a caller may drop or retry rather than report as a bug.
StoreUnavailable = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError)

__all__ = ["BeatState", "Heartbeats", "Marks", "Proxies", "Raw", "Results", "Statuses", "Store", "StoreError",
           "StoreUnavailable", "keys", "parse_url"]


def parse_url(url: str) -> dict[str, Any]:
    """redis-py's reading of a broker URL (raises ValueError), for settings' validation; a
    `sentinel://` URL is read by `fleet.store.target.parse` (its parts, no connection)."""
    from redis.connection import parse_url as parse

    if url.startswith(target.SENTINEL + "://"):
        t = target.parse(url)
        return {"sentinels": t.sentinels, "master_name": t.master_name, "db": t.db}

    parsed: dict[str, Any] = parse(url)  # type: ignore[no-untyped-call, unused-ignore]  # redis-py leaves parse_url unannotated
    return parsed


class Store:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self.results = Results(client)
        self.marks = Marks(client)
        self.heartbeats = Heartbeats(client)
        self.beat = BeatState(client)
        self.statuses = Statuses(client)
        self.proxies = Proxies(client)
        self.gc = GcState(client)
        self.prober = ProberMembers(client)
        self.leases = Leases(client)
        self.pool_lock = PoolLock(client)
        self.pools = PoolRecords(client)

    @classmethod
    def from_url(cls, url: str, timeout: float = 10, connect_timeout: float = 5,
                 health_check_interval: int = 30) -> Store:
        return cls(target.client(url, socket_timeout=timeout, socket_connect_timeout=connect_timeout,
                                 health_check_interval=health_check_interval))

    def ping(self) -> bool:
        return bool(self._redis.ping())

    def claim_installation(self, installation: str) -> str:
        """This database is `installation`'s from now on, or `installation.Foreign` (fleet.store.installation)."""
        return installation_marker.claim(self._redis, installation)

    def close(self) -> None:
        self._redis.close()

    def queue_length(self, queue: str) -> int:
        return int(self._redis.llen(queue))

    def forget(self, keep: set[str]) -> list[str]:
        """Drop results and first-expected marks of providers not in `keep`."""
        gone = []
        for prefix in (keys.RESULT, keys.SEEN):
            for key in self._redis.scan_iter(match=prefix + "*"):
                name = keys.text(key)[len(prefix):]
                if name not in keep:
                    self._redis.delete(key)
                    gone.append(name)
        return sorted(set(gone))
