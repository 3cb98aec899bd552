"""The ProxyPool loop's lock: one controller replica runs it (`fleet.pools.runtime`); standalone pools' records (`PoolRecords`).
The same owned lock as beat's (`fleet.store.lock`), on its own key."""

from __future__ import annotations

import redis

from fleet.store import keys
from fleet.store.lock import OwnedLock


class PoolLock(OwnedLock):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, keys.POOL_LOCK)


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
