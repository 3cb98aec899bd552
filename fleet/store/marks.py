"""Per-provider marks of the controller: when a result was first expected
(`fleet:seen:<provider>`, the overdue clock before any result) and whether
CheckOverdue was already logged (`fleet:overdue:<provider>`)."""

from __future__ import annotations

import redis

from fleet.store import keys


class Marks:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def first_seen(self, provider: str, now: float) -> float:
        """When a result was first expected for this provider (set once)."""
        key = keys.seen(provider)
        self._redis.set(key, repr(now), nx=True)
        return float(self._redis.get(key) or now)

    def seen(self, provider: str) -> float | None:
        """When a result was first expected, without setting it."""
        raw = self._redis.get(keys.seen(provider))
        return float(raw) if raw else None

    def mark_overdue(self, provider: str) -> bool:
        """True when the provider was not marked overdue before."""
        return bool(self._redis.set(keys.overdue(provider), "1", nx=True))

    def clear_overdue(self, provider: str) -> None:
        self._redis.delete(keys.overdue(provider))
