"""Scrapy downloader middlewares. `FleetProxyMiddleware` leases proxies from the lease API (`fleet api`,
docs/leases.md) through `LeaseClient`: one lease per domain, bans reported and retried on another proxy, every
lease released when the spider closes. `FleetGatewayMiddleware` is for the gateway (`HttpProxyMiddleware`
pointed at `fleet gateway`, docs/gateway.md): it reports a ban the gateway cannot see (inside an HTTPS tunnel)
in-band and sends the request again. Settings and behaviour: docs/scrapy.md. Needs fleet-crawler[scrapy].

    DOWNLOADER_MIDDLEWARES = {"fleet_crawler.scrapy.FleetProxyMiddleware": 700}
    FLEET_API_URL = "http://fleet-api.fleet-system:8090"
    FLEET_API_TOKEN = "..."

The API calls (one lease per domain, renewals, a report and release per ban) run in Twisted's thread pool so
the reactor never waits on them; a request whose domain already holds a fresh lease costs no call at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Self

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.settings import BaseSettings
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.internet import threads

from fleet_crawler._calls import Grant, Outcome
from fleet_crawler._client import LeaseClient
from fleet_crawler._errors import ApiError, LeaseEnded, NoProxy, Unreachable

__all__ = ["ApiError", "BanDetectionPolicy", "FleetGatewayMiddleware", "FleetProxyMiddleware", "NoProxy"]

log = logging.getLogger(__name__)

DEFAULT_BAN_STATUSES = (403, 429, 503)
DEFAULT_POLICY = "fleet_crawler.scrapy.BanDetectionPolicy"
META_LEASE = "fleet_lease"  # the lease id a request went out on
META_PROXY = "fleet_proxy"  # the proxy's NAMESPACE/NAME
META_RETRIES = "fleet_retries"
META_SKIP = "fleet_skip"  # True: leave this request alone (its own meta["proxy"], or none)
META_SENT = "fleet_sent"  # when the request went out (monotonic; gateway mode)
MAX_ANSWER = 1024 * 1024
STICKY_MAX = 128


class BanDetectionPolicy:
    """What counts as a ban, as scrapy-rotating-proxies' policy of the same name: a response whose status
    is in FLEET_BAN_STATUSES is a ban (reported `blocked`: that proxy cools down for that domain only); an
    exception while downloading is the proxy's failure (reported `error`) unless it is IgnoreRequest.
    Subclass and name yours in FLEET_BAN_POLICY, e.g. to look at the body."""

    NOT_BAN_EXCEPTIONS: tuple[type[BaseException], ...] = (IgnoreRequest,)

    def __init__(self, statuses: frozenset[int] = frozenset(DEFAULT_BAN_STATUSES)) -> None:
        self.statuses = statuses

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(frozenset(int(s) for s in settings.getlist("FLEET_BAN_STATUSES", list(DEFAULT_BAN_STATUSES))))

    def response_is_ban(self, request: Request, response: Response) -> bool:
        return response.status in self.statuses

    def exception_is_ban(self, request: Request, exception: BaseException) -> bool:
        return not isinstance(exception, self.NOT_BAN_EXCEPTIONS)


@dataclass
class Held:
    """A domain's lease: the grant and when to renew it (time.monotonic(): past it, renew before the next use)."""

    grant: Grant
    renew_at: float

    @property
    def id(self) -> str:
        return self.grant.id

    @property
    def proxy(self) -> str:
        return self.grant.proxy

    @property
    def url(self) -> str:
        return self.grant.url


