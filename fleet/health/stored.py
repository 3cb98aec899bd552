"""Check results as the store keeps them: JSON documents in
`fleet.store.results`, decoded and judged here, so the store knows no
feature. The controller writes, gauges and `fleet get ph` read.

The controller is stateless between messages; the store is its memory.
`save_if_newer` is a compare-and-set on `checkedAt`, so a redelivered or
out-of-order message, or a second controller replica, neither regresses the
stored result nor repeats a transition log.

A result is validated once, when it arrives (`fleet.health.messages`), and
stored tagged with `schemaVersion` (`STORED_VERSION`): the tag says "this
document was rebuilt from a validated message by a controller of this
format". Reading it back (the previous result after the compare-and-set,
the overdue sweep, /metrics, `fleet get ph`) trusts the tag: `trust` checks
only its shape (types, a finite `checkedAt` in [2020, now + the clock
skew]), not the content rules again (issue 24: validation twice per record
was 1.22 of the controller's 1.66 ms). A document without the tag (stored
before it existed) is validated in full, as before; one with an unknown tag
(a newer controller's, after a rollback) or failing the shape check reads as
absent, with one WARNING line per provider and reason, so it neither blocks
the compare-and-set forever nor crashes `fleet get ph` or /metrics, and the
next result replaces it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from fleet.health.limits import LIMITS, Limits
from fleet.health.messages import Rejection, validate_message
from fleet.health.results import CheckResult
from fleet.logs import kv
from fleet.serving import DROP_FUTURE, DROP_INVALID, DROP_TOO_LARGE
from fleet.store import Raw, Store
from providers.base import TargetStatus

log = logging.getLogger("fleet.store")

SCHEMA_KEY = "schemaVersion"
# The stored document's format. Bump it when the stored shape changes in a way
# `trust` cannot read; a controller reads its own version, and untagged
# (pre-tag) documents through the full validator.
STORED_VERSION = 1


def encode(result: CheckResult) -> str:
    """The stored document of a validated result: tagged with STORED_VERSION."""
    return json.dumps({SCHEMA_KEY: STORED_VERSION, **result.to_dict()}, separators=(",", ":"))


class _Untrusted(Exception):
    def __init__(self, field: str, detail: str, reason: str = DROP_INVALID) -> None:
        super().__init__(field, detail)
        self.rejection = Rejection(reason, field, detail)


def _number(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _Untrusted(field, "not a number")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise _Untrusted(field, "not a finite number")
    return f


def _opt_number(v: Any, field: str) -> float | None:
    return None if v is None else _number(v, field)


def _str(v: Any, field: str) -> str:
    if not isinstance(v, str):
        raise _Untrusted(field, "not a string")
    return v


def _stored_target(t: Any, at: str) -> TargetStatus:
    """One stored target: the common shape on one test, else `_checked_target`
    (which says which field is wrong)."""
    if type(t) is dict:
        name, address, ready = t.get("name"), t.get("address", ""), t.get("ready", False)
        reason, message, lat, details = t.get("reason", ""), t.get("message", ""), t.get("latencyMillis", 0), t.get("details")
        if (type(name) is str and type(address) is str and type(ready) is bool and type(reason) is str
                and type(message) is str and type(lat) in (int, float) and -1e15 < lat < 1e15  # NaN, ±inf, huge: no
                and (not details or (type(details) is dict
                                     and all(type(k) is str and type(v) is str for k, v in details.items())))):
            return TargetStatus(name, address, ready, reason, message, lat / 1000, dict(details) if details else {})
    return _checked_target(t, at)


def _checked_target(t: Any, at: str) -> TargetStatus:
    if not isinstance(t, dict):
        raise _Untrusted(at, "not an object")
    details = t.get("details") or {}
    if not isinstance(details, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in details.items()):
        raise _Untrusted(f"{at}.details", "not an object of strings")
    ready = t.get("ready", False)
    if not isinstance(ready, bool):
        raise _Untrusted(f"{at}.ready", "not a boolean")
    return TargetStatus(
        name=_str(t.get("name"), f"{at}.name"),
        address=_str(t.get("address", ""), f"{at}.address"),
        ready=ready,
        reason=_str(t.get("reason", ""), f"{at}.reason"),
        message=_str(t.get("message", ""), f"{at}.message"),
        latency=_number(t.get("latencyMillis", 0), f"{at}.latencyMillis") / 1000,
        details=dict(details),
    )


def _trusted(doc: dict[str, Any], now: float, limits: Limits) -> CheckResult:
    provider = doc.get("provider")
    if not isinstance(provider, str) or not provider:
        raise _Untrusted("provider", "not a non-empty string")
    checked_at = _number(doc.get("checkedAt"), "checkedAt")
    if checked_at < limits.earliest:
        raise _Untrusted("checkedAt", f"{checked_at!r} is before 2020-01-01")
    if checked_at > now + limits.clock_skew:
        raise _Untrusted("checkedAt", f"{checked_at - now:.0f}s after the controller's clock", DROP_FUTURE)
    targets = doc.get("targets") or []
    if not isinstance(targets, list) or len(targets) > limits.max_targets:
        raise _Untrusted("targets", f"not a list of at most {limits.max_targets}")
    supported = doc.get("supported", False)
    if not isinstance(supported, bool):
        raise _Untrusted("supported", "not a boolean")
    return CheckResult(
        provider=provider,
        type=_str(doc.get("type", ""), "type"),
        supported=supported,
        checked_at=checked_at,
        targets=tuple(_stored_target(t, f"targets[{i}]") for i, t in enumerate(targets)),
        scheduled_at=_opt_number(doc.get("scheduledAt"), "scheduledAt"),
        worker=_str(doc.get("worker", ""), "worker"),
        recorded_at=_opt_number(doc.get("recordedAt"), "recordedAt"),
    )


def trust(value: Any, now: float, provider: str | None = None, limits: Limits = LIMITS) -> CheckResult | Rejection:
    """A decoded stored document as a result, pure. Tagged STORED_VERSION: its
    content was validated when stored, so only its shape is checked (types,
    a finite checkedAt in [earliest, now + clock_skew], at most max_targets);
    untagged (stored before the tag): validated in full (`validate_message`);
    any other tag: refused. With `provider` (the key it was read from), a
    document naming another provider is refused too. Never raises."""
    if not isinstance(value, dict):
        return Rejection(DROP_INVALID, "", "stored value is not an object")
    if provider is not None and value.get("provider") != provider:
        return Rejection(DROP_INVALID, "provider", "the stored document names another provider than its key")
    if SCHEMA_KEY not in value:
        return validate_message(value, now, limits)
    tag = value[SCHEMA_KEY]
    if tag != STORED_VERSION or isinstance(tag, bool):
        shown = repr(tag)[:40]
        return Rejection(DROP_INVALID, SCHEMA_KEY, f"unknown stored schema version {shown} (this controller reads {STORED_VERSION})")
    try:
        return _trusted(value, now, limits)
    except _Untrusted as exc:
        return exc.rejection


def decode(raw: Raw, now: float, provider: str | None = None, limits: Limits = LIMITS) -> CheckResult | Rejection | None:
    """A stored value (of `provider`'s key, when given): the result, None
    when absent, or why it is unusable (`trust`)."""
    if raw is None:
        return None
    if len(raw) > limits.max_message_bytes:
        return Rejection(DROP_TOO_LARGE, "", f"stored value of {len(raw)} bytes")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return Rejection(DROP_INVALID, "", "stored value is not JSON")
    return trust(value, now, provider, limits)


class Saved(NamedTuple):
    stored: bool  # False: a result at least as new was there
    previous: CheckResult | None  # the result it replaced (None: none, or unusable)
    cached: Raw  # the status cache entry asked for (None: absent or not asked)


class StoredResults:
    """The latest result of each provider, over a `fleet.store.Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._reported: set[tuple[str, str]] = set()  # (provider, reason) logged at WARNING, bounded
        self._lock = threading.Lock()

    def _refused(self, provider: str, why: Rejection, what: str) -> None:
        """One WARNING per provider and reason per process (then DEBUG)."""
        with self._lock:
            first = (provider, why.reason + why.field) not in self._reported and len(self._reported) < LIMITS.max_reported
            if first:
                self._reported.add((provider, why.reason + why.field))
        log.log(logging.WARNING if first else logging.DEBUG, what,
                extra=kv(provider=provider, reason=why.reason, field=why.field, detail=why.detail))

    def _usable(self, provider: str, raw: Raw, now: float) -> CheckResult | None:
        got = decode(raw, now, provider)
        if isinstance(got, Rejection):
            self._refused(provider, got, "ignoring an unusable stored result (read as absent)")
            return None
        return got

    def save_if_newer(self, result: CheckResult, now: float | None = None) -> tuple[bool, CheckResult | None]:
        """`save` without a status cache entry: (stored, the previous result)."""
        saved = self.save(result, now)
        return saved.stored, saved.previous

    def save(self, result: CheckResult, now: float | None = None,
             status: tuple[str, str | None, str] | None = None) -> Saved:
        """Store `result` (validated: `encode` tags it) unless a result at least
        as new is there, and clear the overdue mark: one script
        (`fleet.store.results`), which compares `checkedAt` and treats a stored
        one later than now plus the clock skew, or before 2020, or unreadable,
        as absent, and reads the `status` cache entry (plural, namespace,
        name) in the same round trip when asked. The previous value is read
        with `decode` (trusted by its tag); one that is unusable (an unknown
        tag, from the future, corrupt) counts as absent and is replaced (a
        second script call, only then)."""
        now = time.time() if now is None else now
        payload = encode(result)
        latest, earliest = now + LIMITS.clock_skew, LIMITS.earliest
        results = self.store.results
        stored, raw, cached = results.save_if_newer(result.provider, result.checked_at, payload, latest, earliest,
                                                    status=status)
        prev = decode(raw, now, result.provider)
        if isinstance(prev, Rejection):
            self._refused(result.provider, prev, "replacing an unusable stored result")
            prev = None
            if not stored:  # its checkedAt looked newer, but the value is unusable: replace it (unless it moved)
                stored, raw, _ = results.save_if_newer(result.provider, result.checked_at, payload, latest, earliest,
                                                       replace=raw)
                if not stored:  # another writer stored a newer result in between
                    return Saved(False, self._usable(result.provider, raw, now), cached)
        return Saved(stored, prev, cached)

    def latest(self, provider: str, now: float | None = None) -> CheckResult | None:
        return self._usable(provider, self.store.results.get(provider), time.time() if now is None else now)

    def iter_latest(self, providers: Iterable[str], chunk: int = 20) -> Iterator[CheckResult]:
        """The usable results of `providers`, read `chunk` keys at a time, so a
        reader holds a few results at once however many there are."""
        names = list(providers)
        i = 0
        for raws in self.store.results.get_many(names, chunk):
            now = time.time()
            for raw in raws:
                res = self._usable(names[i], raw, now) if raw is not None else None
                i += 1
                if res is not None:
                    yield res

    def all(self, now: float | None = None) -> dict[str, CheckResult]:
        now = time.time() if now is None else now
        out = {}
        for provider, raw in self.store.results.all():
            res = self._usable(provider, raw, now)
            if res is not None:
                out[res.provider] = res
        return out
