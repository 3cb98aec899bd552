"""Beat's state in Redis: the lock that makes one beat of several the active
one, the time of the last round it sent, the schedule it runs, and the
checks it skipped. Beat writes; the controller (the last-round gauge, the
overdue message) and `fleet get ph` read (`last_round`,
`published_schedule`, `skipped_checks`).

The keys are not namespaced by installation, like every other key and queue
in the broker's database: one Redis database holds one installation.

The lock is a plain Redis lock, `SET NX PX` with a random owner id, taken or
extended by one Lua script so only its holder extends it; a holder that
stops (SIGKILL, partition, a stall longer than LOCK_TTL) loses it when the
key expires, and a standby takes it at its next attempt. A beat that stops
cleanly releases it at once (compare-and-delete).
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from typing import Any

import redis

LOCK_KEY = "fleet:beat:lock"
LAST_ROUND_KEY = "fleet:beat:last_round"
SCHEDULE_KEY = "fleet:beat:schedule"
SKIPPED_KEY = "fleet:beat:skipped"

# The active beat renews every RENEW_EVERY seconds; a standby tries every
# STANDBY_EVERY. A standby takes over at most LOCK_TTL + STANDBY_EVERY after
# the active beat stopped renewing.
LOCK_TTL = 15.0
RENEW_EVERY = LOCK_TTL / 3
STANDBY_EVERY = 1.0

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


def new_owner() -> str:
    """This beat's lock id: host and pid (for people reading the key) and a
    random part (two processes never share one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30)


def hold(r: redis.Redis, owner: str, ttl: float = LOCK_TTL) -> bool:
    """Take the lock if it is free, extend it if `owner` holds it."""
    return bool(r.eval(_HOLD, 1, LOCK_KEY, owner, int(ttl * 1000)))


def release(r: redis.Redis, owner: str) -> bool:
    """Drop the lock if `owner` holds it."""
    return bool(r.eval(_RELEASE, 1, LOCK_KEY, owner))


def holder(r: redis.Redis) -> str | None:
    raw = r.get(LOCK_KEY)
    return _text(raw) if raw else None


def schedule_doc(interval: float, timeout: float, overdue_after: float, installation: str, providers: list[str],
                 owner: str, now: float) -> dict[str, Any]:
    """What beat publishes: the effective schedule, and who published it when."""
    return {"interval": interval, "timeout": timeout, "overdue_after": overdue_after, "installation": installation,
            "providers": list(providers), "beat": owner, "published_at": now}


def publish_schedule(r: redis.Redis, schedule: dict[str, Any]) -> None:
    """No expiry: with beat gone the readers still need the deployed schedule."""
    r.set(SCHEDULE_KEY, json.dumps(schedule, separators=(",", ":")))


def record_round(r: redis.Redis, at: float, schedule: dict[str, Any], skipped: list[str]) -> None:
    """A round was sent at `at`: stamp it, republish the schedule, count the
    providers skipped (no live worker)."""
    pipe = r.pipeline(transaction=False)
    pipe.set(LAST_ROUND_KEY, repr(at))
    pipe.set(SCHEDULE_KEY, json.dumps({**schedule, "published_at": at}, separators=(",", ":")))
    for name in skipped:
        pipe.hincrby(SKIPPED_KEY, name, 1)
    pipe.execute()


# --- readers ------------------------------------------------------------------------


def last_round(r: redis.Redis) -> float | None:
    """When the active beat last sent a round (Unix time), or None."""
    raw = r.get(LAST_ROUND_KEY)
    try:
        value = float(_text(raw)) if raw else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def published_schedule(r: redis.Redis) -> dict[str, Any] | None:
    """The schedule the active beat runs: interval, timeout, overdue_after
    (seconds), installation, providers, beat (its lock id), published_at;
    None if no beat published one (or the value is not ours)."""
    raw = r.get(SCHEDULE_KEY)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    for key in ("interval", "timeout", "overdue_after"):
        v = doc.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return None
    return doc


def skipped_checks(r: redis.Redis) -> dict[str, int]:
    """provider → checks beat did not send because no worker was alive."""
    return {_text(k): int(v) for k, v in r.hgetall(SKIPPED_KEY).items()}


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
