"""What a lease API request may say (pure): each refusal names its field."""

from __future__ import annotations

import json

import pytest

from fleet.leases.requests import (
    MAX_BODY,
    BadRequest,
    Filters,
    LeaseRequest,
    ReportRequest,
    check_lease_id,
    is_host,
    parse_filters,
    parse_lease,
    parse_report,
)

LEASE_ID = "0123456789abcdef0123456789abcdef"


def body(doc) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize("raw, expected", [
    (body({"target": "example.com"}), LeaseRequest("example.com", 300)),
    (body({"target": "Example.COM.", "ttl": 60}), LeaseRequest("example.com", 60)),
    (body({"target": "a", "ttl": 3600.0, "sticky": "crawler-7:job/1"}), LeaseRequest("a", 3600, "crawler-7:job/1")),
    (body({"target": "10.0.0.1", "provider": "lab", "region": "europe-west1", "zone": "europe-west1-b"}),
     LeaseRequest("10.0.0.1", 300, "", Filters("lab", "europe-west1", "europe-west1-b"))),
])
def test_good_lease_requests(raw, expected):
    assert parse_lease(raw, 3600) == expected


def test_the_default_ttl_is_capped_by_the_maximum():
    assert parse_lease(body({"target": "a.b"}), 60).ttl == 60


@pytest.mark.parametrize("raw, field", [
    (b"", "body"),
    (b"{", "body"),
    (b"[1]", "body"),
    (b'"target"', "body"),
    (b"\xff\xfe", "body"),
    (body({}), "target"),
    (body({"target": "example.com", "color": "red"}), "color"),
    (body({"target": "exa mple.com"}), "target"),
    (body({"target": "http://example.com/"}), "target"),
    (body({"target": "-bad.com"}), "target"),
    (body({"target": "a" * 64 + ".com"}), "target"),
    (body({"target": ("a" * 60 + ".") * 5}), "target"),
    (body({"target": "example.com\n"}), "target"),
    (body({"target": 42}), "target"),
    (body({"target": "a.b", "ttl": 0}), "ttl"),
    (body({"target": "a.b", "ttl": -5}), "ttl"),
    (body({"target": "a.b", "ttl": 86400 * 3}), "ttl"),
    (body({"target": "a.b", "ttl": 1.5}), "ttl"),
    (body({"target": "a.b", "ttl": "60"}), "ttl"),
    (body({"target": "a.b", "ttl": True}), "ttl"),
    (b'{"target": "a.b", "ttl": NaN}', "body"),
    (body({"target": "a.b", "sticky": ""}), "sticky"),
    (body({"target": "a.b", "sticky": "has space"}), "sticky"),
    (body({"target": "a.b", "sticky": "x" * 129}), "sticky"),
    (body({"target": "a.b", "provider": "Lab"}), "provider"),
    (body({"target": "a.b", "region": "eu/west"}), "region"),
    (body({"target": "a.b", "zone": 3}), "zone"),
])
def test_bad_lease_requests_name_the_field(raw, field):
    with pytest.raises(BadRequest) as e:
        parse_lease(raw, 3600)
    assert e.value.status == 400 and e.value.field == field, e.value.message
    assert set(e.value.body()) == {"error", "field"}


@pytest.mark.parametrize("raw, expected", [
    (body({"lease": LEASE_ID, "outcome": "ok"}), ReportRequest("ok", lease=LEASE_ID)),
    (body({"lease": LEASE_ID, "outcome": "blocked", "target": "X.com"}), ReportRequest("blocked", LEASE_ID, "", "x.com")),
    (body({"proxy": "crawl/a", "target": "x.com", "outcome": "error"}), ReportRequest("error", "", "crawl/a", "x.com")),
])
def test_good_reports(raw, expected):
    assert parse_report(raw) == expected


@pytest.mark.parametrize("raw, field", [
    (body({"outcome": "ok"}), "lease"),
    (body({"lease": LEASE_ID, "proxy": "crawl/a", "outcome": "ok"}), "proxy"),
    (body({"proxy": "crawl/a", "outcome": "ok"}), "target"),
    (body({"proxy": "no-slash", "target": "a.b", "outcome": "ok"}), "proxy"),
    (body({"lease": "XYZ", "outcome": "ok"}), "lease"),
    (body({"lease": LEASE_ID, "outcome": "meh"}), "outcome"),
    (body({"lease": LEASE_ID}), "outcome"),
    (body({"lease": LEASE_ID, "outcome": "ok", "extra": 1}), "extra"),
])
def test_bad_reports_name_the_field(raw, field):
    with pytest.raises(BadRequest) as e:
        parse_report(raw)
    assert e.value.field == field, e.value.message


@pytest.mark.parametrize("query, expected", [
    ("", Filters()),
    ("provider=lab", Filters(provider="lab")),
    ("region=r1&zone=z-1", Filters("", "r1", "z-1")),
    ("pool=web&provider=lab", Filters(provider="lab", pool="web")),
])
def test_filters(query, expected):
    assert parse_filters(query) == expected


@pytest.mark.parametrize("query, field", [
    ("color=red", "color"), ("provider=lab&provider=x", "provider"), ("provider=", "provider"),
    ("zone=a%20b", "zone"), ("x" * 3000, "query"), ("pool=Web", "pool"), ("pool=web/x", "pool"), ("pool=", "pool"),
])
def test_bad_filters(query, field):
    with pytest.raises(BadRequest) as e:
        parse_filters(query)
    assert e.value.field == field


def test_lease_ids():
    assert check_lease_id(LEASE_ID) == LEASE_ID
    for bad in ("", "x", LEASE_ID.upper(), LEASE_ID + "0", "../" + LEASE_ID[3:]):
        with pytest.raises(BadRequest) as e:
            check_lease_id(bad)
        assert e.value.status == 404 and e.value.field == "id"


def test_host_names():
    assert is_host("a") and is_host("a-b.c.") and is_host("1.2.3.4") and is_host("x" * 63)
    assert not is_host("") and not is_host("a..b") and not is_host("a_b") and not is_host("x" * 64)
    assert MAX_BODY == 64 * 1024
