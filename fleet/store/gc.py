"""Orphan GC's state in Redis (keys in `fleet.store.keys`: `GC_LOCK`, `GC_LAST`).

`GC_LOCK` is the sweep in progress, a hash with a TTL: `id`, `started`,
`deadline` (Unix times) and one field `p:<provider>` per provider sent a
list, holding that provider's state in the sweep: `pending` until its answer
is taken, then `answered`, then what came of it (`swept` or the skip
reason); `no-answer` when the deadline passed first. A sweep holds the lock
while any provider is pending and the deadline has not passed; a new sweep
replaces the record and gets back the providers the old one never heard
from. Every transition is one Lua script, so replicas and redelivered
messages agree on who handles what. `GC_LAST` is a hash: provider → the Unix
time of its last complete sweep (the last-success gauge).
"""

from __future__ import annotations

from typing import Any

import redis

from fleet.store import keys, scripts

PENDING, ANSWERED, NO_ANSWER = "pending", "answered", "no-answer"

# Each script's ARGV, in order (fleet/store/lua/gc/*.lua reads them into these names at its top); a name ending
# in "..." takes the rest of ARGV, a list.
ARGV: dict[str, tuple[str, ...]] = {
    "begin": ("id", "now", "deadline_at", "ttl_ms", "providers..."),
    "move": ("id", "field", "was", "becomes"),
    "lapse": ("id", "now"),
}
LUA = scripts.load(ARGV, folder="gc")  # read once


def _texts(got: Any) -> list[str]:
    return [keys.text(x) for x in (got or [])]


class GcState:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._begin = client.register_script(LUA.texts["begin"])
        self._move = client.register_script(LUA.texts["move"])
        self._lapse = client.register_script(LUA.texts["lapse"])

    def begin(self, sweep: str, providers: list[str], now: float, deadline: float, ttl: float) -> tuple[bool, list[str]]:
        """Start sweep `sweep` over `providers` (all pending) unless one is in
        progress: (started, providers the replaced sweep never heard from)."""
        got = _texts(self._begin(keys=[keys.GC_LOCK],
                                 args=LUA.argv("begin", id=sweep, now=repr(now), deadline_at=repr(deadline),
                                               ttl_ms=max(1, int(ttl * 1000)), providers=providers)))
        return (bool(got) and got[0] == "ok"), got[1:]

    def take(self, sweep: str, provider: str) -> bool:
        """The answer of `provider` in `sweep` is ours to handle (pending → answered): once, across replicas."""
        return bool(self._move(keys=[keys.GC_LOCK], args=LUA.argv("move", id=sweep, field="p:" + provider, was=PENDING,
                                                                  becomes=ANSWERED)))

    def settle(self, sweep: str, provider: str, state: str) -> bool:
        """What came of an answered provider (`swept` or a skip reason)."""
        return bool(self._move(keys=[keys.GC_LOCK], args=LUA.argv("move", id=sweep, field="p:" + provider, was=ANSWERED,
                                                                  becomes=state)))

    def lapse(self, sweep: str, now: float) -> list[str]:
        """Providers of `sweep` still pending at its deadline, now `no-answer` (each returned once)."""
        return _texts(self._lapse(keys=[keys.GC_LOCK], args=LUA.argv("lapse", id=sweep, now=repr(now))))

    def current(self) -> dict[str, str]:
        return {keys.text(k): keys.text(v) for k, v in self._redis.hgetall(keys.GC_LOCK).items()}

    def set_last(self, provider: str, at: float) -> None:
        self._redis.hset(keys.GC_LAST, provider, repr(at))

    def last(self) -> dict[str, bytes | str]:
        """provider → the Unix time (as stored) of its last complete sweep."""
        return {keys.text(k): v for k, v in self._redis.hgetall(keys.GC_LAST).items()}

    def forget_last(self, keep: set[str]) -> list[str]:
        """Drop the last-sweep times of providers not in `keep` (no longer configured)."""
        gone = [p for p in self.last() if p not in keep]
        if gone:
            self._redis.hdel(keys.GC_LAST, *gone)
        return gone
