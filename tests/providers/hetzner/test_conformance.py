"""The Checker rules and fault injection (conformance.py) for hetzner: hcloud
against the fake API, behind the shared fault-injecting proxy answering
Hetzner's own error bodies."""

from __future__ import annotations

import pytest

from providers.hetzner.check import HETZNER_REASONS
from tests.providers import conformance, faults
from tests.providers.faults import FaultProxy, ProxiedBackend, closed_port_url
from tests.providers.hetzner.conftest import NAME
from tests.providers.hetzner.test_provider import request

CODES = {400: "invalid_input", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict",
         429: "rate_limit_exceeded", 500: "server_error", 503: "unavailable"}


def error_body(status: int) -> dict:
    return {"error": {"code": CODES.get(status, "server_error"), "message": "injected by the test", "details": None}}


@pytest.fixture
def proxy(fake):
    with FaultProxy(fake.url.removesuffix("/v1"), error_body) as p:
        yield p


class TestHetznerChecker(conformance.CheckerConformance):
    own_reasons = HETZNER_REASONS

    @pytest.fixture
    def make_checker(self, make_provider, proxy):
        def make(state: str):
            if state == conformance.UNREACHABLE:
                return make_provider(apiEndpoint=closed_port_url() + "/v1")
            proxy.inject(faults.STATE_FAULTS.get(state))
            return make_provider(apiEndpoint=proxy.url + "/v1")

        yield make
        proxy.release()


class TestHetznerFaults(conformance.FaultConformance):
    provider_name = NAME
    faults = faults.HTTP_FAULTS
    gone_faults = ("http-404",)

    def make_request(self, uid: str):
        return request(uid)

    @pytest.fixture
    def fault_backend(self, make_provider, proxy):
        return ProxiedBackend(make_provider(apiEndpoint=proxy.url + "/v1"), proxy)
