"""The ProxyPool loop's lock: one controller replica runs it (`fleet.pools.runtime`); standalone pools' records (`PoolRecords`).
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


class PoolRecords:
    """Standalone ProxyPools (`fleet.pools.standalone`): per pool key `<namespace>/<name>`, its record (what
    the API server would keep: uid, generation, creation time, status; JSON, written by the pool loop's
    holder) and a scale's override of the manifest's replicas (JSON, written by `fleet scale pool` and the
    autoscaler). Raw documents: `fleet.pools.standalone` decodes them."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def records(self) -> dict[str, str]:
        return {keys.text(k): keys.text(v) for k, v in self._redis.hgetall(keys.POOL_OBJECTS).items()}

    def put_record(self, key: str, doc: str) -> None:
        self._redis.hset(keys.POOL_OBJECTS, key, doc)

    def drop_record(self, key: str) -> None:
        self._redis.hdel(keys.POOL_OBJECTS, key)

    def scales(self) -> dict[str, str]:
        return {keys.text(k): keys.text(v) for k, v in self._redis.hgetall(keys.POOL_SCALE).items()}

    def put_scale(self, key: str, doc: str) -> None:
        self._redis.hset(keys.POOL_SCALE, key, doc)

    def drop_scale(self, key: str) -> None:
        self._redis.hdel(keys.POOL_SCALE, key)
