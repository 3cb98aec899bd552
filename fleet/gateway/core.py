"""The gateway's core, protocol-neutral: what every front-end (HTTP/1.1 in `fleet.gateway.http1`, SOCKS5 in
`fleet.gateway.socks5`) does per connection, in the front-end's order:

- admit: credentials (a username and a password, however the protocol carried them) → the client of the
  clients file and the username's options (`fleet.gateway.decide`); `permit`: the target port for that client;
- choose: a proxy by the lease rules (`fleet.store.leases`: capacity, cooldowns, stickiness, the client's
  namespaces, the pool, the proxies already tried skipped);
- dial: through the chosen proxy by the `fleet.gateway.dialers.Dialer`; a dial that fails is reported `error` for
  that host, released, and the next proxy tried, at most `max_attempts` in all (`Attempts`);
- relay: a tunnel's bytes both ways with back-pressure, its lease held, renewed by the sweeper, released at its
  close (`relay_tunnel`); a front-end that reads the exchange itself (plain HTTP) reports a broken or banned
  exchange back (`Attempts.failed`) and the core decides whether another proxy is tried;
- release.

Its answers are values, never a protocol's status: `Admitted`, or one of `Unauthorized`, `Forbidden`,
`TunnelLimit`, `NoProxy`, `UpstreamFailed`, `UpstreamTimeout` (each with `label`, the requests metric's outcome);
each front-end translates them into its protocol's reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from fleet import httpguard
from fleet import upstream as wire
from fleet.credentials import Credentials, member_url
from fleet.gateway import decide, intercept
from fleet.gateway.clients import Client
from fleet.gateway.config import GatewayConfig
from fleet.gateway.decide import Options, Target
from fleet.gateway.dialers import Channel, Dialer, DialError, Upstream
from fleet.gateway.metrics import GatewaySeries
from fleet.gateway.rules import Rule, RuleBook, Rules
from fleet.logs import kv
from fleet.store import StoreError
from fleet.store.leases import (
    AsyncLeases,
    Busy,
    Grace,
    Granted,
    LeaseCall,
    Life,
    RenewCall,
    Renewed,
    ReportCall,
)
from fleet.store.leases import NoProxy as NoneLeasable

log = logging.getLogger("fleet.gateway")

_Unavailable = (StoreError, OSError, asyncio.TimeoutError)
CHUNK = 64 * 1024
SWEEP_EVERY = 1.0
SESSIONS_EVERY = 10.0  # seconds between two counts of the active sessions (a gauge)


# -- what the core answers ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Admitted:
    client: Client
    options: Options


@dataclass(frozen=True)
class Unauthorized:
    """No credentials (`missing`), or ones that name no client, a malformed username, a wrong token."""

    missing: bool
    message: str
    label = "unauthorized"


@dataclass(frozen=True)
class Forbidden:
    """A target port outside the client's `ports`."""

    port: int
    label = "forbidden"


@dataclass(frozen=True)
class TunnelLimit:
    """The client's tunnels (`per_client`) or the gateway's are at their limit."""

    per_client: bool
    limit: int
    label = "limited"


@dataclass(frozen=True)
class NoProxy:
    """No proxy could be leased: `why` is what the lease store said (none, busy, grace) or `unavailable` (Redis did
    not answer); `retry_after`: seconds until a busy proxy frees up."""

    why: str
    retry_after: int | None = None

    @property
    def label(self) -> str:
        return {"busy": "busy", "unavailable": "unavailable"}.get(self.why, "no_proxy")


@dataclass(frozen=True)
class UpstreamFailed:
    """Every attempt failed (`failures`: their reasons, decide.REFUSED, CONNECT_ERROR, BROKEN, ...)."""

    failures: tuple[str, ...]
    label = "upstream_failed"


@dataclass(frozen=True)
class UpstreamTimeout:
    """Every attempt timed out."""

    tries: int
    label = "upstream_timeout"


