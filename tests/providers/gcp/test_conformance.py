"""The Checker rules and fault injection (conformance.py) for gcp: the real
SDK against the fake Compute API, behind a fault-injecting proxy."""

from __future__ import annotations

import pytest

from tests.providers import conformance, faults
from tests.providers.faults import FaultProxy, ProxiedBackend, closed_port_url
from tests.providers.gcp.conftest import NAME
from tests.providers.gcp.fakecompute import _error
from tests.providers.gcp.test_provider import request

# The API's errors[].reason for each injected status (403 as a plain denial).
REASONS = {400: "invalid", 401: "authError", 403: "forbidden", 404: "notFound", 409: "alreadyExists",
           429: "rateLimitExceeded", 500: "backendError", 503: "backendError"}


def error_body(status: int) -> dict:
    return _error(status, "injected by the test", REASONS.get(status, "backendError"))[1]


@pytest.fixture
def proxy(fake):
    with FaultProxy(fake.url, error_body) as p:
        yield p



class TestGcpChecker(conformance.CheckerConformance):
    @pytest.fixture
    def make_checker(self, make_provider, proxy):
        def make(state: str):
            if state == conformance.UNREACHABLE:
                return make_provider(apiEndpoint=closed_port_url())
            proxy.inject(faults.STATE_FAULTS.get(state))
            return make_provider(apiEndpoint=proxy.url)

        yield make
        proxy.release()


class TestGcpFaults(conformance.FaultConformance):
    provider_name = NAME
    faults = faults.HTTP_FAULTS
    gone_faults = ("http-404",)

    def make_request(self, uid: str):
        return request(uid)

    @pytest.fixture
    def fault_backend(self, make_provider, proxy):
        return ProxiedBackend(make_provider(apiEndpoint=proxy.url), proxy)
