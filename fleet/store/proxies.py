"""The Proxy reconciler's state in Redis (keys in `fleet.store.keys`, `PX_*`).

Everything a restart or a second replica must see lives here, not in a
process: when each Proxy is next due, who is reconciling it, the provider
call in flight (so never two per Proxy, and at most N per provider), the
call's answer until it is applied, failures in a row, each Proxy's phase
for the gauge, the endpoints of the Running ones (what the prober probes)
and the prober's verdicts (what the controller turns into `Healthy`). Timed requeues are scores in one sorted set, so a
controller restart or Redis's `visibility_timeout` can neither lose nor
double a 10 s poll or a 5 m quota wait.

Standalone mode keeps the Proxy objects here too (`PX_OBJECTS`), each a JSON
document with a `resourceVersion` counter written by compare-and-set.

Every change that must be atomic is one Lua script, fleet/store/lua/proxies/<script>.lua
(package data, read once at import by `fleet.store.scripts`), its arguments laid out by `ARGV`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from fleet.store import keys, scripts
from fleet.store.results import Raw

# Each script's ARGV, in order: the one layout both sides follow. The methods below name their values,
# `LUA.argv` orders them, and each fleet/store/lua/proxies/<script>.lua reads them into locals of the same
# names at its top (tests/fleet/test_store_lua.py compares the two); common.lua's `begin_step` (claim and
# read for one reconcile step) is in front of each, so `finish` begins the step that applies an answer in
# the same round trip as `step_begin` does.
STEP_ARGV = ("owner", "claim_ms", "key", "read_object")
ARGV: dict[str, tuple[str, ...]] = {
    "begin": ("key", "doc", "call_ms", "slot_limit", "now", "slot_expires", "stage_cloud_init", "cloud_init",
              "cloud_init_ms"),
    "step_begin": STEP_ARGV,
    "step_end": ("owner", "key", "ops"),
    "finish": ("key", "call_id", "outcome", "now", *(f"step_{name}" for name in STEP_ARGV)),
    "put_object": ("key", "expected_version", "doc"),
    "begin_list": ("doc", "now", "gate_ms"),
    "mark_list": ("list_id", "field", "value"),
}
LUA = scripts.load(ARGV, folder="proxies", shared=("common",))  # read once


@dataclass(frozen=True)
class StepRead:
    """What one reconcile step reads, in the round trip that claims the Proxy (`Proxies.begin_step`)."""

    object: Raw = None  # the standalone object (None when not asked for, or absent)
    call: Raw = None  # the call in flight
    outcome: Raw = None  # its answer not yet applied
    failures: Raw = None  # failed calls in a row (`failures_of` reads it)
    verdict: Raw = None  # the prober's verdict
    phase: Raw = None  # `phase|since` as last published


@dataclass
class Tail:
    """A step's writes that need no answer, kept in order and sent with the
    claim's release in one round trip (`Proxies.end_step`)."""

    ops: list[list[str]] = field(default_factory=list)

    def schedule(self, at: float) -> None:
        """Due at `at`, unless it is already due sooner."""
        self.ops.append(["due", repr(at)])

    def set_state(self, phase: str, endpoint: str | None) -> None:
        """The Proxy's phase (`phase|since` as the reconciler encodes it) and, while it is Running, its
        endpoint document (what the prober probes and a list is diffed against); None removes the endpoint."""
        self.ops.append(["state", phase, endpoint or ""])

    def applied(self, outcome: Raw, failures: int | None, spec_hash: str = "") -> None:
        """The outcome was acted on: drop it (only if no newer one came) and keep the count of failures in a
        row (None: leave it; 0: a success ends the run), tied to the spec hash it was counted under
        (`failures_of` reads 0 once the spec moves)."""
        if outcome is None and failures is None:
            return
        text = keys.text(outcome) if outcome is not None else ""
        self.ops.append(["applied", text, "-" if failures is None else f"{failures}|{spec_hash}" if failures else ""])

    def forget(self) -> None:
        """The Proxy is gone: everything kept for it (its call's slot lapses by itself)."""
        self.ops.append(["forget"])


