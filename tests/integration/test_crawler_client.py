"""fleet_crawler's LeaseClient and AsyncLeaseClient against a real `fleet api` and redis-server on loopback:
lease, renew, report and release; the context manager releasing on an exception; a 503 retried until a proxy
runs; a 409 waited out; a wrong token; a revoked lease; the automatic renewal; an API that does not answer."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fleet.store import keys
from fleet.testing.api import TOKEN
from fleet.testing.procs import free_port
from fleet_crawler import (
    AsyncLeaseClient,
    LeaseClient,
    LeaseEnded,
    NoProxy,
    Released,
    Unauthorized,
    Unreachable,
)
from tests.integration.test_leases import apis, running  # noqa: F401

pytestmark = pytest.mark.integration


def held(client: LeaseClient) -> dict[str, int]:
    return {p.proxy: p.leases for p in client.proxies()}


def later(seconds: float, fn) -> threading.Thread:
    """`fn()` in a thread after `seconds` (a change the client's retries must meet)."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    thread.start()
    return thread


def test_lease_renew_report_release(redis_server, apis):  # noqa: F811
    r = redis_server.client()
    running(r, "crawl/a", port=3128)
    api = apis()
    with LeaseClient(api.url, token=TOKEN) as client:
        lease = client.lease("Example.COM.", ttl=60)
        assert (lease.proxy, lease.url, lease.target, lease.grant.ttl) == ("crawl/a", "http://127.0.0.1:3128",
                                                                          "example.com", 60)
        assert lease.grant.provider == "lab" and lease.grant.region == "r1" and lease.grant.egress_ip is None
        assert held(client) == {"crawl/a": 1}
        first = lease.expires_at
        renewed = lease.renew(ttl=120)
        assert renewed.id == lease.id and lease.expires_at > first and not renewed.recreated
        report = lease.report("blocked")
        assert report.proxy == "crawl/a" and report.target == "example.com" and report.outcome == "blocked"
        assert report.cooldown is not None and report.cooldown.scope == "target"
        assert lease.release() == Released(lease=lease.id, status="released", reason=None)
        assert lease.release() == Released(lease=lease.id, status="released", reason=None)  # once; the same answer
        assert held(client) == {"crawl/a": 0}
        after = lease.report("ok")  # after the release: by proxy and target
        assert (after.proxy, after.target, after.cooldown) == ("crawl/a", "example.com", None)
        with pytest.raises(LeaseEnded) as ended:
            client.renew(lease.grant)
        assert ended.value.status == 404 and "released" in ended.value.reason


def test_the_context_manager_releases_on_an_exception(redis_server, apis):  # noqa: F811
    running(redis_server.client(), "crawl/a")
    with LeaseClient(apis().url, token=TOKEN) as client:
        with pytest.raises(RuntimeError, match="the crawl broke"), client.lease("example.com") as lease:
            assert held(client) == {"crawl/a": 1}
            raise RuntimeError("the crawl broke")
        assert held(client) == {"crawl/a": 0}
        assert lease.released is not None and lease.released.status == "released"


def test_a_503_is_retried_until_a_proxy_runs(redis_server, apis):  # noqa: F811
    r = redis_server.client()
    api = apis()
    with LeaseClient(api.url, token=TOKEN, retries=0) as client, pytest.raises(NoProxy) as none:
        client.lease("example.com")
    assert none.value.status == 503 and "no Running, healthy proxy" in none.value.reason and not none.value.busy
    began = time.monotonic()
    later(0.6, lambda: running(r, "crawl/a"))
    with LeaseClient(api.url, token=TOKEN, retries=8, backoff=0.2, max_delay=0.4) as client:
        lease = client.lease("example.com")
        assert lease.proxy == "crawl/a" and time.monotonic() - began >= 0.6
        lease.release()


def test_a_409_is_waited_out_for_busy_wait(redis_server, apis):  # noqa: F811
    running(redis_server.client(), "crawl/a")
    api = apis()
    with LeaseClient(api.url, token=TOKEN) as client:
        first = client.lease("example.com", ttl=60)
        with pytest.raises(NoProxy) as busy:
            client.lease("example.com")
        assert busy.value.busy and busy.value.retry_after is not None and busy.value.retry_after > 50
        waiting = LeaseClient(api.url, token=TOKEN, busy_wait=10)
        later(0.5, first.release)
        began = time.monotonic()
        second = waiting.lease("example.com")
        assert second.proxy == "crawl/a" and second.id != first.id and time.monotonic() - began < 8
        second.release()
        waiting.close()


def test_a_wrong_token_is_unauthorized_at_once(redis_server, apis):  # noqa: F811
    api = apis()
    began = time.monotonic()
    with LeaseClient(api.url, token="wrong", retries=5) as client, pytest.raises(Unauthorized) as refused:
        client.lease("example.com")
    assert refused.value.status == 401 and "wrong bearer token" in refused.value.reason
    assert time.monotonic() - began < 2  # not retried
    with LeaseClient(api.url) as client, pytest.raises(Unauthorized, match="missing bearer token"):
        client.proxies()


def test_a_revoked_lease_ends_and_its_release_says_why(redis_server, apis):  # noqa: F811
    r = redis_server.client()
    running(r, "crawl/a")
    with LeaseClient(apis().url, token=TOKEN) as client, client.lease("example.com") as lease:
        r.hdel(keys.PX_ENDPOINTS, "crawl/a")  # the proxy is deleted
        with pytest.raises(LeaseEnded) as ended:
            lease.renew()
        assert ended.value.status == 410 and ended.value.revoked == "gone"
    assert lease.released == Released(lease=lease.id, status="revoked", reason="gone")


def test_the_automatic_renewal_keeps_a_short_lease(redis_server, apis):  # noqa: F811
    running(redis_server.client(), "crawl/a")
    with LeaseClient(apis().url, token=TOKEN) as client:
        kept = client.lease("example.com", ttl=2, auto_renew=True)
        first = kept.expires_at
        time.sleep(3.5)  # past its ttl: renewed at half of it, twice or more
        assert kept.error is None and kept.expires_at > first
        assert held(client) == {"crawl/a": 1}
        assert kept.release() is not None and kept.released is not None and kept.released.status == "released"


def test_an_api_that_does_not_answer_is_unreachable_after_the_retries():
    url = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with LeaseClient(url, retries=2, backoff=0.2) as client, pytest.raises(Unreachable) as gone:
        client.lease("example.com")
    assert gone.value.status is None and url in str(gone.value) and "ConnectError" in str(gone.value)
    assert time.monotonic() - began >= 0.3  # two re-sends: 0.1 to 0.2 s, then 0.2 to 0.4 s


def test_the_async_client(redis_server, apis):  # noqa: F811
    r = redis_server.client()
    api = apis()

    async def crawl() -> None:
        async with AsyncLeaseClient(api.url, token=TOKEN, retries=8, backoff=0.2, max_delay=0.4) as client:
            async with AsyncLeaseClient(api.url, token="wrong") as wrong:
                with pytest.raises(Unauthorized):
                    await wrong.lease("example.com")
            later(0.5, lambda: running(r, "crawl/a"))  # a 503 first, retried
            lease = await client.lease("example.com", ttl=60)
            assert lease.proxy == "crawl/a" and lease.target == "example.com"
            first = lease.expires_at
            assert (await lease.renew(ttl=90)).expires_at > first
            report = await lease.report("blocked")
            assert report.cooldown is not None and report.cooldown.scope == "target"
            assert await lease.release() == Released(lease=lease.id, status="released", reason=None)
            assert [p.leases for p in await client.proxies()] == [0]

            with pytest.raises(RuntimeError, match="broke"):
                async with client.lease("other.example", ttl=2, auto_renew=True) as held_lease:
                    assert [p.leases for p in await client.proxies()] == [1]
                    await asyncio.sleep(2.5)  # past its ttl: renewed in the background
                    assert held_lease.error is None and [p.leases for p in await client.proxies()] == [1]
                    raise RuntimeError("broke")
            assert held_lease.released is not None and held_lease.released.status == "released"
            assert [p.leases for p in await client.proxies()] == [0]

    asyncio.run(crawl())


def test_the_scrapy_middleware_keeps_the_lease_it_renewed(redis_server, apis):  # noqa: F811
    from scrapy.utils.test import get_crawler

    from fleet_crawler.scrapy import FleetProxyMiddleware

    running(redis_server.client(), "crawl/a")
    api = apis()
    mw = FleetProxyMiddleware(get_crawler(settings_dict={"FLEET_API_URL": api.url, "FLEET_API_TOKEN": TOKEN,
                                                         "FLEET_LEASE_TTL": "60"}))
    first = mw._acquire("example.com")
    assert mw._fresh("example.com") is first  # the next request of the domain costs no call
    first.renew_at = 0.0  # due for renewal
    assert mw._fresh("example.com") is None
    renewed = mw._acquire("example.com")
    assert renewed.id == first.id and renewed.grant.expires_at > first.grant.expires_at
    assert mw._fresh("example.com") is renewed  # kept: not renewed again on every request
    with LeaseClient(api.url, token=TOKEN) as client:
        assert held(client) == {"crawl/a": 1}
        mw.spider_closed(None)  # type: ignore[arg-type]
        assert held(client) == {"crawl/a": 0}
