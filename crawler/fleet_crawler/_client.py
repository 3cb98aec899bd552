"""The lease API's clients: `LeaseClient` (blocking) and `AsyncLeaseClient` (asyncio), both on httpx, and the
lease each hands out (`Lease`, `AsyncLease`): a context manager that releases it on exit, an exception included,
and can renew itself in the background. What each call sends and what each answer means is `_calls`'s (shared,
so the two clients cannot drift); this module only sends, waits and sleeps.

The clients never use the environment's proxy settings (`trust_env=False`): a crawler that sets `http_proxy` to
the gateway must not send its API calls there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Generator
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx

from fleet_crawler import _calls as c
from fleet_crawler._errors import ApiError, LeaseEnded

log = logging.getLogger("fleet_crawler")

RENEW_RETRY = 5.0  # seconds before an automatic renewal that failed (the API away) is tried again


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _answer(resp: httpx.Response) -> dict[str, Any]:
    return c.decode(resp.content[:c.MAX_ANSWER])


class LeaseClient:
    """A blocking client of the lease API (`fleet api`, docs/leases.md). Thread-safe: one per process is enough.

        with LeaseClient("http://fleet-api:8090", token=TOKEN) as api, api.lease("example.com") as lease:
            httpx.get("https://example.com/", proxy=lease.url)

    retries, backoff, max_delay: re-sends after a connection failure, 429 or 503 (module `_calls`);
    busy_wait: seconds a lease request waits out 409 (every matching proxy busy) before NoProxy."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.5, max_delay: float = 30.0, busy_wait: float = 0.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = c.base_url(url)
        self.policy = c.Policy(retries=retries, backoff=backoff, max_delay=max_delay, busy_wait=busy_wait)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=_headers(token), transport=transport,
                                  trust_env=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: c.Call) -> dict[str, Any]:
        tries = c.Tries(call, self.policy, self.url)
        while True:
            try:
                resp = self._http.request(call.method, call.path, json=call.body)
            except c.NOT_SENT as exc:
                delay = tries.failed(exc, sent=False)
            except c.TRANSPORT_ERRORS as exc:
                delay = tries.failed(exc, sent=True)
            else:
                doc = _answer(resp)
                if resp.status_code == 200:
                    return doc
                delay = tries.answered(resp.status_code, doc, resp.headers)
            time.sleep(delay)

    def lease(self, target: str, *, ttl: int | None = None, sticky: str | None = None, provider: str | None = None,
              region: str | None = None, zone: str | None = None, pool: str | None = None,
              auto_renew: bool = False) -> Lease:
        """A lease of the least-loaded matching proxy for `target` (a host name). NoProxy when there is none;
        `auto_renew`: renewed in a background thread at half its ttl until released."""
        call = c.lease_call(target, ttl=ttl, sticky=sticky, provider=provider, region=region, zone=zone, pool=pool)
        grant = c.grant_of(call, self._send(call), c.normal_target(target))
        return Lease(self, grant, auto_renew=auto_renew)

    def renew(self, grant: c.Grant, ttl: int | None = None) -> c.Grant:
        """The lease extended to now + ttl (default: its own). LeaseEnded when it is over (revoked, released,
        expired)."""
        call = c.renew_call(grant, ttl)
        return c.grant_of(call, self._send(call), grant.target)

    def release(self, lease_id: str) -> c.Released:
        """Release a lease (idempotent on the server). LeaseEnded when it had expired or is unknown."""
        call = c.release_call(lease_id)
        return c.released_of(call, self._send(call))

    def report(self, outcome: c.Outcome, *, lease: str | None = None, proxy: str | None = None,
               target: str | None = None) -> c.Report:
        """Tell the API how a proxy did: `blocked` cools it down for the target, errors in a row everywhere."""
        call = c.report_call(outcome, lease=lease, proxy=proxy, target=target)
        return c.report_of(call, self._send(call))

    def proxies(self, *, provider: str | None = None, region: str | None = None, zone: str | None = None,
                pool: str | None = None) -> list[c.ProxyInfo]:
        """The Running, healthy proxies with their load."""
        call = c.proxies_call(provider=provider, region=region, zone=zone, pool=pool)
        return c.proxies_of(call, self._send(call))


