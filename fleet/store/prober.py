"""Prober replicas' membership: `fleet:prober:members`, a sorted set of
replica id → the Unix time its membership lapses. A replica refreshes its
own entry well before it lapses; a live member is one whose score is still
in the future. Entries lapsed long ago are swept by whoever refreshes."""

from __future__ import annotations

import redis

from fleet.store import keys

# Lapsed entries are kept this long (seconds) for `redis-cli` readers, then swept.
SWEEP_AFTER = 3600.0


class ProberMembers:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def beat(self, member: str, lapse: float, now: float) -> list[str]:
        """Refresh `member` until `lapse`; the live members (score > now), sorted, itself included."""
        pipe = self._redis.pipeline()
        pipe.zadd(keys.PROBER_MEMBERS, {member: lapse})
        pipe.zremrangebyscore(keys.PROBER_MEMBERS, "-inf", now - SWEEP_AFTER)
        pipe.zrangebyscore(keys.PROBER_MEMBERS, f"({now}", "+inf")
        live = pipe.execute()[2]
        return sorted(keys.text(m) for m in live)

    def live(self, now: float) -> list[str]:
        found = self._redis.zrangebyscore(keys.PROBER_MEMBERS, f"({now}", "+inf")
        return sorted(keys.text(m) for m in found if isinstance(m, (bytes, str)))

    def leave(self, member: str) -> None:
        self._redis.zrem(keys.PROBER_MEMBERS, member)