class FleetProxyMiddleware:
    """One lease per domain, shared by that domain's requests; on a ban, report `blocked`, release, and
    send the request again (on the next lease, which the cooldown keeps off the banned proxy)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        url = s.get("FLEET_API_URL")
        if not url:
            raise NotConfigured("FLEET_API_URL is not set (the lease API, e.g. http://127.0.0.1:8090)")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise NotConfigured(f"FLEET_API_URL must be an http(s) URL, not {url!r}")
        self.crawler = crawler
        self.ttl = s.getint("FLEET_LEASE_TTL", 300)
        self.wait = s.getfloat("FLEET_LEASE_WAIT", 30.0)
        self.api = LeaseClient(url, token=s.get("FLEET_API_TOKEN") or None, timeout=s.getfloat("FLEET_API_TIMEOUT", 10.0),
                               retries=s.getint("FLEET_API_RETRIES", 3), busy_wait=self.wait)
        self.sticky = s.getbool("FLEET_STICKY", False)
        self.max_retries = s.getint("FLEET_MAX_RETRIES", 5)
        self.filters = {k: str(s.get(f"FLEET_{k.upper()}")) for k in ("provider", "region", "zone", "pool")
                        if s.get(f"FLEET_{k.upper()}")}
        policy_cls = load_object(s.get("FLEET_BAN_POLICY", DEFAULT_POLICY))
        self.policy: BanDetectionPolicy = policy_cls.from_settings(s) if hasattr(policy_cls, "from_settings") else policy_cls()
        if self.ttl < 1:
            raise NotConfigured(f"FLEET_LEASE_TTL must be at least 1 (seconds), not {self.ttl}")
        self._mutex = threading.Lock()  # guards the dicts below (the reactor and the pool's threads)
        self._leases: dict[str, Held] = {}  # domain → its lease
        self._domain_locks: dict[str, threading.Lock] = {}  # one lease call per domain at a time
        self._pending: dict[str, list[tuple[str, str, Outcome]]] = {}  # domain → (lease, proxy, outcome) to send
        self._handled: set[str] = set()  # leases already reported and released

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        mw = cls(crawler)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    # -- Scrapy's hooks ------------------------------------------------------------------------------

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if request.meta.get(META_SKIP) or ("proxy" in request.meta and META_LEASE not in request.meta):
            return None  # the request names its own proxy (or none): not ours
        domain = (urllib.parse.urlsplit(request.url).hostname or "").lower()
        if not domain:
            return None
        lease = self._fresh(domain)
        if lease is None:
            lease = await maybe_deferred_to_future(threads.deferToThread(self._acquire, domain))
        request.meta["proxy"] = lease.url
        request.meta[META_LEASE] = lease.id
        request.meta[META_PROXY] = lease.proxy
        return None

    async def process_response(self, request: Request, response: Response,
                               spider: Spider | None = None) -> Request | Response:
        if META_LEASE not in request.meta or not self.policy.response_is_ban(request, response):
            return response
        self._stats("fleet/bans")
        log.info("fleet: %s banned proxy %s (%d) for %s", request.url, request.meta[META_PROXY], response.status,
                 urllib.parse.urlsplit(request.url).hostname)
        await self._drop(request, "blocked")
        return self._again(request) or response

    async def process_exception(self, request: Request, exception: BaseException,
                                spider: Spider | None = None) -> Request | None:
        if META_LEASE not in request.meta or isinstance(exception, NoProxy):
            return None
        if not self.policy.exception_is_ban(request, exception):
            return None
        self._stats("fleet/errors")
        log.info("fleet: %s failed on proxy %s: %s", request.url, request.meta[META_PROXY], exception)
        await self._drop(request, "error")
        return self._again(request)

    def spider_closed(self, spider: Spider) -> None:
        """Send what is pending and release every lease (blocking: the crawl is over)."""
        with self._mutex:
            domains = set(self._leases) | set(self._pending)
        for domain in domains:
            self._flush(domain)
            with self._mutex:
                lease = self._leases.pop(domain, None)
            if lease is not None:
                self._release(lease.id)
        self.api.close()

    # -- leases ---------------------------------------------------------------------------------------

    def _fresh(self, domain: str) -> Held | None:
        """The domain's lease when it needs no call (nothing pending, not due for renewal)."""
        with self._mutex:
            lease = self._leases.get(domain)
            if lease is None or self._pending.get(domain) or time.monotonic() >= lease.renew_at:
                return None
            return lease

    def _lock(self, domain: str) -> threading.Lock:
        with self._mutex:
            return self._domain_locks.setdefault(domain, threading.Lock())

    def _acquire(self, domain: str) -> Held:
        """In a pool thread: send the domain's pending reports, then renew its lease or take a new one."""
        with self._lock(domain):
            self._flush(domain)
            with self._mutex:
                lease = self._leases.get(domain)
            if lease is not None and time.monotonic() < lease.renew_at:
                return lease  # another thread took or renewed it meanwhile
            if lease is not None:
                renewed = self._renew(lease)
                if renewed is not None:
                    with self._mutex:
                        self._leases[domain] = renewed
                    return renewed
            lease = self._lease(domain)
            with self._mutex:
                self._leases[domain] = lease
            return lease

    def _lease(self, domain: str) -> Held:
        """A new lease (409 waited out for FLEET_LEASE_WAIT by the client; then, or on 503, NoProxy)."""
        sticky = self._sticky_key(domain) if self.sticky else None
        f = self.filters
        grant = self.api.lease(domain, ttl=self.ttl, sticky=sticky, provider=f.get("provider"), region=f.get("region"),
                               zone=f.get("zone"), pool=f.get("pool")).grant
        self._stats("fleet/leases")
        return Held(grant, time.monotonic() + grant.ttl / 2)

    def _renew(self, held: Held) -> Held | None:
        """The lease renewed, or None: lease anew (revoked, expired, refused, or renewed on another instance)."""
        try:
            grant = self.api.renew(held.grant)
        except Unreachable:
            raise
        except ApiError as exc:
            if isinstance(exc, LeaseEnded) and exc.revoked:
                self._release(held.id)  # a revoked lease keeps its slot until released
            elif not isinstance(exc, LeaseEnded):
                log.info("fleet: lease %s was not renewed: %s", held.id, exc)
            return None
        if grant.proxy != held.proxy:  # renewed on another instance of its proxy: let it go, take a new one
            self._release(held.id)
            return None
        self._stats("fleet/renewals")
        return Held(grant, time.monotonic() + grant.ttl / 2)

    def _sticky_key(self, domain: str) -> str:
        spider = self.crawler.spider
        key = f"scrapy/{spider.name if spider else '-'}/{domain}"
        if len(key) > STICKY_MAX or any(c.isspace() or not c.isprintable() for c in key):
            key = "scrapy/" + hashlib.sha256(key.encode()).hexdigest()
        return key

    # -- bans and errors -----------------------------------------------------------------------------

    async def _drop(self, request: Request, outcome: Outcome) -> None:
        """Report the request's proxy for its domain and release its lease (once per lease), before any
        request of that domain leases again; wait for it so the retry finds the cooldown."""
        lease_id, proxy = str(request.meta[META_LEASE]), str(request.meta[META_PROXY])
        domain = (urllib.parse.urlsplit(request.url).hostname or "").lower()
        with self._mutex:
            if lease_id in self._handled:
                return
            self._handled.add(lease_id)
            current = self._leases.get(domain)
            if current is not None and current.id == lease_id:
                del self._leases[domain]
            self._pending.setdefault(domain, []).append((lease_id, proxy, outcome))
        await maybe_deferred_to_future(threads.deferToThread(self._flush_locked, domain))

    def _flush_locked(self, domain: str) -> None:
        with self._lock(domain):
            self._flush(domain)

    def _flush(self, domain: str) -> None:
        with self._mutex:
            todo = self._pending.pop(domain, [])
        for lease_id, proxy, outcome in todo:
            try:  # by proxy and target: still counts after the lease is released
                self.api.report(outcome, proxy=proxy, target=domain)
            except ApiError as exc:
                log.warning("fleet: the %s report on %s for %s failed: %s", outcome, proxy, domain, exc)
            self._release(lease_id)

    def _release(self, lease_id: str) -> None:
        try:
            self.api.release(lease_id)
        except LeaseEnded:
            pass  # expired or unknown: nothing held
        except ApiError as exc:  # it expires at its TTL
            log.warning("fleet: lease %s was not released: %s", lease_id, exc)

    def _again(self, request: Request) -> Request | None:
        return _again(self.crawler, request, self.max_retries, drop=("proxy", META_LEASE, META_PROXY, "_auth_proxy"))

    def _stats(self, key: str) -> None:
        _count(self.crawler, key)