def failures_of(raw: Raw, spec_hash: str = "") -> int:
    """A stored count of failed calls in a row, under this spec hash (a count kept under another hash is a run
    the spec change ended: 0)."""
    if raw is None:
        return 0
    count, sep, counted_under = keys.text(raw).partition("|")
    if sep and counted_under != spec_hash:
        return 0
    try:
        return max(0, int(count))
    except ValueError:
        return 0


class Proxies:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._begin = client.register_script(LUA.texts["begin"])
        self._step_begin = client.register_script(LUA.texts["step_begin"])
        self._step_end = client.register_script(LUA.texts["step_end"])
        self._finish = client.register_script(LUA.texts["finish"])
        self._put_object = client.register_script(LUA.texts["put_object"])
        self._begin_list = client.register_script(LUA.texts["begin_list"])
        self._mark_list = client.register_script(LUA.texts["mark_list"])

    # -- when each Proxy is due --------------------------------------------------

    def due(self, now: float, limit: int = 100) -> list[str]:
        got: Any = self._redis.zrangebyscore(keys.PX_DUE, "-inf", repr(now), start=0, num=limit)
        return [keys.text(k) for k in got]

    def schedule(self, key: str, at: float, earlier_only: bool = True) -> None:
        """Due at `at`, unless (earlier_only) it is already due sooner."""
        self._redis.zadd(keys.PX_DUE, {key: at}, lt=earlier_only)

    def schedule_missing(self, pending: Iterable[str], at: float) -> int:
        """Due at `at` for each key not scheduled at all (a relist, a Redis that lost its data)."""
        mapping = {k: at for k in pending}
        return int(self._redis.zadd(keys.PX_DUE, mapping, nx=True) or 0) if mapping else 0

    def schedule_now(self, pending: Iterable[str], at: float) -> None:
        """Each key due at `at` unless due sooner (one command for all)."""
        self.schedule_at({k: at for k in pending})

    def schedule_at(self, due: Mapping[str, float]) -> None:
        """Each key due at its time unless due sooner (one command for all)."""
        if due:
            self._redis.zadd(keys.PX_DUE, dict(due), lt=True)

    def next_due(self) -> float | None:
        got = self._redis.zrange(keys.PX_DUE, 0, 0, withscores=True)
        return float(got[0][1]) if got else None

    # -- one reconcile step: a round trip to start it, one to end it ---------------------------

    def begin_step(self, key: str, owner: str, ttl: float, read_object: bool) -> StepRead | None:
        """Claim the Proxy for one step (None: another replica holds it), take it off the due set, and read
        what the step needs (its standalone object too, with `read_object`)."""
        got: Any = self._step_begin(
            keys=[keys.PX_CLAIM + key, keys.PX_DUE, keys.PX_OBJECTS, keys.PX_CALL + key, keys.PX_OUTCOME + key,
                  keys.PX_FAILURES, keys.PROBE_VERDICTS, keys.PX_PHASE],
            args=LUA.argv("step_begin", owner=owner, claim_ms=_ms(ttl), key=key, read_object="1" if read_object else ""))
        if not got:
            return None
        return StepRead(*got[1:7])

    def end_step(self, key: str, owner: str, tail: Tail) -> None:
        """The step's writes (`Tail`) in order, then its claim released (if still `owner`'s)."""
        self._step_end(keys=[keys.PX_CLAIM + key, keys.PX_DUE, keys.PX_PHASE, keys.PX_ENDPOINTS, keys.PX_FAILURES,
                             keys.PX_OUTCOME + key, keys.PROBE_VERDICTS],
                       args=LUA.argv("step_end", owner=owner, key=key,
                                     ops=json.dumps(tail.ops, separators=(",", ":"), ensure_ascii=False)))

    # -- one replica per Proxy -------------------------------------------------------

    def claim(self, key: str, owner: str, ttl: float) -> bool:
        """Hold the Proxy as `owner` for `ttl` s, as `begin_step` does (another replica's claim, in tests)."""
        return bool(self._redis.set(keys.PX_CLAIM + key, owner, nx=True, px=_ms(ttl)))

    # -- provider calls ------------------------------------------------------------------

    def begin_call(self, key: str, provider: str, doc: str, ttl: float, limit: int, now: float,
                   cloud_init: tuple[str, str, float] | None = None) -> str:
        """'ok' (recorded), 'busy' (one in flight for this Proxy) or 'full:<place in line>' (the provider's
        limit; 0 is next). With `cloud_init` (token, text, TTL s), a create's text is staged on 'ok', readable
        once (`take_cloud_init`) for the TTL at most."""
        token, text, text_ttl = cloud_init if cloud_init is not None else ("", "", 0.0)
        got = self._begin(keys=[keys.PX_CALL + key, keys.PX_SLOTS + provider, keys.PX_WAITING + provider,
                                keys.CLOUD_INIT + token],
                          args=LUA.argv("begin", key=key, doc=doc, call_ms=_ms(ttl), slot_limit=limit, now=repr(now),
                                        slot_expires=repr(now + ttl), stage_cloud_init="1" if cloud_init is not None else "",
                                        cloud_init=text, cloud_init_ms=_ms(text_ttl)))
        return keys.text(got) if isinstance(got, (bytes, str)) else str(got)

    def cancel_call(self, key: str, provider: str) -> None:
        """The message could not be sent: free the Proxy and the slot."""
        pipe = self._redis.pipeline()
        pipe.delete(keys.PX_CALL + key)
        pipe.zrem(keys.PX_SLOTS + provider, key)
        pipe.execute()

    def finish_call(self, key: str, call_id: str, provider: str, outcome: str, now: float,
                    step: tuple[str, float, bool] | None = None) -> tuple[bool, StepRead | None]:
        """Keep the answer if it is the call in flight's (False: dropped). With `step` (owner, claim TTL,
        read the object), the step that applies it begins in the same round trip, as `begin_step`: its
        reads, or None when another replica holds the Proxy."""
        owner, ttl, read_object = step if step is not None else ("", 0.0, False)
        got: Any = self._finish(
            keys=[keys.PX_CALL + key, keys.PX_SLOTS + provider, keys.PX_OUTCOME + key, keys.PX_DUE, keys.PX_WAITING + provider,
                  keys.PX_CLAIM + key, keys.PX_DUE, keys.PX_OBJECTS, keys.PX_CALL + key, keys.PX_OUTCOME + key,
                  keys.PX_FAILURES, keys.PROBE_VERDICTS, keys.PX_PHASE],
            args=LUA.argv("finish", key=key, call_id=call_id, outcome=outcome, now=repr(now), step_owner=owner,
                          step_claim_ms=_ms(ttl) if step else "", step_key=key if step else "",
                          step_read_object="1" if read_object else ""))
        if not got:
            return False, None
        return True, StepRead(*got[2:8]) if len(got) > 1 else None

    def in_flight(self, provider: str, now: float) -> int:
        return int(self._redis.zcount(keys.PX_SLOTS + provider, repr(now), "+inf"))

    def failures(self, key: str, spec_hash: str = "") -> int:
        """Failed calls in a row under this spec hash (a count kept under another hash is a
        run the spec change ended: 0)."""
        return failures_of(self._redis.hget(keys.PX_FAILURES, key), spec_hash)

    # -- a provider's resync list (one per interval, across replicas) --------------------------

    def begin_list(self, provider: str, list_id: str, now: float, interval: float) -> float | None:
        """None when this caller takes the provider's list (and sends it now; the next is due at now +
        interval); else the seconds until it may."""
        doc = json.dumps({"id": list_id, "at": now, "next": now + interval})
        ttl = _ms(2 * interval + 120)
        got = self._begin_list(keys=[keys.PX_LIST + provider], args=LUA.argv("begin_list", doc=doc, now=repr(now), gate_ms=ttl))
        text = keys.text(got) if got is not None else ""
        return None if text == "" else max(0.0, float(text))

    def take_list(self, provider: str, list_id: str) -> float | None:
        """When the provider's current list was asked, the first time its answer comes; None for any other answer."""
        return _number(self._mark_list(keys=[keys.PX_LIST + provider],
                                       args=LUA.argv("mark_list", list_id=list_id, field="answered", value="")))

    def retry_list(self, provider: str, list_id: str, at: float) -> None:
        """The provider's next list is due at `at` (after a failed one: sooner than the interval)."""
        self._mark_list(keys=[keys.PX_LIST + provider], args=LUA.argv("mark_list", list_id=list_id, field="next", value=repr(at)))

    def list_failed(self, provider: str) -> int:
        """One more failed list in a row for the provider; how many now."""
        return int(self._redis.hincrby(keys.PX_LIST_FAILURES, provider, 1))

    def list_succeeded(self, provider: str) -> None:
        self._redis.hdel(keys.PX_LIST_FAILURES, provider)

    # -- what others read: the phase gauge, Running endpoints (the prober) ------------------------

    def endpoints(self) -> dict[str, bytes | str]:
        """Every Running Proxy's endpoint document, by key (the prober's work list)."""
        return {keys.text(k): v for k, v in self._redis.hgetall(keys.PX_ENDPOINTS).items()}

    def endpoint(self, key: str) -> Raw:
        """One Running Proxy's endpoint document (None: not Running, or unknown)."""
        return self._redis.hget(keys.PX_ENDPOINTS, key)

    def phase(self, key: str) -> Raw:
        """One Proxy's `phase|since` as the reconciler stored it (None: none)."""
        return self._redis.hget(keys.PX_PHASE, key)

    # -- the prober's verdicts ---------------------------------------------------------------------

    def put_verdict(self, key: str, doc: str, now: float) -> None:
        """A new verdict for the Proxy (written by the prober on a transition only): kept,
        and the Proxy made due now so the controller writes its Healthy condition."""
        self.put_verdicts([(key, doc, now)])

    def put_verdicts(self, verdicts: list[tuple[str, str, float]]) -> None:
        """`put_verdict` for several Proxies (key, doc, now) in one transaction and one round trip;
        a key appears once."""
        if not verdicts:
            return
        pipe = self._redis.pipeline()
        pipe.hset(keys.PROBE_VERDICTS, mapping={key: doc for key, doc, _ in verdicts})
        pipe.zadd(keys.PX_DUE, {key: now for key, _, now in verdicts}, lt=True)
        pipe.execute()

    def verdict(self, key: str) -> Raw:
        return self._redis.hget(keys.PROBE_VERDICTS, key)

    def verdicts(self) -> dict[str, bytes | str]:
        return {keys.text(k): v for k, v in self._redis.hgetall(keys.PROBE_VERDICTS).items()}

    def phases(self) -> dict[str, bytes | str]:
        """Every Proxy's `phase|since` as the reconciler stored it, by key."""
        return {keys.text(k): v for k, v in self._redis.hgetall(keys.PX_PHASE).items()}

    # -- cloud-init, staged for one create -------------------------------------------------------

    def take_cloud_init(self, token: str) -> Raw:
        """The staged text, deleted as it is read (GETDEL, Redis >= 6.2): a
        second read, or one after the TTL, gets None."""
        got: Raw = self._redis.getdel(keys.CLOUD_INIT + token)
        return got

    # -- standalone objects --------------------------------------------------------------------------

    def objects(self) -> dict[str, bytes | str]:
        return {keys.text(k): v for k, v in self._redis.hgetall(keys.PX_OBJECTS).items()}

    def object_keys(self) -> list[str]:
        """The standalone objects' keys (HKEYS: not their documents)."""
        return [keys.text(k) for k in self._redis.hkeys(keys.PX_OBJECTS)]

    def object(self, key: str) -> Raw:
        return self._redis.hget(keys.PX_OBJECTS, key)

    def mark_synced(self, now: float) -> None:
        self._redis.set(keys.PX_SYNCED, repr(now))

    def synced_at(self) -> float | None:
        raw = self._redis.get(keys.PX_SYNCED)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            return None

    def put_object(self, key: str, expected_version: str, doc: str) -> bool:
        """Write (doc) or delete ('') the object if it still has `expected_version` ('' = absent)."""
        got: Any = self._put_object(keys=[keys.PX_OBJECTS],
                                    args=LUA.argv("put_object", key=key, expected_version=expected_version, doc=doc))
        return bool(got)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _number(raw: Any) -> float | None:
    text = keys.text(raw) if raw is not None else ""
    try:
        return float(text) if text else None
    except ValueError:
        return None
