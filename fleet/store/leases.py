"""The lease API's state in Redis (`fleet api`, issue 14): leases, the load of
each proxy, sticky bindings, cooldowns and error counts. Every decision that
must hold across API replicas is one Lua script, so any number of `fleet api`
processes serve one consistent pool and a restart loses nothing.

Keys (all under `fleet:lease:`, defined in `fleet.store.keys`; the proxy keys
are the Proxy reconciler's `<namespace>/<name>` of `fleet:px:endpoints`):

- `docs`      hash: lease id → {"proxy","uid","instance","ip","port","target","sticky","expires","granted"}
  (JSON; uid, instance, ip and port are the endpoint's at grant time)
- `expiry`    sorted set: lease id → when it expires (Unix time); the sweep and the active-leases gauge
- `held:<p>`  sorted set: lease id → expiry, the open leases of proxy p (when the first frees up)
- `load`      sorted set: proxy → open leases; scanned by ascending load, so full proxies are never visited
- `sticky:<k>` string: the proxy the sticky key k was last leased, with a TTL
- `cool:target` sorted set: "<proxy>|<target>" → end of the target-scoped cooldown
- `cool:global` sorted set: proxy → end of the global cooldown
- `errors`    hash: proxy → `error` reports in a row
- `released:<id>` string: the first release's answer ("released", "revoked:<why>", "expired"), kept
  RELEASE_KEEP seconds (Redis expires it), so a second release answers the same
- `refused:<pool>` sorted set: lease id → when, the lease requests naming that pool (a ProxyPool's name)
  refused for want of a free member (busy or none), kept REFUSED_WINDOW seconds and at most REFUSED_MAX:
  the pool's demand the pool controller reads (`fleet.pools`)
- `epoch`     hash: id (random, written when the first script finds none), created, seq (bumped by
  every lease and renew), grace (until when nothing new is leased)

The epoch guard (issue 21): every lease and renew script, and each API
process's check every few seconds, is given the epoch id and the highest
`seq` that process saw. The epoch gone (Redis restarted empty: a new one
is written), another id (another process wrote that new one), or a `seq`
not above what the process saw (a failover to a replica that was behind,
an AOF that lost its last second) mean Redis lost lease data: the script
sets `grace` to now + the grace period (never shortening it), and while it
is in force the lease script grants nothing and the renew script re-creates
the leases it no longer knows from what the client tells it (its proxy,
target and address), within capacity. Every answer starts with the guard's
header: seq, epoch id, why a loss was seen ('' none), grace end.

Expired leases are swept (at most 100 per call) at the start of every lease,
so a proxy's load never counts a lease past its expiry. A proxy is leasable
when its endpoint is in `fleet:px:endpoints`, the prober's verdict for the
same uid is not `healthy: false` (no verdict yet counts as healthy), it is
not cooling down globally or for the target, and its load is below the
limit; these are read inside the script, so a proxy that turns unhealthy or
is deleted stops being leased at once. A lease is revoked when its proxy is
gone, unhealthy, or replaced: another uid, or the same uid on another
instance (the endpoint's `instance`, the provider's id, when both name one;
or another ip:port), so a lease never answers `released` with an address
that no longer is its proxy's. The keys the scripts build from the
proxy or sticky key are not declared in KEYS: fleet runs on one Redis, not a
cluster (like every other fleet key, they are not per installation).

`Leases` runs the scripts on the shared synchronous client (`Store.leases`:
tests, the benchmark's set-up); `AsyncLeases` runs the same scripts on a
`redis.asyncio` client for the API's event loop.

The scripts are fleet/store/lua/<script>.lua (package data), read once at
import by `fleet.store.scripts`: each runs as `CONSTANTS` (Lua locals: key
prefixes and limits), then common.lua's shared functions, then its own file.
`ARGV` is the one layout of each script's arguments: the call objects name
their values, `argv` orders them, and each script reads them into locals of
those names at its top (tests/fleet/test_store_lua.py holds the two sides
together).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from fleet.store import keys, scripts

PREFIX, DOCS, EXPIRY, HELD, LOAD = keys.LEASE_PREFIX, keys.LEASE_DOCS, keys.LEASE_EXPIRY, keys.LEASE_HELD, keys.LEASE_LOAD
SESSION, LIFE, SESSIONS = keys.LEASE_SESSION, keys.LEASE_LIFE, keys.LEASE_SESSIONS
STICKY, COOL_TARGET, COOL_GLOBAL, ERRORS = keys.LEASE_STICKY, keys.LEASE_COOL_TARGET, keys.LEASE_COOL_GLOBAL, keys.LEASE_ERRORS
RELEASED, EPOCH, REFUSED = keys.LEASE_RELEASED, keys.LEASE_EPOCH, keys.LEASE_REFUSED
ALL_FIXED = (DOCS, EXPIRY, LOAD, COOL_TARGET, COOL_GLOBAL, ERRORS)

SWEEP_BATCH = 100  # expired leases swept per call
SYNC_EVERY = 10.0  # seconds between the load set's syncs with the Running proxies (keep_synced)
RELEASE_KEEP = 300.0  # seconds a release's answer is kept for a repeated release (a client's retry)
SCAN_LIMIT = 5000  # proxies one lease request examines at most
REFUSED_WINDOW = 120.0  # seconds a pool's refused lease request counts as demand (the longest autoscale look-back)
REFUSED_MAX = 100_000  # refused requests kept per pool at most (the newest)

# The names the scripts know as constants (common.lua), declared as Lua locals in front of them once at load.
CONSTANTS: dict[str, str | int | float] = {
    "HELD_PREFIX": HELD, "SESSION_PREFIX": SESSION, "STICKY_PREFIX": STICKY, "RELEASED_PREFIX": RELEASED, "EPOCH_KEY": EPOCH,
    "REFUSED_PREFIX": REFUSED, "SWEEP_BATCH": SWEEP_BATCH, "REFUSED_WINDOW": REFUSED_WINDOW, "REFUSED_MAX": REFUSED_MAX,
    "LIFE_PREFIX": LIFE, "SESSIONS_KEY": SESSIONS,
}

# Each script's ARGV, in order: the one layout both sides follow. `argv` lays a call's named values out in
# this order, and each fleet/store/lua/<script>.lua reads them into locals of the same names at its top
# (tests/fleet/test_store_lua.py compares the two).
GUARD_ARGV = ("guard_now", "epoch", "seq", "grace", "fresh")  # the epoch guard's (GuardCall), last
ARGV: dict[str, tuple[str, ...]] = {
    "lease": ("now", "lease_id", "expires", "target", "max_per_proxy", "sticky", "sticky_ms", "provider", "region",
              "zone", "rand", "scan_limit", "ttl", "namespaces", "skip", "pool", "session_connections", "keep_sticky",
              "life_uses", "life_age", "life_score", *GUARD_ARGV),
    "renew": ("now", "lease_id", "asked_ttl", "default_ttl", "max_per_proxy", "proxy", "target", "ip", "port",
              "sticky_keep_ms", *GUARD_ARGV),
    "check": GUARD_ARGV,
    "release": ("lease_id", "now", "keep_ms"),
    "report": ("now", "lease_id", "proxy", "target", "outcome", "blocked_s", "errors_max", "global_s", "sticky",
               "life_decrement"),
    "sync": ("now",),
    "pace": ("now", "interval", "most"),
}


LUA = scripts.load(ARGV, constants=CONSTANTS, shared=("common",))  # fleet/store/lua/<script>.lua, read once
SCRIPTS, argv = LUA.texts, LUA.argv

_KEYS7 = [DOCS, EXPIRY, LOAD, keys.PX_ENDPOINTS, keys.PROBE_VERDICTS, COOL_TARGET, COOL_GLOBAL]
_REPORT_KEYS = [*_KEYS7, ERRORS]
_KEYS7_B = [k.encode() for k in _KEYS7]  # the API's hot path: bytes, which redis-py sends as they are
_REPORT_KEYS_B = [k.encode() for k in _REPORT_KEYS]
HEADER = 4  # the guard's header in front of every lease, renew and check answer


@dataclass(frozen=True, kw_only=True)
class GuardCall:
    """What one API process knows of the epoch: its id ('' before its first answer), the highest seq it saw,
    and the grace period it applies when a loss shows."""

    epoch: str = ""
    seq: int = 0
    grace: float = 3600.0

    def values(self, now: float, fresh: str = "") -> dict[str, Any]:
        """The guard's ARGV by name (GUARD_ARGV). `fresh`: the id of a new epoch if the script must write one (a
        lease's own random id will do)."""
        return {"guard_now": repr(now), "epoch": self.epoch, "seq": self.seq, "grace": repr(self.grace),
                "fresh": fresh or uuid.uuid4().hex}


