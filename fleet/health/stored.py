"""Check results as the store keeps them: JSON documents in
`fleet.store.results`, decoded and validated here, so the store knows no
feature. The controller writes, gauges and `fleet get ph` read.

The controller is stateless between messages; the store is its memory.
`save_if_newer` is a compare-and-set on `checkedAt`, so a redelivered or
out-of-order message, or a second controller replica, neither regresses the
stored result nor repeats a transition log.

Every stored value is validated when read (`fleet.health.messages`): one
that does not pass, e.g. a `checkedAt` later than now plus the skew
allowance written before messages were validated, reads as absent, so it
neither blocks the compare-and-set forever nor crashes `fleet get ph` or
/metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator

from fleet.health.limits import LIMITS, Limits
from fleet.health.messages import Rejection, validate_message
from fleet.health.results import CheckResult
from fleet.logs import kv
from fleet.serving import DROP_INVALID, DROP_TOO_LARGE
from fleet.store import Raw, Store

log = logging.getLogger("fleet.store")


def decode(raw: Raw, now: float, limits: Limits = LIMITS) -> CheckResult | Rejection | None:
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


def _usable(raw: Raw, now: float) -> CheckResult | None:
    got = decode(raw, now)
    return got if isinstance(got, CheckResult) else None


class StoredResults:
    """The latest result of each provider, over a `fleet.store.Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def save_if_newer(self, result: CheckResult, now: float | None = None) -> tuple[bool, CheckResult | None]:
        """Store `result` unless a result at least as new is there, and clear
        the overdue mark: one script (`fleet.store.results`), which compares
        `checkedAt` and treats a stored one later than now plus the clock skew,
        or before 2020, or unreadable, as absent. The previous value is
        validated here; one that does not validate (from the future, corrupt)
        counts as absent and is replaced (a second script call, only then).
        Returns (stored, the previous result)."""
        now = time.time() if now is None else now
        payload = json.dumps(result.to_dict(), separators=(",", ":"))
        latest, earliest = now + LIMITS.clock_skew, LIMITS.earliest
        results = self.store.results
        stored, raw = results.save_if_newer(result.provider, result.checked_at, payload, latest, earliest)
        prev = decode(raw, now)
        if isinstance(prev, Rejection):
            log.warning("replacing an unusable stored result", extra=kv(
                provider=result.provider, reason=prev.reason, field=prev.field, detail=prev.detail))
            prev = None
            if not stored:  # its checkedAt looked newer, but the value is unusable: replace it (unless it moved)
                stored, raw = results.save_if_newer(result.provider, result.checked_at, payload, latest, earliest,
                                                    replace=raw)
                if not stored:  # another writer stored a newer result in between
                    return False, _usable(raw, now)
        return stored, prev

    def latest(self, provider: str, now: float | None = None) -> CheckResult | None:
        return _usable(self.store.results.get(provider), time.time() if now is None else now)

    def iter_latest(self, providers: Iterable[str], chunk: int = 20) -> Iterator[CheckResult]:
        """The usable results of `providers`, read `chunk` keys at a time, so a
        reader holds a few results at once however many there are."""
        for raws in self.store.results.get_many(providers, chunk):
            now = time.time()
            for raw in raws:
                res = _usable(raw, now)
                if res is not None:
                    yield res

    def all(self, now: float | None = None) -> dict[str, CheckResult]:
        raws = self.store.results.all()
        now = time.time() if now is None else now
        out = {}
        for raw in raws:
            res = _usable(raw, now)
            if res is not None:
                out[res.provider] = res
        return out
