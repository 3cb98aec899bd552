"""Beat's state: the lock that makes one beat of several the active one,
the time of the last round it sent, the schedule it runs, and the checks it
skipped. Beat writes; the controller (the last-round gauge, the overdue
message) and `fleet get ph` read (`last_round`, `published_schedule`,
`skipped_checks`). The keys and the Redis calls are in `fleet.store.beat`.

The lock is a plain Redis lock with a random owner id, taken or extended so
only its holder extends it; a holder that stops (SIGKILL, partition, a
stall longer than LOCK_TTL) loses it when the key expires, and a standby
takes it at its next attempt. A beat that stops cleanly releases it at once.
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from typing import Any

from fleet.store import Store

# The active beat renews every RENEW_EVERY seconds; a standby tries every
# STANDBY_EVERY. A standby takes over at most LOCK_TTL + STANDBY_EVERY after
# the active beat stopped renewing.
LOCK_TTL = 15.0
RENEW_EVERY = LOCK_TTL / 3
STANDBY_EVERY = 1.0


def new_owner() -> str:
    """This beat's lock id: host and pid (for people reading the key) and a
    random part (two processes never share one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def connect(url: str) -> Store:
    return Store.from_url(url, timeout=5, connect_timeout=5)


def hold(store: Store, owner: str, ttl: float = LOCK_TTL) -> bool:
    """Take the lock if it is free, extend it if `owner` holds it."""
    return store.beat.hold(owner, ttl)


def release(store: Store, owner: str) -> bool:
    """Drop the lock if `owner` holds it."""
    return store.beat.release(owner)


def holder(store: Store) -> str | None:
    return store.beat.holder()


def schedule_doc(interval: float, timeout: float, overdue_after: float, installation: str, providers: list[str],
                 owner: str, now: float) -> dict[str, Any]:
    """What beat publishes: the effective schedule, and who published it when."""
    return {"interval": interval, "timeout": timeout, "overdue_after": overdue_after, "installation": installation,
            "providers": list(providers), "beat": owner, "published_at": now}


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))


def publish_schedule(store: Store, schedule: dict[str, Any]) -> None:
    """No expiry: with beat gone the readers still need the deployed schedule."""
    store.beat.set_schedule(_json(schedule))


def record_round(store: Store, at: float, schedule: dict[str, Any], skipped: list[str]) -> None:
    """A round was sent at `at`: stamp it, republish the schedule, count the
    providers skipped (no live worker)."""
    store.beat.record_round(at, _json({**schedule, "published_at": at}), skipped)


# --- readers ------------------------------------------------------------------------


def last_round(store: Store) -> float | None:
    """When the active beat last sent a round (Unix time), or None."""
    raw = store.beat.last_round()
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def published_schedule(store: Store) -> dict[str, Any] | None:
    """The schedule the active beat runs: interval, timeout, overdue_after
    (seconds), installation, providers, beat (its lock id), published_at;
    None if no beat published one (or the value is not ours)."""
    raw = store.beat.schedule()
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


def skipped_checks(store: Store) -> dict[str, int]:
    """provider → checks beat did not send because no worker was alive."""
    return store.beat.skipped()