@dataclass(frozen=True)
class Epoch:
    """The guard's header: the epoch's seq and id now, why a loss showed ('' none: vanished, changed,
    rolled-back) and the grace end in Redis (0 none)."""

    seq: int
    id: str
    lost: str
    grace_until: float


def _split(got: Sequence[Any]) -> tuple[Epoch, list[Any]]:
    seq, epoch, why, till = (_text(v) for v in got[:HEADER])
    return Epoch(int(seq), epoch, why, float(till)), list(got[HEADER:])


@dataclass(frozen=True, kw_only=True)
class Life:
    """A gateway session's life (Crawlee's SessionPool semantics): it is retired — moved off its proxy, counted
    anew — at its lease after `max_uses` leases, `max_age` seconds, or an error score of `max_error_score` (each
    error report +1, each ok one -`error_decrement`); a ban retires it at once. 0 uses: never retired."""

    max_uses: int = 50
    max_age: float = 3000.0
    max_error_score: float = 3.0
    error_decrement: float = 0.5


@dataclass(frozen=True, kw_only=True)
class LeaseCall:
    """One lease request as the script takes it (validated by the caller)."""

    lease_id: str
    target: str
    expires: float
    max_per_proxy: int
    sticky: str = ""
    sticky_ttl: float = 3600.0
    provider: str = ""
    region: str = ""
    zone: str = ""
    ttl: float = 0.0  # the asked ttl (a renewal without one keeps it); 0: expires - now
    namespaces: tuple[str, ...] = ()  # only proxies in these namespaces (a gateway client's); () any
    skip: tuple[str, ...] = ()  # never these proxies (the gateway's retry after one failed)
    pool: str = ""  # only members of this ProxyPool (the endpoint's `pool`); "" any
    # > 0: the `sticky` session's leases on its proxy are one holder (its concurrent connections share it), at most
    # this many at once; 0: each lease is a holder of its own (the lease API's)
    session_connections: int = 0
    keep_sticky: bool = False  # True: a grant elsewhere (a retry) leaves the session bound to its proxy
    life: Life | None = None  # the `sticky` session's life limits (a gateway session's); None: it lives on

    def values(self, now: float, rand: float) -> dict[str, Any]:
        """The lease script's own ARGV by name (ARGV['lease'], the guard's aside)."""
        return {"now": repr(now), "lease_id": self.lease_id, "expires": repr(self.expires), "target": self.target,
                "max_per_proxy": self.max_per_proxy, "sticky": self.sticky, "sticky_ms": _ms(self.sticky_ttl),
                "provider": self.provider, "region": self.region, "zone": self.zone, "rand": repr(rand),
                "scan_limit": SCAN_LIMIT, "ttl": repr(self.ttl or self.expires - now),
                "namespaces": ",".join(self.namespaces), "skip": ",".join(self.skip), "pool": self.pool,
                "session_connections": self.session_connections, "keep_sticky": int(self.keep_sticky),
                "life_uses": self.life.max_uses if self.life else 0,
                "life_age": repr(self.life.max_age) if self.life else "0",
                "life_score": repr(self.life.max_error_score) if self.life else "0"}


