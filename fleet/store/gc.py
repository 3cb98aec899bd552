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

from fleet.store import keys

PENDING, ANSWERED, NO_ANSWER = "pending", "answered", "no-answer"

# KEYS: lock. ARGV: id, now, deadline, ttl ms, provider... → {'busy'} or {'ok', providers the replaced sweep never heard from...}
_BEGIN = """
local deadline = redis.call('hget', KEYS[1], 'deadline')
local unanswered = {}
if deadline then
  local all = redis.call('hgetall', KEYS[1])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'p:' and all[i + 1] == 'pending' then
      table.insert(unanswered, string.sub(all[i], 3))
    end
  end
  if #unanswered > 0 and tonumber(deadline) > tonumber(ARGV[2]) then return {'busy'} end
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'id', ARGV[1], 'started', ARGV[2], 'deadline', ARGV[3])
for i = 5, #ARGV do redis.call('hset', KEYS[1], 'p:' .. ARGV[i], 'pending') end
redis.call('pexpire', KEYS[1], ARGV[4])
local out = {'ok'}
for _, p in ipairs(unanswered) do table.insert(out, p) end
return out
"""

# KEYS: lock. ARGV: id, field, from state, to state → 1 when moved (the sweep is `id` and the field was `from`)
_MOVE = """
if redis.call('hget', KEYS[1], 'id') ~= ARGV[1] then return 0 end
if redis.call('hget', KEYS[1], ARGV[2]) ~= ARGV[3] then return 0 end
redis.call('hset', KEYS[1], ARGV[2], ARGV[4])
return 1
"""

# KEYS: lock. ARGV: id, now → providers still pending once the deadline passed (now `no-answer`)
_LAPSE = """
if redis.call('hget', KEYS[1], 'id') ~= ARGV[1] then return {} end
local deadline = redis.call('hget', KEYS[1], 'deadline')
if not deadline or tonumber(deadline) > tonumber(ARGV[2]) then return {} end
local out = {}
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'p:' and all[i + 1] == 'pending' then
    redis.call('hset', KEYS[1], all[i], 'no-answer')
    table.insert(out, string.sub(all[i], 3))
  end
end
return out
"""


def _texts(got: Any) -> list[str]:
    return [keys.text(x) for x in (got or [])]


class GcState:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._begin = client.register_script(_BEGIN)
        self._move = client.register_script(_MOVE)
        self._lapse = client.register_script(_LAPSE)

    def begin(self, sweep: str, providers: list[str], now: float, deadline: float, ttl: float) -> tuple[bool, list[str]]:
        """Start sweep `sweep` over `providers` (all pending) unless one is in
        progress: (started, providers the replaced sweep never heard from)."""
        got = _texts(self._begin(keys=[keys.GC_LOCK],
                                 args=[sweep, repr(now), repr(deadline), max(1, int(ttl * 1000)), *providers]))
        return (bool(got) and got[0] == "ok"), got[1:]

    def take(self, sweep: str, provider: str) -> bool:
        """The answer of `provider` in `sweep` is ours to handle (pending → answered): once, across replicas."""
        return bool(self._move(keys=[keys.GC_LOCK], args=[sweep, "p:" + provider, PENDING, ANSWERED]))

    def settle(self, sweep: str, provider: str, state: str) -> bool:
        """What came of an answered provider (`swept` or a skip reason)."""
        return bool(self._move(keys=[keys.GC_LOCK], args=[sweep, "p:" + provider, ANSWERED, state]))

    def lapse(self, sweep: str, now: float) -> list[str]:
        """Providers of `sweep` still pending at its deadline, now `no-answer` (each returned once)."""
        return _texts(self._lapse(keys=[keys.GC_LOCK], args=[sweep, repr(now)]))

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