@dataclass(frozen=True)
class Paced:
    """The host's rule's politeness: its concurrent requests for this client, or every proxy's pace for the host,
    full for longer than the rule's queueFor (`retry_after`: seconds)."""

    retry_after: int
    label = "paced"


@dataclass(frozen=True)
class UntrustedOrigin:
    """An intercepted request's origin showed a certificate that does not verify for its name (`detail`: why)."""

    detail: str
    label = "untrusted_origin"


@dataclass(frozen=True)
class UnknownProxy:
    """A ban report named no proxy this client may use (`proxy`; '' its session has none)."""

    proxy: str
    label = "unknown_proxy"


@dataclass(frozen=True)
class Banned:
    """A ban report taken: `proxy` cools down for `host` until `until` (None: --cooldown-blocked is 0)."""

    proxy: str
    host: str
    until: float | None
    label = "ban_reported"


Refusal = Unauthorized | Forbidden | TunnelLimit | NoProxy | UpstreamFailed | UpstreamTimeout | UntrustedOrigin | Paced


def gave_up(failures: list[str], lease_answer: str, retry_after: int | None = None, detail: str = "") -> Refusal:
    """What a request comes to when no attempt worked: an origin that is not who it says (`detail`: why), attempts
    that failed (all timed out, or not), else what the last lease call said when it granted nothing ('none', 'busy',
    'grace', 'unavailable')."""
    if decide.UNTRUSTED_ORIGIN in failures:
        return UntrustedOrigin(detail)
    if failures:
        if all(f == decide.TIMEOUT for f in failures):
            return UpstreamTimeout(len(failures))
        return UpstreamFailed(tuple(failures))
    return NoProxy(lease_answer or "none", retry_after if lease_answer == "busy" else None)


# -- a connection, a tunnel, the attempts of one request ------------------------------------------------------

