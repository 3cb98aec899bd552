"""Beat's state: the lock (`SET NX PX` with an owner id, taken or extended
by one Lua script so only its holder extends it; released by
compare-and-delete), the last round's stamp, the published schedule and the
checks skipped. Raw values; `fleet.celery.beat` reads them."""

from __future__ import annotations

import redis

from fleet.store import keys

# 1 when ARGV[1] holds the lock afterwards (taken or extended), else 0.
_HOLD = """
local v = redis.call('get', KEYS[1])
if v == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class BeatState:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def hold(self, owner: str, ttl: float) -> bool:
        """Take the lock if it is free, extend it if `owner` holds it."""
        return bool(self._redis.eval(_HOLD, 1, keys.BEAT_LOCK, owner, int(ttl * 1000)))

    def release(self, owner: str) -> bool:
        """Drop the lock if `owner` holds it."""
        return bool(self._redis.eval(_RELEASE, 1, keys.BEAT_LOCK, owner))

    def holder(self) -> str | None:
        raw = self._redis.get(keys.BEAT_LOCK)
        return keys.text(raw) if raw else None

    def set_schedule(self, doc: str) -> None:
        """No expiry: with beat gone the readers still need the deployed schedule."""
        self._redis.set(keys.BEAT_SCHEDULE, doc)

    def record_round(self, at: float, schedule: str, skipped: list[str]) -> None:
        """Stamp the round, republish the schedule, count the skipped providers."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(keys.BEAT_LAST_ROUND, repr(at))
        pipe.set(keys.BEAT_SCHEDULE, schedule)
        for name in skipped:
            pipe.hincrby(keys.BEAT_SKIPPED, name, 1)
        pipe.execute()

    def last_round(self) -> str | None:
        raw = self._redis.get(keys.BEAT_LAST_ROUND)
        return keys.text(raw) if raw else None

    def schedule(self) -> bytes | str | None:
        return self._redis.get(keys.BEAT_SCHEDULE)

    def skipped(self) -> dict[str, int]:
        return {keys.text(k): int(v) for k, v in self._redis.hgetall(keys.BEAT_SKIPPED).items()}