@dataclass(frozen=True, kw_only=True)
class RenewCall:
    """One renewal as the script takes it: `proxy`, `target` (and `ip`, `port` when told) re-create a lease
    Redis lost while the grace is in force."""

    lease_id: str
    ttl: float | None  # None: the lease's own
    default_ttl: float
    max_per_proxy: int
    proxy: str = ""
    target: str = ""
    ip: str = ""
    port: int | None = None
    sticky_keep: float = 3600.0

    def values(self, now: float) -> dict[str, Any]:
        """The renew script's own ARGV by name (ARGV['renew'], the guard's aside)."""
        return {"now": repr(now), "lease_id": self.lease_id, "asked_ttl": "" if self.ttl is None else repr(self.ttl),
                "default_ttl": repr(self.default_ttl), "max_per_proxy": self.max_per_proxy, "proxy": self.proxy,
                "target": self.target, "ip": self.ip, "port": "" if self.port is None else str(self.port),
                "sticky_keep_ms": _ms(self.sticky_keep)}


@dataclass(frozen=True)
class Granted:
    proxy: str
    endpoint: bytes | str  # the endpoint document as stored (JSON)
    egress_ip: str = ""  # the prober's last egress address for this uid ("" unknown)
    retired: str = ""  # the session's life ended at this lease: uses, age, errors ('' not)


