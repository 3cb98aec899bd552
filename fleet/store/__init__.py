"""Latest check results in Redis: the controller writes, gauges and
`fleet get ph` read.

The controller is stateless between messages; this store is its memory.
`save_if_newer` is a compare-and-set on `checkedAt`, so a redelivered or
out-of-order message, or a second controller replica, neither regresses the
stored result nor repeats a transition log.

Every stored value is validated when read (`fleet.messages`): one that does
not pass, e.g. a `checkedAt` later than now plus the skew allowance written
before messages were validated, reads as absent, so it neither blocks the
compare-and-set forever nor crashes `fleet get ph` or /metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator

import redis

from fleet.health.limits import LIMITS, Limits
from fleet.health.messages import Rejection, validate_message
from fleet.health.results import CheckResult
from fleet.logs import kv
from fleet.metrics import DROP_INVALID, DROP_TOO_LARGE

log = logging.getLogger("fleet.store")

RESULT_KEY = "fleet:result:"
SEEN_KEY = "fleet:seen:"


def decode(raw: bytes | str | None, now: float, limits: Limits = LIMITS) -> CheckResult | Rejection | None:
    """A stored value: the result, None when absent, or why it is unusable."""
    if raw is None:
        return None
    if len(raw) > limits.max_message_bytes:
        return Rejection(DROP_TOO_LARGE, "", f"stored value of {len(raw)} bytes")
    try:
        value = json.loads(raw)
    except ValueError:
        return Rejection(DROP_INVALID, "", "stored value is not JSON")
    return validate_message(value, now, limits)


def _usable(raw: bytes | str | None, now: float) -> CheckResult | None:
    got = decode(raw, now)
    return got if isinstance(got, CheckResult) else None


class Store:
    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    @classmethod
    def from_url(cls, url: str) -> Store:
        return cls(redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30))

    def save_if_newer(self, result: CheckResult, now: float | None = None) -> tuple[bool, CheckResult | None]:
        """Store `result` unless a result at least as new is there.
        Returns (stored, the previous result). A stored value that no longer
        validates (from the future, corrupt) counts as absent and is replaced."""
        key = RESULT_KEY + result.provider
        payload = json.dumps(result.to_dict(), separators=(",", ":"))
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.get(key)
                    prev = decode(raw, time.time() if now is None else now)
                    if isinstance(prev, Rejection):
                        log.warning("replacing an unusable stored result", extra=kv(
                            provider=result.provider, reason=prev.reason, field=prev.field, detail=prev.detail))
                        prev = None
                    if prev is not None and prev.checked_at >= result.checked_at:
                        pipe.unwatch()
                        return False, prev
                    pipe.multi()
                    pipe.set(key, payload)
                    pipe.execute()
                    return True, prev
                except redis.WatchError:
                    continue

    def latest(self, provider: str, now: float | None = None) -> CheckResult | None:
        return _usable(self.r.get(RESULT_KEY + provider), time.time() if now is None else now)

    def iter_latest(self, providers: Iterable[str], chunk: int = 20) -> Iterator[CheckResult]:
        """The usable results of `providers`, read `chunk` keys at a time, so a
        reader holds a few results at once however many there are."""
        names = list(providers)
        for i in range(0, len(names), chunk):
            now = time.time()
            for raw in self.r.mget([RESULT_KEY + n for n in names[i : i + chunk]]):
                res = _usable(raw, now)
                if res is not None:
                    yield res

    def all(self, now: float | None = None) -> dict[str, CheckResult]:
        keys = sorted(self.r.scan_iter(match=RESULT_KEY + "*", count=1000))
        if not keys:
            return {}
        now = time.time() if now is None else now
        out = {}
        for raw in self.r.mget(keys):
            res = _usable(raw, now)
            if res is not None:
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
