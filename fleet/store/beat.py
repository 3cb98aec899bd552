"""Beat's state: the lock (`fleet.store.lock`), the last round's stamp, the published schedule and the
checks skipped. Raw values; `fleet.celery.beat` reads them."""

from __future__ import annotations

import redis

from fleet.store import keys
from fleet.store.lock import OwnedLock


class BeatState(OwnedLock):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, keys.BEAT_LOCK)

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
