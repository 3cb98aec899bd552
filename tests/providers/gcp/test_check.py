"""The Checker through the real SDK: one request, whatever the project holds."""

import socket
import time

import pytest

from providers import base
from providers.base import Deadline
from providers.gcp.config import GcpConfig
from providers.gcp.listing import PARTIAL_SUCCESS
from providers.gcp.provider import new
from tests.providers.gcp.conftest import PROJECT

AGGREGATED = f"/compute/v1/projects/{PROJECT}/aggregated/instances"


def only_request(fake):
    reqs = fake.api_requests()
    assert len(reqs) == 1, [(r.method, r.path, r.query) for r in reqs]
    return reqs[0]


def test_is_a_checker(provider):
    assert isinstance(provider, base.Checker)
    assert isinstance(provider, base.Provider)


def test_reachable_sends_one_first_page_request(fake, provider):
    got = provider.check(Deadline.after(5))

    assert len(got) == 1
    ts = got[0]
    assert (ts.name, ts.address, ts.ready, ts.reason, ts.message) == (PROJECT, fake.url, True, "Reachable", "")
    req = only_request(fake)
    assert (req.method, req.path) == ("GET", AGGREGATED)
    want = {"maxResults": "1", "filter": "labels.proxy-operator-managed = true"}
    if PARTIAL_SUCCESS:  # pragma: no cover - newer SDKs
        want["returnPartialSuccess"] = "true"
    assert {k: v for k, v in req.query.items() if not k.startswith("$")} == want
    assert ts.details == {"managedInstances": "0", "unreachableZones": "", "credentials": "anonymous"}


def test_fetches_only_the_first_page_when_a_next_page_exists(fake, provider):
    for i in range(3):
        fake.add_instance("europe-west1-b", f"proxy-{i}")

    got = provider.check(Deadline.after(5))

    assert got[0].ready
    assert only_request(fake).query["maxResults"] == "1"
    assert got[0].details["managedInstances"] == "more than 1"


def test_one_managed_instance(fake, provider):
    fake.add_instance("europe-west1-b", "proxy-0")
    fake.add_instance("europe-west1-b", "not-ours", labels={"team": "x"})

    got = provider.check(Deadline.after(5))

    assert got[0].details["managedInstances"] == "1"
    only_request(fake)


def test_reports_unreachable_zones(fake, provider):
    fake.unreachables = ["zones/us-east1-b", "zones/asia-east1-a"]

    got = provider.check(Deadline.after(5))

    assert got[0].ready
    assert got[0].details["unreachableZones"] == "zones/asia-east1-a,zones/us-east1-b"


def error(status, reason, message):
    return {"error": {"code": status, "message": message, "errors": [{"reason": reason, "message": message}]}}


@pytest.mark.parametrize(
    ("status", "reason", "want"),
    [
        (403, "forbidden", base.REASON_FORBIDDEN),
        (403, "accessNotConfigured", base.REASON_FORBIDDEN),  # the API is disabled
        (500, "backendError", base.REASON_API_ERROR),
        (503, "backendError", base.REASON_API_ERROR),
        (400, "invalid", base.REASON_API_ERROR),
    ],
)
def test_api_error_reasons(fake, provider, status, reason, want):
    fake.script("GET", "aggregated/instances", status, error(status, reason, f"the {reason} message"))

    got = provider.check(Deadline.after(5))

    ts = got[0]
    assert (ts.ready, ts.reason) == (False, want)
    assert f"the {reason} message" in ts.message and str(status) in ts.message
    assert ts.details["httpStatus"] == str(status)
    assert ts.details["errorReason"] == reason
    only_request(fake)  # no retries inside a check


def test_deadline_is_timeout_and_returns_promptly(fake, provider):
    fake.script("GET", "aggregated/instances", 200, {}, delay=3)

    start = time.monotonic()
    got = provider.check(Deadline.after(0.3))

    assert time.monotonic() - start < 1.5
    assert (got[0].ready, got[0].reason) == (False, base.REASON_TIMEOUT)


def test_expired_deadline_sends_nothing(fake, provider):
    got = provider.check(Deadline.after(0))
    assert got[0].reason == base.REASON_TIMEOUT
    assert fake.api_requests() == []


def test_refused_connection_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from google.auth.credentials import AnonymousCredentials

    p = new("gcp-eu", GcpConfig(project=PROJECT, apiEndpoint=f"http://127.0.0.1:{port}"), AnonymousCredentials())

    got = p.check(Deadline.after(5))

    assert (got[0].ready, got[0].reason) == (False, base.REASON_UNREACHABLE)
    assert got[0].address == f"http://127.0.0.1:{port}"
    assert "Connection" in got[0].message


def test_adc_token_is_used(fake, adc):
    p = new("gcp-eu", GcpConfig(project=PROJECT, apiEndpoint=fake.url))

    got = p.check(Deadline.after(5))

    assert got[0].ready, got[0]
    (api,) = fake.api_requests()
    assert api.headers["authorization"] == "Bearer fake-access-token"
    assert got[0].details["credentials"] == "VM credentials"
    assert got[0].details["principal"] == fake.service_account
    p.close()


def test_unauthorized(fake, adc):
    fake.script("GET", "aggregated/instances", 401, error(401, "authError", "Invalid Credentials"), times=-1)
    p = new("gcp-eu", GcpConfig(project=PROJECT, apiEndpoint=fake.url))

    got = p.check(Deadline.after(5))

    ts = got[0]
    assert (ts.ready, ts.reason) == (False, base.REASON_UNAUTHORIZED)
    assert "Invalid Credentials" in ts.message
    assert ts.details["httpStatus"] == "401"
    assert ts.details["principal"] == fake.service_account
    # google-auth's session refreshes the token and retries on a 401, twice.
    assert len(fake.api_requests()) == 3
    p.close()


def test_no_token_is_unreachable(fake, adc):
    fake.script("GET", "service-accounts/default/token", 403, {"error": "no identity bound"}, times=-1)
    p = new("gcp-eu", GcpConfig(project=PROJECT, apiEndpoint=fake.url))

    got = p.check(Deadline.after(5))

    assert (got[0].ready, got[0].reason) == (False, base.REASON_UNREACHABLE)
    assert "token" in got[0].message
    assert fake.api_requests() == []  # never reached the API
    p.close()


def test_no_credentials_at_all_is_unreachable(fake, no_adc):
    p = new("gcp-eu", GcpConfig(project=PROJECT, apiEndpoint=fake.url))

    got = p.check(Deadline.after(5))

    assert (got[0].ready, got[0].reason) == (False, base.REASON_UNREACHABLE)
    assert "Application Default Credentials" in got[0].message
