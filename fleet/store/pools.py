"""The ProxyPool loop's lock: one controller replica runs it (`fleet.pools.runtime`).
The same `SET NX PX` with an owner id as beat's lock (taken or extended by one script, so
only its holder extends it; released by compare-and-delete), on its own key."""

from __future__ import annotations

import redis

from fleet.store import keys
from fleet.store.beat import _HOLD, _RELEASE


class PoolLock:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._hold = client.register_script(_HOLD)
        self._release = client.register_script(_RELEASE)

    def hold(self, owner: str, ttl: float) -> bool:
        """Take the lock if it is free, extend it if `owner` holds it."""
        return bool(self._hold(keys=[keys.POOL_LOCK], args=[owner, max(1, int(ttl * 1000))]))

    def release(self, owner: str) -> bool:
        return bool(self._release(keys=[keys.POOL_LOCK], args=[owner]))

    def holder(self) -> str | None:
        raw = self._redis.get(keys.POOL_LOCK)
        return keys.text(raw) if raw else None
