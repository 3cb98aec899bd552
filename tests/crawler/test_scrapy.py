"""fleet_crawler.scrapy without a crawl: the ban policy's table, the settings it refuses, the sticky
key's bounds, and what a retried request keeps. The crawl itself: tests/integration/test_scrapy.py."""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from fleet_crawler.scrapy import ApiError, BanDetectionPolicy, FleetProxyMiddleware


@pytest.mark.parametrize(("statuses", "status", "ban"), [
    (None, 200, False), (None, 403, True), (None, 429, True), (None, 503, True), (None, 404, False),
    (None, 500, False), ("429", 403, False), ("429,418", 418, True),
])
def test_a_ban_is_a_status_of_the_list(statuses, status, ban):
    settings = Settings({"FLEET_BAN_STATUSES": statuses} if statuses else {})
    policy = BanDetectionPolicy.from_settings(settings)
    req = Request("http://example.com/")
    assert policy.response_is_ban(req, Response(req.url, status=status, request=req)) is ban


def test_an_exception_is_the_proxys_failure_unless_the_request_was_ignored():
    policy, req = BanDetectionPolicy(), Request("http://example.com/")
    assert policy.exception_is_ban(req, ConnectionRefusedError()) is True
    assert policy.exception_is_ban(req, IgnoreRequest()) is False


def middleware(**settings) -> FleetProxyMiddleware:
    return FleetProxyMiddleware(get_crawler(settings_dict={"FLEET_API_URL": "http://127.0.0.1:9", **settings}))


@pytest.mark.parametrize(("settings", "match"), [
    ({"FLEET_API_URL": ""}, "FLEET_API_URL is not set"),
    ({"FLEET_API_URL": "ftp://x"}, "must be an http"),
    ({"FLEET_LEASE_TTL": "0"}, "FLEET_LEASE_TTL must be at least 1"),
])
def test_bad_settings_disable_it_with_a_reason(settings, match):
    with pytest.raises(NotConfigured, match=match):
        middleware(**settings)


def test_the_sticky_key_is_per_spider_and_domain_and_fits_the_api():
    mw = middleware()
    assert mw._sticky_key("example.com") == "scrapy/-/example.com"
    long = mw._sticky_key("a" * 63 + "." + "b" * 63 + ".example.com")
    assert long.startswith("scrapy/") and len(long) <= 128


def test_a_retry_goes_out_again_without_the_old_proxy_and_counts():
    mw = middleware(FLEET_MAX_RETRIES="2")
    req = Request("http://example.com/", meta={"proxy": "http://127.0.0.1:3128", "fleet_lease": "l1",
                                                "fleet_proxy": "ns/a", "mine": 1})
    again = mw._again(req)
    assert again is not None and again.dont_filter
    assert again.meta == {"mine": 1, "fleet_retries": 1}
    second = mw._again(again)
    assert second is not None and second.meta["fleet_retries"] == 2
    assert mw._again(second) is None  # a third is refused: the crawler gets the last answer


def test_an_unreachable_api_is_a_clear_error():
    with pytest.raises(ApiError, match=r"no answer from the lease API at http://127\.0\.0\.1:9"):
        middleware(FLEET_API_RETRIES="0")._lease("example.com")
