"""fleet_crawler's calls without I/O: when a call is sent again and after how long, what each answer becomes,
what each request says, and the public names. The client on a real `fleet api`: tests/integration/test_crawler_client.py."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

import fleet_crawler
from fleet_crawler import ApiError, LeaseEnded, NoProxy, Unauthorized
from fleet_crawler import _calls as c

LEASE = c.lease_call("example.com")
GRANT = c.Grant(id="0" * 32, proxy="crawl/a", url="http://10.0.0.1:3128", ip="10.0.0.1", port=3128, ttl=60,
                expires_at=datetime(2030, 1, 1, tzinfo=UTC), target="example.com")
RENEW = c.renew_call(GRANT)
RELEASE = c.release_call(GRANT.id)
REPORT = c.report_call("blocked", lease=GRANT.id)
POLICY = c.Policy(retries=3, backoff=0.5, max_delay=30.0, busy_wait=10.0)


@pytest.mark.parametrize(("call", "status", "sent", "attempt", "waited", "after", "want"), [
    (LEASE, 503, True, 0, 0, None, 0.25),  # backoff × 2^0 × (0.5 + jitter/2), jitter 0
    (LEASE, 503, True, 2, 0, None, 1.0),  # doubled each time
    (LEASE, 503, True, 3, 0, None, None),  # retries spent
    (LEASE, 503, True, 0, 0, 7.0, 7.0),  # Retry-After honoured
    (LEASE, 503, True, 0, 0, 3600.0, None),  # longer than max_delay: not waited for
    (LEASE, 429, True, 0, 0, 2.0, 2.0),
    (LEASE, None, False, 0, 0, None, 0.25),  # the connection never opened: nothing was sent
    (LEASE, None, True, 0, 0, None, None),  # an answer lost mid-way: a second lease would count
    (REPORT, None, True, 0, 0, None, None),  # a second error report would count
    (RENEW, None, True, 0, 0, None, 0.25),  # idempotent
    (RELEASE, None, True, 1, 0, None, 0.5),
    (LEASE, 409, True, 0, 0, 2.0, 2.0),  # busy: waited out within busy_wait
    (LEASE, 409, True, 5, 9.0, 2.0, 1.0),  # ... not past it (retries do not count here)
    (LEASE, 409, True, 0, 10.0, 2.0, None),
    (LEASE, 409, True, 0, 0, None, 1.0),  # no Retry-After: a second
    (LEASE, 409, True, 0, 0, 60.0, 5.0),  # asked again every 5 s at most (a proxy may free up early)
    (RENEW, 409, True, 0, 0, 2.0, None),  # a renewal's 409 is a lost lease, final
    (LEASE, 400, True, 0, 0, None, None),
    (LEASE, 401, True, 0, 0, None, None),
    (RELEASE, 404, True, 0, 0, None, None),
    (LEASE, 500, True, 0, 0, None, None),
])
def test_when_a_call_is_sent_again(call, status, sent, attempt, waited, after, want):
    got = c.next_try(call, POLICY, status=status, sent=sent, attempt=attempt, waited=waited, after=after, jitter=0.0)
    assert got == want


def test_a_lease_request_does_not_wait_out_409_unless_asked():
    assert c.next_try(LEASE, c.Policy(), status=409, sent=True, attempt=0, waited=0, after=1.0, jitter=0.5) is None


def test_the_backoff_never_exceeds_max_delay():
    policy = c.Policy(retries=50, backoff=1.0, max_delay=4.0)
    assert c.next_try(LEASE, policy, status=503, sent=True, attempt=20, waited=0, after=None, jitter=0.99) == 4.0


@pytest.mark.parametrize(("call", "status", "body", "kind"), [
    (LEASE, 401, {"error": "wrong bearer token", "field": "authorization"}, Unauthorized),
    (LEASE, 503, {"error": "no Running, healthy proxy", "field": None, "freeAt": None, "retryAfter": None}, NoProxy),
    (LEASE, 409, {"error": "busy", "field": None, "freeAt": "2030-01-01T00:00:00.000Z", "retryAfter": 3}, NoProxy),
    (LEASE, 503, {"error": "cannot reach Redis", "field": None}, ApiError),
    (LEASE, 400, {"error": "ttl must be", "field": "ttl"}, ApiError),
    (RENEW, 410, {"error": "revoked", "field": "id", "status": "revoked", "reason": "gone"}, LeaseEnded),
    (RENEW, 404, {"error": "expired", "field": "id"}, LeaseEnded),
    (RENEW, 409, {"error": "lost", "field": "id", "freeAt": None, "retryAfter": None}, LeaseEnded),
    (RELEASE, 404, {"error": "unknown lease", "field": "id"}, LeaseEnded),
    (REPORT, 410, {"error": "revoked", "field": "lease", "reason": "replaced"}, LeaseEnded),
    (REPORT, 404, {"error": "unknown lease", "field": "lease"}, LeaseEnded),
    (c.report_call("ok", proxy="crawl/x", target="a.example"), 404, {"error": "no proxy", "field": "proxy"}, ApiError),
])
def test_what_each_answer_becomes(call, status, body, kind):
    err = c.answer_error(call, status, body)
    assert type(err) is kind
    assert err.status == status and err.reason == body["error"] and err.body == body
    assert str(err).startswith(call.what) and body["error"] in str(err)


def test_the_errors_say_what_the_server_said():
    busy = c.answer_error(LEASE, 409, {"error": "busy", "field": None, "freeAt": "x", "retryAfter": 3})
    assert isinstance(busy, NoProxy) and busy.busy and busy.retry_after == 3.0 and not busy.recovering
    recovering = c.answer_error(LEASE, 503, {"error": "lost", "field": None, "freeAt": "x", "retryAfter": 9,
                                             "recovering": True})
    assert isinstance(recovering, NoProxy) and recovering.recovering and not recovering.busy
    revoked = c.answer_error(RENEW, 410, {"error": "r", "field": "id", "reason": "unhealthy"})
    assert isinstance(revoked, LeaseEnded) and revoked.revoked == "unhealthy"
    assert c.answer_error(RENEW, 404, {"error": "x", "field": "id"}).revoked is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("headers", "body", "want"), [
    ({"Retry-After": "5"}, {}, 5.0),
    ({}, {"retryAfter": 7}, 7.0),
    ({"Retry-After": "Wed, 01 Jan 2030 00:00:10 GMT"}, {}, 10.0),
    ({"Retry-After": "soon"}, {"retryAfter": 2}, 2.0),
    ({}, {"retryAfter": None}, None),
    ({}, {"retryAfter": True}, None),
])
def test_retry_after(headers, body, want):
    assert c.retry_after(httpx.Headers(headers), body, now=datetime(2030, 1, 1, tzinfo=UTC)) == want


def test_the_requests_say_what_the_openapi_document_names():
    assert c.lease_call("Example.COM", ttl=60, sticky="k", pool="eu").body == {
        "target": "Example.COM", "ttl": 60, "sticky": "k", "pool": "eu"}
    assert (RENEW.method, RENEW.path, RENEW.body) == ("POST", f"/v1/leases/{GRANT.id}/renew", {
        "proxy": "crawl/a", "target": "example.com", "ip": "10.0.0.1", "port": 3128})
    assert (RELEASE.path, RELEASE.body) == (f"/v1/leases/{GRANT.id}/release", None)
    assert c.report_call("error", proxy="crawl/a", target="a.example").body == {
        "proxy": "crawl/a", "target": "a.example", "outcome": "error"}
    assert c.proxies_call(pool="eu", zone=None).path == "/v1/proxies?pool=eu"
    assert c.release_call("../x").path == "/v1/leases/..%2Fx/release"  # an id never escapes its path segment


@pytest.mark.parametrize(("args", "match"), [
    ({"outcome": "banned", "lease": "l"}, "outcome must be"),
    ({"outcome": "ok"}, "by lease or by proxy"),
    ({"outcome": "ok", "lease": "l", "proxy": "p"}, "by lease or by proxy"),
    ({"outcome": "ok", "proxy": "p"}, "needs the target"),
])
def test_a_report_that_cannot_be_sent_is_refused_before_it_is(args, match):
    with pytest.raises(ValueError, match=match):
        c.report_call(args.pop("outcome"), **args)


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:8090", "http://"])
def test_the_api_url_must_be_http(url):
    with pytest.raises(ValueError, match="must be http"):
        fleet_crawler.LeaseClient(url)


def test_an_answer_without_what_a_lease_needs_is_an_api_error():
    with pytest.raises(ApiError, match="without a valid 'url'"):
        c.grant_of(LEASE, {"lease": "l", "proxy": "p", "ip": "1.2.3.4", "port": 1, "ttl": 5,
                           "expiresAt": "2030-01-01T00:00:00.000Z"}, "example.com")


def test_the_public_names_are_exactly_these():
    assert sorted(fleet_crawler.__all__) == [
        "ApiError", "AsyncLease", "AsyncLeaseClient", "Cooldown", "Gateway", "Grant", "Lease", "LeaseClient",
        "LeaseEnded", "NoProxy", "Outcome", "ProxyInfo", "Released", "Report", "Session", "SessionLimits",
        "SessionPool", "Unauthorized", "Unreachable", "username"]
    assert all(hasattr(fleet_crawler, name) for name in fleet_crawler.__all__)