class FleetGatewayMiddleware:
    """Gateway mode: requests go through `fleet gateway` by Scrapy's HttpProxyMiddleware (meta["proxy"] or the
    http(s)_proxy environment), with a `-session-ID` username. The gateway sees a plain HTTP ban itself; inside an
    HTTPS tunnel it sees nothing, so on a ban response (BanDetectionPolicy, FLEET_BAN_STATUSES) to an https://
    request this reports it through the same proxy (POST http://fleet.gateway/v1/bans?host=H): the session's
    proxy cools down for that host, the session moves, and the gateway ends the session's tunnels to that host
    through it; then the request is sent again (FLEET_MAX_RETRIES). A ban answered to a request sent before the
    host's last report came from the exit already reported: it is sent again, not reported twice (which would
    blame the session's new proxy). A request that failed on a tunnel the gateway ended is sent again too.

        DOWNLOADER_MIDDLEWARES = {"fleet_crawler.scrapy.FleetGatewayMiddleware": 700}
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.max_retries = s.getint("FLEET_MAX_RETRIES", 5)
        self.timeout = s.getfloat("FLEET_API_TIMEOUT", 10.0)
        policy_cls = load_object(s.get("FLEET_BAN_POLICY", DEFAULT_POLICY))
        self.policy: BanDetectionPolicy = policy_cls.from_settings(s) if hasattr(policy_cls, "from_settings") else policy_cls()
        self._reported: dict[str, float] = {}  # host → when its last ban report was sent (monotonic)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        request.meta[META_SENT] = time.monotonic()
        return None

    async def process_response(self, request: Request, response: Response,
                               spider: Spider | None = None) -> Request | Response:
        url = urllib.parse.urlsplit(request.url)
        proxy = request.meta.get("proxy")
        if not proxy or url.scheme != "https" or not url.hostname or not self.policy.response_is_ban(request, response):
            return response  # no proxy, or plain HTTP (the gateway saw that ban and retried), or no ban
        self._stats("fleet/bans")
        host = url.hostname.lower()
        if self._reported.get(host, -1.0) < request.meta.get(META_SENT, 0.0):
            self._reported[host] = time.monotonic()
            auth = request.headers.get("Proxy-Authorization")
            reported = await maybe_deferred_to_future(threads.deferToThread(
                self._report, proxy, auth.decode("latin-1") if auth else "", host))
            log.info("fleet: %s banned (%d) on the gateway's proxy %s", request.url, response.status, reported or "?")
        return self._again(request) or response

    async def process_exception(self, request: Request, exception: BaseException,
                                spider: Spider | None = None) -> Request | None:
        if not request.meta.get("proxy") or not self.policy.exception_is_ban(request, exception):
            return None
        return self._again(request)  # e.g. a tunnel the gateway ended after a ban report

    def _again(self, request: Request) -> Request | None:
        return _again(self.crawler, request, self.max_retries)  # the same proxy URL: the gateway picks the exit

    def _report(self, proxy: str, auth: str, host: str) -> str:
        """The gateway's answer's proxy ('' when the report was not taken: logged)."""
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        headers = {"Proxy-Authorization": auth} if auth else {}
        if parts.username is not None and not auth:
            basic = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
        bare = f"http://{parts.hostname}:{parts.port or 80}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": bare}))
        req = urllib.request.Request(f"http://fleet.gateway/v1/bans?{urllib.parse.urlencode({'host': host})}",
                                     data=b"", method="POST", headers=headers)
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                return str(json.loads(resp.read(MAX_ANSWER)).get("proxy", ""))
        except urllib.error.HTTPError as exc:
            log.warning("fleet: the gateway refused the ban report for %s: %d %s", host, exc.code,
                        exc.headers.get("X-Fleet-Reason", ""))
        except (OSError, ValueError) as exc:
            log.warning("fleet: the ban report for %s did not reach the gateway: %s", host, exc)
        return ""

    def _stats(self, key: str) -> None:
        _count(self.crawler, key)


def _count(crawler: Crawler, key: str) -> None:
    """One more in the crawl's stats (printed at its end: fleet/bans, fleet/retries, ...)."""
    if crawler.stats is not None:
        crawler.stats.inc_value(key)


def _again(crawler: Crawler, request: Request, max_retries: int, drop: tuple[str, ...] = ()) -> Request | None:
    """The request sent again (its meta but `drop`), or None past `max_retries` (FLEET_MAX_RETRIES)."""
    tries = int(request.meta.get(META_RETRIES, 0)) + 1
    if tries > max_retries:
        _count(crawler, "fleet/retries_exhausted")
        return None
    _count(crawler, "fleet/retries")
    meta = {k: v for k, v in request.meta.items() if k not in drop}
    meta[META_RETRIES] = tries
    return request.replace(meta=meta, dont_filter=True)