@dataclass(frozen=True)
class Busy:
    free_at: float  # the earliest time a matching proxy frees up


@dataclass(frozen=True)
class NoProxy:
    """No Running, healthy proxy matches at all."""


@dataclass(frozen=True)
class Grace:
    """Redis lost lease data: nothing new is leased until the guard's grace end."""


LeaseAnswer = Granted | Busy | NoProxy | Grace


@dataclass(frozen=True)
class Renewed:
    proxy: str
    endpoint: bytes | str
    egress_ip: str
    expires: float
    ttl: float
    recreated: bool  # Redis had lost it; re-created from what the client told


@dataclass(frozen=True)
class NotRenewed:
    kind: str  # revoked | expired | released | unknown | busy
    reason: str = ""  # revoked: gone, replaced, unhealthy


RenewAnswer = Renewed | NotRenewed


def renew_answer(got: Sequence[Any]) -> RenewAnswer:
    kind = _text(got[0])
    if kind == "ok":
        return Renewed(_text(got[1]), got[2], _text(got[3]), float(_text(got[4])), float(_text(got[5])),
                       _text(got[6]) == "recreated")
    return NotRenewed(kind, _text(got[1]) if len(got) > 1 else "")


def _text(v: Any) -> str:
    return keys.text(v) if isinstance(v, (bytes, str)) else str(v)


def lease_answer(got: Sequence[Any]) -> LeaseAnswer:
    kind = _text(got[0])
    if kind == "ok":
        return Granted(_text(got[1]), got[2], _text(got[3]) if len(got) > 3 else "", _text(got[4]) if len(got) > 4 else "")
    if kind == "busy":
        return Busy(float(_text(got[1])))
    if kind == "grace":
        return Grace()
    return NoProxy()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def plain(got: Sequence[Any]) -> list[str]:
    """A script's answer as strings."""
    return [_text(v) for v in got]


@dataclass(frozen=True, kw_only=True)
class ReportCall:
    outcome: str  # ok | blocked | error
    lease_id: str = ""
    proxy: str = ""  # by proxy: '' with `sticky`, the session's proxy
    target: str = ""
    sticky: str = ""  # a session's key: its proxy when none is named; a 'blocked' unbinds it from that proxy
    life_decrement: float = 0.5  # an 'ok' lowers the session's error score by this much (its Life's)

    def values(self, now: float, blocked: float, errors: int, global_: float) -> dict[str, Any]:
        """The report script's ARGV by name (ARGV['report'])."""
        return {"now": repr(now), "lease_id": self.lease_id, "proxy": self.proxy, "target": self.target,
                "outcome": self.outcome, "blocked_s": repr(blocked), "errors_max": errors, "global_s": repr(global_),
                "sticky": self.sticky, "life_decrement": repr(self.life_decrement)}


@dataclass(frozen=True)
class Snapshot:
    """What GET /v1/proxies and /metrics read: endpoints, verdicts, loads, global cooldowns."""

    endpoints: dict[str, bytes | str]
    verdicts: dict[str, bytes | str]
    loads: dict[str, int]
    cooling: dict[str, float]


def _snapshot(got: Sequence[Any]) -> Snapshot:
    endpoints, verdicts, loads, cooling = got
    return Snapshot({keys.text(k): v for k, v in endpoints.items()}, {keys.text(k): v for k, v in verdicts.items()},
                    {keys.text(k): int(float(s)) for k, s in loads}, {keys.text(k): float(s) for k, s in cooling})