class _Held:
    """What a sync and an async lease share: the grant, and the release's answer once released."""

    def __init__(self, grant: c.Grant) -> None:
        self.grant = grant
        self.released: c.Released | None = None
        self.error: ApiError | None = None  # what stopped the automatic renewal (LeaseEnded: lease anew)
        self._done = False

    @property
    def id(self) -> str:
        return self.grant.id

    @property
    def url(self) -> str:
        """The proxy's URL (http://IP:PORT): the `proxy=` of requests, httpx, aiohttp."""
        return self.grant.url

    @property
    def proxy(self) -> str:
        return self.grant.proxy

    @property
    def target(self) -> str:
        return self.grant.target

    @property
    def expires_at(self) -> datetime:
        return self.grant.expires_at

    def _report_call_args(self) -> dict[str, str]:
        """By the lease while it is held; by proxy and target after (a released lease's id is unknown)."""
        return {"lease": self.id} if not self._done else {"proxy": self.proxy, "target": self.target}

    def _renew_delay(self) -> float:
        return max(self.grant.ttl / 2, 0.5)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.proxy} {self.url} for {self.target}>"


class Lease(_Held):
    """A held lease: `url` is the proxy; `report()`, `renew()`, `release()`. As a context manager it is released
    on exit (an exception in the block included; a release that fails is logged: the lease then ends at its
    ttl)."""

    def __init__(self, client: LeaseClient, grant: c.Grant, *, auto_renew: bool = False) -> None:
        super().__init__(grant)
        self._client = client
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if auto_renew:
            self._thread = threading.Thread(target=self._renewing, name=f"fleet-renew-{grant.id[:8]}", daemon=True)
            self._thread.start()

    def renew(self, ttl: int | None = None) -> c.Grant:
        self.grant = self._client.renew(self.grant, ttl)
        return self.grant

    def report(self, outcome: c.Outcome) -> c.Report:
        return self._client.report(outcome, **self._report_call_args())

    def release(self) -> c.Released | None:
        """Release it (once; again: the first answer). None when it had ended already (expired, unknown)."""
        self._stop.set()
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    self.released = self._client.release(self.id)
                except LeaseEnded:
                    self.released = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        return self.released

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.release()
        except ApiError as error:
            log.warning("fleet: lease %s was not released (it ends at its ttl): %s", self.id, error)

    def _renewing(self) -> None:
        delay = self._renew_delay()
        while not self._stop.wait(delay):
            try:
                self.renew()
                delay = self._renew_delay()
            except LeaseEnded as exc:
                self.error = exc
                log.warning("fleet: lease %s ended: %s", self.id, exc)
                return
            except ApiError as exc:  # the API away: try again soon, the lease runs on
                log.warning("fleet: lease %s was not renewed: %s", self.id, exc)
                delay = min(RENEW_RETRY, self._renew_delay())