class Conn:
    """One crawler connection as `httpguard.Guard` counts it; a close with a status sends the front-end's answer
    (`answer(status, reason, message)`: its protocol's bytes)."""

    def __init__(self, guard: httpguard.Guard, writer: asyncio.StreamWriter,
                 answer: Callable[[int, str, str], bytes]) -> None:
        peer = writer.get_extra_info("peername")
        self.client_host = peer[0] if peer else ""
        self.counted = False
        self.guard = guard
        self.writer = writer
        self.answer = answer
        self._closed = False

    def close(self, reason: str, status: int = 0, message: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        self.guard.forget(self)
        if reason:
            self.guard.note(reason)
        if status and not self.writer.is_closing():
            self.writer.write(self.answer(status, reason.replace("_", "-"), message))
        self.writer.close()


@dataclass(eq=False)
class Tunnel:
    client: str
    proxy: str
    target: str
    ip: str
    port: int
    lease_id: str
    started: float
    renew_at: float
    last: float
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    session: str = ""  # the username's -session-ID ('' none)
    ended: str = ""  # why the gateway ended it (idle, max_duration, revoked, banned)
    protocol: str = "http"  # the front-end that opened it (http, socks5)

    def end(self, why: str) -> None:
        if not self.ended:
            self.ended = why
        for w in self.writers:
            w.close()


@dataclass(eq=False, slots=True)
class Attempt:
    """One proxy leased and dialed for a request: the `number`th try."""

    number: int
    lease_id: str
    upstream: Upstream
    channel: Channel
    released: bool = False


class Leases(Protocol):
    """What the core calls of `fleet.store.leases.AsyncLeases`."""

    async def lease(self, call: LeaseCall, now: float, rand: float) -> Any: ...
    async def release(self, lease_id: str, now: float) -> Any: ...
    async def report(self, call: ReportCall, now: float, cooldown_blocked: float, cooldown_errors: int,
                     cooldown_global: float) -> Any: ...
    async def renew(self, call: RenewCall, now: float) -> Any: ...
    async def sessions_active(self, now: float) -> int: ...
    async def pace(self, *, proxy: str, target: str, interval: float, most: float, now: float) -> float: ...


class Clients(Protocol):
    def check(self, name: str, password: str) -> Client | None: ...


class UpstreamCredentials(Protocol):
    """What the core calls of `fleet.credentials.Credentials`: a credentials reference, the member's URL and its
    username template → its Auth (None: none)."""

    def get(self, ref: str, *, member: str = "", username: str = "") -> wire.Auth | None: ...


@dataclass(eq=False, slots=True)
class Attempts:
    """The tries of one request (`Core.attempts`) under its host's rule (`rule`, fleet.gateway.rules): `next` leases
    a proxy not tried yet (in the rule's pools in turn, a waterfall: the next when one has no proxy or its tries are
    spent), waits for the proxy's pace for that host, and dials it, a failed dial reported and the next proxy tried
    within the rule's attempts; the front-end reports what went wrong after the dial (`failed`) or right (`ok`,
    `blocked`), releases, and asks `outcome` when `next` has nothing more."""

    core: Core
    client: Client
    options: Options
    target: Target
    tunnel: bool  # a tunnel (Dialer.tunnel), else one plain request (Dialer.forward)
    rule: Rule
    tls: bool = False  # an intercepted request: a tunnel, then the gateway's own TLS to the origin (verified)
    failures: list[str] = field(default_factory=list)
    detail: str = ""  # what the last failed dial said beside its reason
    skip: list[str] = field(default_factory=list)
    lease_answer: str = ""  # what the last lease call said when it granted nothing
    retry_after: int | None = None
    tries: int = 0  # in all
    here: int = 0  # in the current pool of the rule's waterfall
    pool_index: int = 0
    paced: int | None = None  # seconds until the nearest turn of a proxy whose pace was full (None: none was)

    @property
    def pool(self) -> str:
        """The pool leased from: the rule's waterfall's current one, else the crawler's own -pool- ('' any)."""
        return self.rule.pools[self.pool_index] if self.rule.pools else self.options.pool

    def _next_pool(self) -> bool:
        if self.pool_index + 1 >= len(self.rule.pools):
            return False
        self.pool_index += 1
        self.here = 0
        self.core.series.retry(decide.WATERFALL)
        return True

    async def next(self) -> Attempt | None:
        core = self.core
        while self.here < self.rule.attempts or self._next_pool():
            self.tries += 1
            self.here += 1
            got = await core._lease(self)
            if got is None and self.lease_answer == "skipped":  # an endpoint it cannot dial: the next proxy, within
                self.lease_answer = "none"                          # the tries (a store that grants it again ends)
                continue
            if got is None:
                if self.lease_answer in ("none", "busy") and self._next_pool():
                    continue
                return None
            lease_id, upstream = got
            rate = self.rule.per_proxy_per_second
            if rate and not await self._paced(upstream.proxy, lease_id, rate):
                self.tries -= 1  # not a try: that proxy's pace for this host is full, another one is asked
                self.here -= 1
                continue
            dial = core.dialer.tunnel if self.tunnel or self.tls else core.dialer.forward
            dialed = await dial(upstream, self.target)
            if self.tls and not isinstance(dialed, DialError):
                assert core.origin_tls is not None
                dialed = await intercept.secure(dialed, self.target.host, core.origin_tls, core.config.connect_timeout)
            if isinstance(dialed, DialError):
                self.detail = dialed.detail
                await self._failed(upstream.proxy, lease_id, dialed.why)
                if self.may_retry(dialed.why, True):
                    core.series.retry(dialed.why)
                    continue
                return None
            return Attempt(self.tries, lease_id, upstream, dialed)
        return None

    async def _paced(self, proxy: str, lease_id: str, rate: float) -> bool:
        """Wait for `proxy`'s turn at this host (the rule's requests per second per proxy, shared by every replica
        through Redis) when it comes within the rule's queueFor; False when it does not (released, skipped)."""
        rule, core = self.rule, self.core
        try:
            wait = await core.leases.pace(proxy=proxy, target=self.target.host, interval=1 / rate,
                                          most=rule.queue_for, now=core.clock())
        except _Unavailable:
            return True  # no pace without Redis: the lease itself needed it, so this is a moment's loss
        if wait > rule.queue_for:  # not taken
            self.skip.append(proxy)
            later = max(1, int(wait + 0.999))
            self.paced = later if self.paced is None else min(self.paced, later)
            await core._release(lease_id)
            return False
        if wait > 0:
            await asyncio.sleep(wait)
        return True

    def adopt(self, attempt: Attempt) -> Attempt:
        """`attempt` (a proxy leased and dialed for an earlier request, kept: an intercepted connection's) as this
        request's first try."""
        self.tries += 1
        self.here += 1
        return attempt

    async def forget(self, attempt: Attempt) -> None:
        """A kept connection that broke before an answer (the origin closed it meanwhile): closed and released,
        blamed on nothing and not counted as a try."""
        self.tries -= 1
        self.here -= 1
        attempt.channel.close()
        await self.release(attempt)

    def may_retry(self, failure: str, resendable: bool) -> bool:
        """Another proxy for this request after `failure`: within the rule's attempts in this pool, or in the next
        pool of its waterfall."""
        if decide.retry(failure, self.here, self.rule.attempts, resendable):
            return True
        return self.pool_index + 1 < len(self.rule.pools) and decide.retry(failure, 0, 1, resendable)

    async def failed(self, attempt: Attempt, failure: str, resendable: bool) -> bool:
        """The exchange on `attempt` failed after the dial (decide.BROKEN, BANNED): its channel closed, reported and
        released; True when another proxy is to be tried."""
        attempt.channel.close()
        attempt.released = True
        await self._failed(attempt.upstream.proxy, attempt.lease_id, failure)
        again = self.may_retry(failure, resendable)
        if again:
            self.core.series.retry(failure)
        return again

    async def _failed(self, proxy: str, lease_id: str, failure: str) -> None:
        """Report and release before the next attempt (a failing path: one round trip more), so the crawler's next
        request already finds the cooldown."""
        self.failures.append(failure)
        self.skip.append(proxy)
        report = decide.REPORT_OF[failure]
        if self.rule.connect_failure and failure in (decide.REFUSED, decide.CONNECT_ERROR):
            report = "blocked"  # this site's rule: a proxy that cannot reach it is as good as banned there
        await asyncio.gather(self._report(proxy, report) if report else asyncio.sleep(0), self.core._release(lease_id))

    async def _report(self, proxy: str, outcome: str) -> None:
        await self.core._report(self.core._report_call(self.client, self.options, self.rule, outcome=outcome,
                                                       proxy=proxy, target=self.target.host), self.rule.cooldown)

    def ok(self, attempt: Attempt) -> None:
        self.core._spawn(self._report(attempt.upstream.proxy, "ok"))

    async def blocked(self, attempt: Attempt) -> None:
        """A ban the crawler gets (no other proxy tried): the cooldown is in place before it has the answer."""
        await self._report(attempt.upstream.proxy, "blocked")

    async def release(self, attempt: Attempt) -> None:
        if not attempt.released:
            attempt.released = True
            await self.core._release(attempt.lease_id)

    def outcome(self) -> Refusal:
        if self.paced is not None and not self.failures:  # the proxies left were all at their pace for this host
            return Paced(self.paced)
        return gave_up(self.failures, self.lease_answer, self.retry_after, self.detail)


# -- the core -----------------------------------------------------------------------------------------------------

class Core:
    """One per process, shared by its front-ends: the lease store, the clients, the rules per domain
    (`rules.for_host(host)`: a `fleet.gateway.rules.Rule`; without a rules file every host has the default rule,
    the flags' values), the dialer, the metrics and the open tunnels (their count per client is a limit); for
    interception, the CA (`authority`) and the context of the gateway's TLS to origins (`origin_tls`), both None
    when the gateway intercepts nothing; the upstreams' credentials by reference (`credentials`)."""

    def __init__(self, leases: AsyncLeases | Leases, clients: Clients, config: GatewayConfig, dialer: Dialer,
                 clock: Callable[[], float] = time.time, rand: Callable[[], float] = random.random,
                 rules: RuleBook | None = None, *, authority: intercept.Authority | None = None,
                 origin_tls: ssl.SSLContext | None = None, credentials: UpstreamCredentials | None = None) -> None:
        self.authority = authority
        self.credentials: UpstreamCredentials = credentials if credentials is not None else Credentials(None)
        self.origin_tls = origin_tls
        self.leases = leases
        self.clients = clients
        self.config = config
        self.rules: RuleBook = rules if rules is not None else Rules(defaults=config)
        self.dialer = dialer
        self.clock = clock
        self.rand = rand
        self.series = GatewaySeries()
        self.tunnels: set[Tunnel] = set()
        self._turns: dict[tuple[str, str, int], tuple[asyncio.Semaphore, int]] = {}  # (client, host, C) → (its C, users)
        self.per_client: dict[str, int] = {}
        self._background: set[asyncio.Task[Any]] = set()

    # -- admit ----------------------------------------------------------------------------------------------------

    def admit(self, username: str | None, password: str) -> Admitted | Unauthorized:
        """Who asks, with which options: `username` None when the protocol carried no credentials."""
        if username is None:
            return Unauthorized(True, "proxy credentials are required (username CLIENT[-session-ID]..., password: "
                                      "the client's token)")
        try:
            opts = decide.parse_username(username)
        except ValueError as exc:
            return Unauthorized(False, str(exc))
        client = self.clients.check(opts.client, password)
        if client is None:
            return Unauthorized(False, "unknown client or wrong token")
        return Admitted(client, opts)

    def permit(self, client: Client, port: int) -> Forbidden | None:
        return None if decide.port_allowed(port, client.ports) else Forbidden(port)

    # -- choose, dial ---------------------------------------------------------------------------------------------

    def attempts(self, client: Client, options: Options, target: Target, tunnel: bool, tls: bool = False) -> Attempts:
        return Attempts(self, client, options, target, tunnel, self.rules.for_host(target.host), tls)

    def intercepts(self, client: Client) -> bool:
        """The client asked for interception (its `intercept: true`) and this gateway has a CA to do it."""
        return client.intercept and self.authority is not None and self.origin_tls is not None

    async def open_tunnel(self, client: Client, options: Options, target: Target) -> Attempt | Refusal:
        """A proxy leased and a tunnel through it to `target`, or why not (TunnelLimit before any lease when the
        client or the gateway holds its most tunnels)."""
        c = self.config
        most = client.max_tunnels or c.max_tunnels_per_client
        if self.per_client.get(client.name, 0) >= most:
            return TunnelLimit(True, most)
        if len(self.tunnels) >= c.max_tunnels:
            return TunnelLimit(False, c.max_tunnels)
        attempts = self.attempts(client, options, target, tunnel=True)
        attempt = await attempts.next()
        if attempt is None:
            return attempts.outcome()
        attempts.ok(attempt)
        return attempt

    @contextlib.asynccontextmanager
    async def turn(self, client: Client, host: str) -> AsyncIterator[Paced | None]:
        """A request's (or a tunnel's) turn among the client's at `host` under the host's rule's
        concurrentPerClient, in this process: None once it has one (held until the block ends), or Paced when none
        came within the rule's queueFor."""
        rule = self.rules.for_host(host)
        most = rule.concurrent_per_client
        if not most:
            yield None
            return
        key = (client.name, host, most)
        sem, users = self._turns.get(key) or (asyncio.Semaphore(most), 0)
        self._turns[key] = (sem, users + 1)
        try:
            try:
                await asyncio.wait_for(sem.acquire(), rule.queue_for)
            except TimeoutError:
                yield Paced(max(1, int(rule.queue_for + 0.999)))
                return
            try:
                yield None
            finally:
                sem.release()
        finally:
            sem, users = self._turns[key]
            if users <= 1:
                del self._turns[key]
            else:
                self._turns[key] = (sem, users - 1)

    def _sticky(self, client: Client, opts: Options) -> str:
        return f"gw/{client.name}/{opts.session}" if opts.session else ""

    async def _lease(self, tried: Attempts) -> tuple[str, Upstream] | None:
        """(lease id, upstream) of a leasable proxy not tried yet, or None (tried.lease_answer says why: 'skipped'
        for an endpoint the gateway cannot dial)."""
        c = self.config
        client, opts, target = tried.client, tried.options, tried.target
        now = self.clock()
        lease_id = uuid.uuid4().hex
        call = LeaseCall(lease_id=lease_id, target=target.host, expires=now + c.lease_ttl, max_per_proxy=c.max_per_proxy,
                         sticky=self._sticky(client, opts), sticky_ttl=c.session_ttl, provider=opts.provider,
                         region=opts.region, zone=opts.zone, ttl=c.lease_ttl, namespaces=client.namespaces or (),
                         skip=tuple(tried.skip), pool=tried.pool,
                         session_connections=c.session_connections if opts.session else 0,
                         life=self.life_of(client, opts, tried.rule),
                         # a proxy that only timed out (the origin may be slow behind it) keeps its session, as one
                         # banned by a site whose rule does not retire sessions
                         keep_sticky=bool(tried.failures) and all(
                             f == decide.TIMEOUT or (f == decide.BANNED and not tried.rule.retire_session)
                             for f in tried.failures))
        try:
            got, _, _ = await self.leases.lease(call, now, self.rand())
        except _Unavailable as exc:
            log.warning("Redis does not answer", extra=kv(error=type(exc).__name__))
            tried.lease_answer = "unavailable"
            return None
        if isinstance(got, Granted):
            if got.retired:
                self.series.session_retired(got.retired)
            up = self._upstream(got.proxy, _decode(got.endpoint))
            if up is None:  # released and skipped; the next proxy asked
                tried.skip.append(got.proxy)
                self._spawn(self._release(lease_id))
                tried.lease_answer = "skipped"
                return None
            return lease_id, up
        if isinstance(got, Busy):
            tried.lease_answer = "busy"
            tried.retry_after = max(1, int(got.free_at - now + 0.999))
        elif isinstance(got, Grace):
            tried.lease_answer = "grace"
        else:
            assert isinstance(got, NoneLeasable)
            tried.lease_answer = "none"
        return None

    def _upstream(self, proxy: str, ep: dict[str, Any]) -> Upstream | None:
        """The upstream an endpoint names: ip, port, its kind (`scheme`, http unless said) and its credentials
        reference (`credentials`: a provider's name, resolved in this process; never the secret itself). None: an
        endpoint the gateway cannot dial (malformed, an unknown kind, credentials it does not have)."""
        ip, port, scheme, ref = ep.get("ip"), ep.get("port"), ep.get("scheme", wire.HTTP), ep.get("credentials")
        if not isinstance(ip, str) or not isinstance(port, int) or scheme not in wire.SCHEMES:
            return None
        auth = None
        if ref is not None:
            template = ep.get("username", "")
            auth = self.credentials.get(ref, member=member_url(scheme, ip, port),
                                        username=template if isinstance(template, str) else "") if isinstance(ref, str) else None
            if auth is None:
                return None
        return Upstream(proxy, ip, port, scheme, auth)

    def life_of(self, client: Client, opts: Options, rule: Rule) -> Life | None:
        """The life of the session `opts` names (None: no session, or sessions never retire): the client's own
        limits, else the host's rule's (which are the flags' unless the rules file sets them); `-sesstime-M` sets
        its age."""
        if not opts.session:
            return None
        own = client.sessions
        uses = rule.max_uses if own.max_uses is None else own.max_uses
        if uses <= 0:
            return None
        age = rule.max_age if own.max_age is None else own.max_age
        return Life(max_uses=uses, max_age=int(opts.sesstime) * 60.0 if opts.sesstime else age,
                    max_error_score=rule.max_error_score if own.max_error_score is None else own.max_error_score,
                    error_decrement=rule.error_score_decrement if own.error_decrement is None else own.error_decrement)

    async def _release(self, lease_id: str) -> None:
        with contextlib.suppress(*_Unavailable):
            await self.leases.release(lease_id, self.clock())

    def _report_call(self, client: Client, options: Options, rule: Rule, *, outcome: str, proxy: str,
                     target: str) -> ReportCall:
        """A report for `options`' session too, when it has a life (its error score; a ban of its proxy retires it,
        unless the host's rule keeps sessions through bans)."""
        life = self.life_of(client, options, rule)
        with_session = life is not None and (outcome != "blocked" or rule.retire_session)
        return ReportCall(outcome=outcome, proxy=proxy, target=target,
                          sticky=self._sticky(client, options) if with_session else "",
                          life_decrement=life.error_decrement if life else 0.0)

    async def _report(self, call: ReportCall, cooldown: float) -> list[str] | None:
        """`call` reported; a 'blocked' cools the proxy for the host for `cooldown` s (the host's rule's)."""
        c = self.config
        try:
            got = await self.leases.report(call, self.clock(), cooldown, c.cooldown_errors, c.cooldown_global)
        except _Unavailable:
            return None
        if got and got[0] == "cooldown":
            log.info("cooldown", extra=kv(proxy=got[1], target=got[2], scope=got[3]))
        if got and got[0] in ("cooldown", "ok") and got[-1] == "ban":
            self.series.session_retired("ban")
        return got

    async def ban(self, client: Client, options: Options, *, host: str, proxy: str) -> Banned | UnknownProxy | NoProxy:
        """The crawler's word that `host` banned `proxy` (its session's when ''), for a tunnel the gateway cannot
        see into: that proxy cools down for that host, and the session's next connection takes another proxy."""
        ns = proxy.partition("/")[0]
        sticky = self._sticky(client, options)
        if (proxy and client.namespaces and ns not in client.namespaces) or not (proxy or sticky):
            return UnknownProxy(proxy)
        rule = self.rules.for_host(host)
        life = self.life_of(client, options, rule)
        got = await self._report(ReportCall(outcome="blocked", proxy=proxy, target=host, sticky=sticky,
                                            life_decrement=life.error_decrement if life else 0.0), rule.cooldown)
        if got is None:
            return NoProxy("unavailable")
        if not got or got[0] not in ("cooldown", "ok"):
            return UnknownProxy(proxy)
        banned = got[1]
        # Its open tunnels to that host through that proxy end (in this process): a client that keeps a tunnel
        # alive (a browser, Scrapy) would send its next request down it again; it reconnects and is leased anew.
        for t in list(self.tunnels):
            if (t.client, t.proxy, t.target) == (client.name, banned, host) and t.session == options.session:
                t.end("banned")
        log.info("ban reported", extra=kv(client=client.name, proxy=banned, target=host, session=options.session))
        return Banned(banned, host, float(got[4]) if got[0] == "cooldown" else None)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- relay, release -------------------------------------------------------------------------------------------

    async def relay_tunnel(self, client: Client, target: Target, attempt: Attempt, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, reply: bytes, *, session: str = "",
                           protocol: str = "http") -> None:
        """The tunnel's life: held as a lease (renewed by the sweeper, ended by it when idle, too long or revoked),
        `reply` (the front-end's "tunnel open" to the crawler) written, then bytes relayed both ways until either
        side closes; the lease released at the close."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        up = attempt.upstream
        tunnel = Tunnel(client.name, up.proxy, target.host, up.ip, up.port, attempt.lease_id, now,
                        now + self.config.lease_ttl / 2, now, (writer, attempt.channel.writer), session,
                        protocol=protocol)
        self.tunnels.add(tunnel)
        self.per_client[client.name] = self.per_client.get(client.name, 0) + 1
        self.series.tunnels_open[protocol] = self.series.tunnels_open.get(protocol, 0) + 1
        try:
            writer.write(reply)
            await writer.drain()
            await asyncio.gather(self._pump(reader, attempt.channel.writer, tunnel, "up"),
                                 self._pump(attempt.channel.reader, writer, tunnel, "down"))
        finally:
            self.tunnels.discard(tunnel)
            left = self.per_client.get(client.name, 1) - 1
            if left > 0:
                self.per_client[client.name] = left
            else:
                self.per_client.pop(client.name, None)
            self.series.tunnels_open[protocol] -= 1
            self.series.tunnel_closed(loop.time() - tunnel.started)
            attempt.channel.close()
            writer.close()
            attempt.released = True
            await self._release(attempt.lease_id)
            if tunnel.ended:
                log.debug("tunnel ended by the gateway", extra=kv(client=client.name, proxy=up.proxy, why=tunnel.ended))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, tunnel: Tunnel, direction: str) -> None:
        """Read a chunk, write it, wait for the writer to drain: a slow reader stops the other side's reads, so
        nothing is buffered without bound."""
        loop = asyncio.get_running_loop()
        counts = self.series.bytes
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    break
                dst.write(data)
                counts[direction] += len(data)
                tunnel.last = loop.time()
                await dst.drain()
            if dst.can_write_eof() and not dst.is_closing():
                dst.write_eof()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            tunnel.end("broken")
        except asyncio.CancelledError:
            tunnel.end("cancelled")
            raise

    # -- the sweeper: idle and too-long tunnels, renewals ---------------------------------------------------------

    async def sweep(self) -> None:
        c = self.config
        loop = asyncio.get_running_loop()
        every = sweep_every(c.lease_ttl)
        counted = 0.0
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            if now - counted >= SESSIONS_EVERY:
                counted = now
                self._spawn(self._count_sessions())
            for t in list(self.tunnels):
                if now - t.last > c.idle_timeout:
                    t.end("idle")
                elif now - t.started > c.tunnel_max_duration:
                    t.end("max_duration")
                elif now >= t.renew_at:
                    t.renew_at = now + c.lease_ttl / 2
                    self._spawn(self._renew(t))

    async def _count_sessions(self) -> None:
        with contextlib.suppress(*_Unavailable):
            self.series.sessions_active = await self.leases.sessions_active(self.clock())

    async def _renew(self, t: Tunnel) -> None:
        c = self.config
        call = RenewCall(lease_id=t.lease_id, ttl=c.lease_ttl, default_ttl=c.lease_ttl, max_per_proxy=c.max_per_proxy,
                         proxy=t.proxy, target=t.target, ip=t.ip, port=t.port, sticky_keep=c.session_ttl)
        try:
            got, _, _ = await self.leases.renew(call, self.clock())
        except _Unavailable:
            t.renew_at = asyncio.get_running_loop().time() + 5  # the lease runs on; again soon
            return
        if not isinstance(got, Renewed):
            log.info("a tunnel's lease is not renewed: the tunnel ends", extra=kv(proxy=t.proxy, kind=got.kind,
                                                                                  reason=got.reason))
            t.end("revoked")


def sweep_every(lease_ttl: float) -> float:
    """A renewal falls due at half the TTL and is seen at the next tick: ticks of a quarter TTL or less leave the
    renewal a quarter TTL to reach Redis before the lease runs out (at a 2 s TTL a 1 s tick saw it at 2 s)."""
    return min(SWEEP_EVERY, lease_ttl / 4)


def _decode(raw: bytes | str) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}