class Leases:
    """The scripts on the synchronous client (`Store.leases`)."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._lease, self._release, self._report, self._sync, self._renew, self._check = LUA.register(
            client, "lease", "release", "report", "sync", "renew", "check")

    def lease(self, call: LeaseCall, now: float, rand: float, guard: GuardCall = GuardCall()) -> LeaseAnswer:
        return self.lease_guarded(call, now, rand, guard)[0]

    def lease_guarded(self, call: LeaseCall, now: float, rand: float, guard: GuardCall) -> tuple[LeaseAnswer, Epoch]:
        args = argv("lease", **call.values(now, rand), **guard.values(now, call.lease_id))
        epoch, rest = _split(self._lease(keys=_KEYS7, args=args))
        return lease_answer(rest), epoch

    def renew(self, call: RenewCall, now: float, guard: GuardCall = GuardCall()) -> tuple[RenewAnswer, Epoch]:
        epoch, rest = _split(self._renew(keys=_KEYS7, args=argv("renew", **call.values(now), **guard.values(now))))
        return renew_answer(rest), epoch

    def check(self, now: float, guard: GuardCall) -> Epoch:
        return _split(self._check(keys=_KEYS7, args=argv("check", **guard.values(now))))[0]

    def release(self, lease_id: str, now: float, keep: float = RELEASE_KEEP) -> list[str]:
        return plain(self._release(keys=_KEYS7, args=argv("release", lease_id=lease_id, now=repr(now), keep_ms=_ms(keep))))

    def report(self, call: ReportCall, now: float, blocked: float, errors: int, global_: float) -> list[str]:
        return plain(self._report(keys=_REPORT_KEYS, args=argv("report", **call.values(now, blocked, errors, global_))))

    def sync(self, now: float) -> tuple[int, int]:
        got: Any = self._sync(keys=_KEYS7, args=argv("sync", now=repr(now)))
        return int(got[0]), int(got[1])

    def active(self, now: float) -> int:
        return int(self._redis.zcount(EXPIRY, f"({now!r}", "+inf"))

    def sessions(self, now: float, limit: int = 10_000) -> list[dict[str, Any]]:
        """Gateway sessions with a life whose binding has not lapsed (`fleet get sessions`), soonest to lapse last:
        sticky key, proxy ('' none; a ban or a retirement moved it off, to be rebound at its next lease), born,
        uses, score, lapses (when its binding lapses unused)."""
        rows: list[tuple[bytes, float]] = self._redis.zrevrangebyscore(  # type: ignore[assignment]
            SESSIONS, "+inf", f"({now!r}", start=0, num=limit, withscores=True)
        pipe = self._redis.pipeline(transaction=False)
        for sticky, _ in rows:
            pipe.get(STICKY + keys.text(sticky))
            pipe.hmget(LIFE + keys.text(sticky), "born", "uses", "score")
        got: list[Any] = pipe.execute()
        out = []
        for i, (sticky, lapses) in enumerate(rows):
            bound, (born, uses, score) = got[2 * i], got[2 * i + 1]
            proxy = keys.text(bound) if bound else ""
            out.append({"sticky": keys.text(sticky), "proxy": "" if proxy.startswith("!") else proxy,
                        "born": float(born or 0), "uses": int(uses or 0), "score": float(score or 0),
                        "lapses": float(lapses)})
        return out

    def lease_doc(self, lease_id: str) -> bytes | str | None:
        got: Any = self._redis.hget(DOCS, lease_id)
        return got  # type: ignore[no-any-return]

    def loads(self) -> dict[str, int]:
        got: Any = self._redis.zrange(LOAD, 0, -1, withscores=True)
        return {keys.text(k): int(float(s)) for k, s in got}

    def held(self, proxy: str, now: float) -> int:
        return int(self._redis.zcount(HELD + proxy, f"({now!r}", "+inf"))

    def of_proxy(self, proxy: str, now: float) -> dict[str, Any]:
        """One proxy's lease state at `now` (`fleet describe px`): "leases", its open leases soonest to expire
        first, each {"id", "expires", "doc"} (doc the stored lease, None if gone); "cooldowns", target → until, of its
        target cooldowns in force; "global", the end of its global cooldown in force (None: none); "errors", its error
        reports in a row. A read only: expired leases are left to the lease API's sweep."""
        low = f"({now!r}"
        pipe = self._redis.pipeline(transaction=False)
        pipe.zrangebyscore(HELD + proxy, low, "+inf", withscores=True)
        pipe.zscore(COOL_GLOBAL, proxy)
        pipe.hget(ERRORS, proxy)
        held, global_until, errors = pipe.execute()
        ids = [keys.text(i) for i, _ in held]
        docs: list[Any] = list(self._redis.hmget(DOCS, ids)) if ids else []
        prefix = proxy + "|"
        cooldowns = {keys.text(member)[len(prefix):]: float(until)
                     for member, until in self._redis.zscan_iter(COOL_TARGET, match=_glob_escape(prefix) + "*", count=1000)
                     if float(until) > now and keys.text(member).startswith(prefix)}
        return {
            "leases": [{"id": i, "expires": float(e), "doc": d} for i, (_, e), d in zip(ids, held, docs, strict=True)],
            "cooldowns": dict(sorted(cooldowns.items(), key=lambda kv: kv[1])),
            "global": float(global_until) if global_until is not None and float(global_until) > now else None,
            "errors": int(errors or 0),
        }

    def usage(self, now: float) -> tuple[dict[str, int], dict[str, int]]:
        """(open leases, active cooldowns) by proxy key at `now`, in one round trip (the pool
        controller's scale-down order): the load set, and the target and global cooldowns in force."""
        low = f"({now!r}"
        pipe = self._redis.pipeline(transaction=False)
        pipe.zrange(LOAD, 0, -1, withscores=True)
        pipe.zrangebyscore(COOL_TARGET, low, "+inf")
        pipe.zrangebyscore(COOL_GLOBAL, low, "+inf")
        loads, targets, globals_ = pipe.execute()
        cooling: dict[str, int] = {}
        for raw in [*(keys.text(t).rsplit("|", 1)[0] for t in targets), *(keys.text(g) for g in globals_)]:
            cooling[raw] = cooling.get(raw, 0) + 1
        return {keys.text(k): max(0, int(float(s))) for k, s in loads}, cooling

    def refused(self, pool: str, now: float, window: float) -> int:
        """Lease requests naming `pool` refused in the last `window` seconds (at most REFUSED_WINDOW)."""
        return int(self._redis.zcount(REFUSED + pool, repr(now - min(window, REFUSED_WINDOW)), "+inf"))

    def dump(self) -> dict[str, Any]:
        """Every lease key and its value (tests: 'nothing in Redis changed')."""
        out: dict[str, Any] = {}
        for key in self._redis.scan_iter(match=PREFIX + "*"):
            name = keys.text(key)
            kind = keys.text(self._redis.type(name))
            if kind == "hash":
                out[name] = self._redis.hgetall(name)
            elif kind == "zset":
                out[name] = self._redis.zrange(name, 0, -1, withscores=True)
            else:
                out[name] = self._redis.get(name)
        return out


