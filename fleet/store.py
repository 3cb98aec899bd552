"""Latest check results in Redis: the controller writes, gauges and
`fleet get ph` read.

The controller is stateless between messages; this store is its memory.
`save_if_newer` is a compare-and-set on `checkedAt`, so a redelivered or
out-of-order message, or a second controller replica, neither regresses the
stored result nor repeats a transition log.
"""

from __future__ import annotations

import json
import time

import redis

from fleet.results import CheckResult

RESULT_KEY = "fleet:result:"
SEEN_KEY = "fleet:seen:"


class Store:
    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    @classmethod
    def from_url(cls, url: str) -> Store:
        return cls(redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30))

    def save_if_newer(self, result: CheckResult) -> tuple[bool, CheckResult | None]:
        """Store `result` unless a result at least as new is there.
        Returns (stored, the previous result)."""
        key = RESULT_KEY + result.provider
        payload = json.dumps(result.to_dict(), separators=(",", ":"))
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.get(key)
                    prev = CheckResult.from_dict(json.loads(raw)) if raw else None
                    if prev is not None and prev.checked_at >= result.checked_at:
                        pipe.unwatch()
                        return False, prev
                    pipe.multi()
                    pipe.set(key, payload)
                    pipe.execute()
                    return True, prev
                except redis.WatchError:
                    continue

    def latest(self, provider: str) -> CheckResult | None:
        raw = self.r.get(RESULT_KEY + provider)
        return CheckResult.from_dict(json.loads(raw)) if raw else None

    def all(self) -> dict[str, CheckResult]:
        keys = sorted(self.r.scan_iter(match=RESULT_KEY + "*", count=1000))
        if not keys:
            return {}
        out = {}
        for raw in self.r.mget(keys):
            if raw:
                res = CheckResult.from_dict(json.loads(raw))
                out[res.provider] = res
        return out

    def first_seen(self, provider: str, now: float | None = None) -> float:
        """When a result was first expected for this provider (set once)."""
        now = time.time() if now is None else now
        key = SEEN_KEY + provider
        self.r.set(key, repr(now), nx=True)
        return float(self.r.get(key) or now)

    def seen(self, provider: str) -> float | None:
        """When a result was first expected, without setting it."""
        raw = self.r.get(SEEN_KEY + provider)
        return float(raw) if raw else None

    def forget(self, keep: set[str]) -> list[str]:
        """Drop results and marks of providers no longer configured."""
        gone = []
        for prefix in (RESULT_KEY, SEEN_KEY):
            for key in self.r.scan_iter(match=prefix + "*"):
                name = (key.decode() if isinstance(key, bytes) else key)[len(prefix):]
                if name not in keep:
                    self.r.delete(key)
                    gone.append(name)
        return sorted(set(gone))

    def queue_length(self, queue: str) -> int:
        return int(self.r.llen(queue))
