"""The Checker rules and fault injection (conformance.py) for aws: boto3
against moto's EC2, behind a proxy that answers EC2's own error XML, garbage
XML, or breaks the connection, at each request in turn."""

from __future__ import annotations

import pytest

from providers.aws.check import AWS_REASONS
from tests.providers import conformance
from tests.providers.aws.conftest import NAME, REGION
from tests.providers.aws.ec2faults import FAULTS, STATE_FAULTS, Ec2FaultProxy
from tests.providers.aws.test_provider import request
from tests.providers.faults import ProxiedBackend, closed_port_url


@pytest.fixture
def proxy(moto):
    with Ec2FaultProxy(moto.url) as p:
        yield p


class TestAwsChecker(conformance.CheckerConformance):
    own_reasons = AWS_REASONS

    @pytest.fixture
    def make_checker(self, make_provider, proxy):
        def make(state: str):
            if state == conformance.UNREACHABLE:
                return make_provider(endpointUrl=closed_port_url(), regions=("us-east-1",))
            proxy.inject(STATE_FAULTS.get(state))
            return make_provider(endpointUrl=proxy.url, regions=("us-east-1",))

        yield make
        proxy.release()


class TestAwsFaults(conformance.FaultConformance):
    provider_name = NAME
    faults = FAULTS
    gone_faults = ("http-404",)

    def make_request(self, uid: str):
        return request(uid)

    @pytest.fixture
    def fault_backend(self, make_provider, proxy):
        p = make_provider(endpointUrl=proxy.url)
        # botocore loads EC2's service model when the client is built (no
        # request; ~1 s on a busy machine): not inside the 1 s faulted call
        p.ec2.client(REGION)
        return ProxiedBackend(p, proxy)
