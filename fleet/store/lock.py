"""A lock held by an owner id: `SET NX PX`, taken or extended by one script so only its holder extends it,
released by compare-and-delete (fleet/store/lua/lock/). Beat's lock and the pool loop's are two keys of it."""

from __future__ import annotations

import redis

from fleet.store import keys, scripts

ARGV: dict[str, tuple[str, ...]] = {"hold": ("owner", "ttl_ms"), "release": ("owner",)}
LUA = scripts.load(ARGV, folder="lock")  # read once


class OwnedLock:
    def __init__(self, client: redis.Redis, key: str) -> None:
        self._redis = client
        self._key = key
        self._hold, self._release = LUA.register(client, "hold", "release")

    def hold(self, owner: str, ttl: float) -> bool:
        """Take the lock if it is free, extend it if `owner` holds it."""
        return bool(self._hold(keys=[self._key], args=LUA.argv("hold", owner=owner, ttl_ms=max(1, int(ttl * 1000)))))

    def release(self, owner: str) -> bool:
        """Drop the lock if `owner` holds it."""
        return bool(self._release(keys=[self._key], args=LUA.argv("release", owner=owner)))

    def holder(self) -> str | None:
        raw = self._redis.get(self._key)
        return keys.text(raw) if raw else None