class AsyncLeaseClient:
    """The asyncio twin of LeaseClient (the same arguments and calls, awaited).

        async with AsyncLeaseClient(URL, token=TOKEN) as api, api.lease("example.com") as lease:
            async with httpx.AsyncClient(proxy=lease.url) as http:
                await http.get("https://example.com/")
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.5, max_delay: float = 30.0, busy_wait: float = 0.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = c.base_url(url)
        self.policy = c.Policy(retries=retries, backoff=backoff, max_delay=max_delay, busy_wait=busy_wait)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=_headers(token),
                                       transport=transport, trust_env=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: c.Call) -> dict[str, Any]:
        tries = c.Tries(call, self.policy, self.url)
        while True:
            try:
                resp = await self._http.request(call.method, call.path, json=call.body)
            except c.NOT_SENT as exc:
                delay = tries.failed(exc, sent=False)
            except c.TRANSPORT_ERRORS as exc:
                delay = tries.failed(exc, sent=True)
            else:
                doc = _answer(resp)
                if resp.status_code == 200:
                    return doc
                delay = tries.answered(resp.status_code, doc, resp.headers)
            await asyncio.sleep(delay)

    def lease(self, target: str, *, ttl: int | None = None, sticky: str | None = None, provider: str | None = None,
              region: str | None = None, zone: str | None = None, pool: str | None = None,
              auto_renew: bool = False) -> _Leasing:
        """`await api.lease(...)` → AsyncLease; `async with api.lease(...) as lease:` releases it on exit."""
        return _Leasing(self, c.lease_call(target, ttl=ttl, sticky=sticky, provider=provider, region=region,
                                           zone=zone, pool=pool), c.normal_target(target), auto_renew)

    async def renew(self, grant: c.Grant, ttl: int | None = None) -> c.Grant:
        call = c.renew_call(grant, ttl)
        return c.grant_of(call, await self._send(call), grant.target)

    async def release(self, lease_id: str) -> c.Released:
        call = c.release_call(lease_id)
        return c.released_of(call, await self._send(call))

    async def report(self, outcome: c.Outcome, *, lease: str | None = None, proxy: str | None = None,
                     target: str | None = None) -> c.Report:
        call = c.report_call(outcome, lease=lease, proxy=proxy, target=target)
        return c.report_of(call, await self._send(call))

    async def proxies(self, *, provider: str | None = None, region: str | None = None, zone: str | None = None,
                      pool: str | None = None) -> list[c.ProxyInfo]:
        call = c.proxies_call(provider=provider, region=region, zone=zone, pool=pool)
        return c.proxies_of(call, await self._send(call))


class _Leasing:
    """What AsyncLeaseClient.lease returns: awaitable (the lease) and an async context manager (released on
    exit), as httpx's and aiohttp's request context managers are."""

    def __init__(self, client: AsyncLeaseClient, call: c.Call, target: str, auto_renew: bool) -> None:
        self._client, self._call, self._target, self._auto_renew = client, call, target, auto_renew
        self._lease: AsyncLease | None = None

    async def _get(self) -> AsyncLease:
        grant = c.grant_of(self._call, await self._client._send(self._call), self._target)
        return AsyncLease(self._client, grant, auto_renew=self._auto_renew)

    def __await__(self) -> Generator[Any, None, AsyncLease]:
        return self._get().__await__()

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._get()
        return self._lease

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(kind, exc, tb)


class AsyncLease(_Held):
    """The asyncio twin of Lease."""

    def __init__(self, client: AsyncLeaseClient, grant: c.Grant, *, auto_renew: bool = False) -> None:
        super().__init__(grant)
        self._client = client
        self._task: asyncio.Task[None] | None = None
        if auto_renew:
            self._task = asyncio.get_running_loop().create_task(self._renewing(), name=f"fleet-renew-{grant.id[:8]}")

    async def renew(self, ttl: int | None = None) -> c.Grant:
        self.grant = await self._client.renew(self.grant, ttl)
        return self.grant

    async def report(self, outcome: c.Outcome) -> c.Report:
        return await self._client.report(outcome, **self._report_call_args())

    async def release(self) -> c.Released | None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self._done:
            self._done = True
            try:
                self.released = await self._client.release(self.id)
            except LeaseEnded:
                self.released = None
        return self.released

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            await self.release()
        except ApiError as error:
            log.warning("fleet: lease %s was not released (it ends at its ttl): %s", self.id, error)

    async def _renewing(self) -> None:
        delay = self._renew_delay()
        while True:
            await asyncio.sleep(delay)
            try:
                await self.renew()
                delay = self._renew_delay()
            except LeaseEnded as exc:
                self.error = exc
                log.warning("fleet: lease %s ended: %s", self.id, exc)
                return
            except ApiError as exc:
                log.warning("fleet: lease %s was not renewed: %s", self.id, exc)
                delay = min(RENEW_RETRY, self._renew_delay())