def _glob_escape(text: str) -> str:
    """`text` matched literally by a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def online_replicas(info: dict[str, Any]) -> int:
    """The replicas of INFO replication that stream (state online): one still in its first sync
    (wait_bgsave, send_bulk) would make every WAIT run to its timeout."""
    if info.get("role") != "master":
        return 0
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


class AsyncLeases:
    """The same scripts on a `redis.asyncio` client (the API's event loop)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._lease, self._release, self._report, self._sync, self._renew, self._check, self._pace = LUA.register(
            client, "lease", "release", "report", "sync", "renew", "check", "pace")

    @classmethod
    def from_url(cls, url: str, timeout: float = 5, connect_timeout: float = 5, max_connections: int = 128) -> AsyncLeases:
        """A bounded pool that waits (up to `timeout`) for a free connection: redis.asyncio's
        default pool fails at once past 100 connections (MaxConnectionsError, a 503 under
        a burst of clients), and every request holds one only for its script's round trip."""
        from fleet.store import target

        return cls(target.async_client(url, max_connections, timeout, socket_timeout=timeout,
                                       socket_connect_timeout=connect_timeout, health_check_interval=30))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._redis.aclose(close_connection_pool=True)  # its own pool (from_url): nobody else's

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    async def _eval(self, script: Any, keys_: list[bytes], args: list[Any]) -> Any:
        """EVALSHA of a registered script (SCRIPT LOAD and again when Redis does not know it: a restart)."""
        try:
            return await self._redis.evalsha(script.sha, len(keys_), *keys_, *args)
        except NoScriptError:
            script.sha = await self._redis.script_load(script.script)
            return await self._redis.evalsha(script.sha, len(keys_), *keys_, *args)

    async def _waited(self, script: Any, args: list[Any], wait_ms: int) -> tuple[Any, int | None]:
        """The script's answer, and with `wait_ms` > 0 how many replicas had it within that time (Redis
        WAIT on the same connection, in one round trip: EVALSHA and WAIT written together, without the
        SCRIPT EXISTS redis-py's pipelines send first for a registered script); None when not waited."""
        if wait_ms <= 0:
            return await self._eval(script, _KEYS7_B, args), None
        for attempt in (1, 2):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(_KEYS7_B), *_KEYS7_B, *args)
                pipe.execute_command("WAIT", 1, wait_ms)
                try:
                    got, acked = await pipe.execute()
                except NoScriptError:
                    if attempt == 2:
                        raise
                    script.sha = await self._redis.script_load(script.script)
                    continue
            return got, int(acked)
        raise AssertionError("unreachable")

    async def pace(self, *, proxy: str, target: str, interval: float, most: float, now: float) -> float:
        """Seconds until `proxy`'s next turn at `target` (one per `interval` s, every replica's turns counted): the
        turn taken when it is at most `most` seconds away, else not."""
        keys_ = [*_KEYS7_B, (keys.LEASE_PACE + f"{proxy}|{target}").encode()]
        got = plain(await self._eval(self._pace, keys_, argv("pace", now=repr(now), interval=repr(interval),
                                                                   most=repr(most))))
        return float(got[1])

    async def sessions_active(self, now: float) -> int:
        """Gateway sessions with a life whose binding has not lapsed (every replica's)."""
        return int(await self._redis.zcount(SESSIONS, f"({now!r}", "+inf"))

    async def lease(self, call: LeaseCall, now: float, rand: float, guard: GuardCall = GuardCall(),
                    wait_ms: int = 0) -> tuple[LeaseAnswer, Epoch, int | None]:
        args = argv("lease", **call.values(now, rand), **guard.values(now, call.lease_id))
        got, acked = await self._waited(self._lease, args, wait_ms)
        epoch, rest = _split(got)
        return lease_answer(rest), epoch, acked

    async def renew(self, call: RenewCall, now: float, guard: GuardCall = GuardCall(),
                    wait_ms: int = 0) -> tuple[RenewAnswer, Epoch, int | None]:
        got, acked = await self._waited(self._renew, argv("renew", **call.values(now), **guard.values(now)), wait_ms)
        epoch, rest = _split(got)
        return renew_answer(rest), epoch, acked

    async def check(self, now: float, guard: GuardCall) -> Epoch:
        return _split(await self._check(keys=_KEYS7, args=argv("check", **guard.values(now))))[0]

    async def replicas(self) -> int:
        """Replicas online on the master now (INFO replication); 0 when Redis cannot say."""
        try:
            info: Any = await self._redis.info("replication")
        except redis.ResponseError:  # a server (or a fake) without INFO
            return 0
        return online_replicas(info)

    async def release(self, lease_id: str, now: float, keep: float = RELEASE_KEEP) -> list[str]:
        args = argv("release", lease_id=lease_id, now=repr(now), keep_ms=_ms(keep))
        return plain(await self._eval(self._release, _KEYS7_B, args))

    async def report(self, call: ReportCall, now: float, blocked: float, errors: int, global_: float) -> list[str]:
        args = argv("report", **call.values(now, blocked, errors, global_))
        return plain(await self._eval(self._report, _REPORT_KEYS_B, args))

    async def sync(self, now: float) -> tuple[int, int]:
        got: Any = await self._sync(keys=_KEYS7, args=argv("sync", now=repr(now)))
        return int(got[0]), int(got[1])

    async def keep_synced(self, clock: Callable[[], float], log: logging.Logger, every: float = SYNC_EVERY) -> None:
        """`sync` every `every` s, for ever (a task of each process that leases: the lease API, the gateway), so
        entries of gone proxies leave the load set and new ones join it; Redis away is logged once, not raised."""
        failing = False
        while True:
            try:
                joined, left = await self.sync(clock())
                if joined or left:
                    log.debug("load set synced: %d joined, %d left", joined, left)
                if failing:
                    log.info("Redis answers again")
                failing = False
            except (redis.RedisError, OSError) as exc:  # TimeoutError is an OSError
                if not failing:
                    log.warning("cannot sync the lease load set with Redis: %s", type(exc).__name__)
                failing = True
            await asyncio.sleep(every)

    async def snapshot(self) -> Snapshot:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PX_ENDPOINTS)
            pipe.hgetall(keys.PROBE_VERDICTS)
            pipe.zrange(LOAD, 0, -1, withscores=True)
            pipe.zrange(COOL_GLOBAL, 0, -1, withscores=True)
            got = await pipe.execute()
        return _snapshot(got)

    async def gauges(self, now: float) -> tuple[int, int, int]:
        """(open leases, target-scoped cooldowns, global cooldowns) at `now`."""
        low = f"({now!r}"
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcount(EXPIRY, low, "+inf")
            pipe.zcount(COOL_TARGET, low, "+inf")
            pipe.zcount(COOL_GLOBAL, low, "+inf")
            got = await pipe.execute()
        return int(got[0]), int(got[1]), int(got[2])
