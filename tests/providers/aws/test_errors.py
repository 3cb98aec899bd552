"""classify: one table over every EC2 code it maps, and the rest; then the
same codes as EC2's XML on the wire, through boto3, to the class create raises."""

from __future__ import annotations

import pytest
from botocore import exceptions as bexc
from botocore.parsers import ResponseParserError

from providers import base
from providers.aws.errors import classify
from providers.watchdog import DeadlineCut
from tests.providers.aws.ec2faults import CODED, Ec2FaultProxy
from tests.providers.aws.test_provider import dl, request


def client_error(code: str, status: int = 400) -> bexc.ClientError:
    return bexc.ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                            "RunInstances")


TABLE = [
    # throttling: EC2's token buckets refill in seconds; the ordinary back-off fits
    ("RequestLimitExceeded", 503, base.Transient),
    ("Throttling", 400, base.Transient),
    ("ThrottlingException", 400, base.Transient),
    ("RequestThrottled", 400, base.Transient),
    ("TooManyRequestsException", 429, base.Transient),
    # capacity and account limits
    ("InstanceLimitExceeded", 400, base.QuotaExceeded),
    ("VcpuLimitExceeded", 400, base.QuotaExceeded),
    ("InsufficientInstanceCapacity", 500, base.QuotaExceeded),
    ("InsufficientHostCapacity", 400, base.QuotaExceeded),
    ("InsufficientFreeAddressesInSubnet", 400, base.QuotaExceeded),
    ("MaxSpotInstanceCountExceeded", 400, base.QuotaExceeded),
    ("SecurityGroupLimitExceeded", 400, base.QuotaExceeded),
    ("ResourceLimitExceeded", 400, base.QuotaExceeded),
    ("AddressLimitExceeded", 400, base.QuotaExceeded),
    # credentials and rights
    ("AuthFailure", 401, base.Permanent),
    ("UnauthorizedOperation", 403, base.Permanent),
    ("InvalidClientTokenId", 403, base.Permanent),
    ("SignatureDoesNotMatch", 403, base.Permanent),
    ("OptInRequired", 401, base.Permanent),
    ("Blocked", 403, base.Permanent),
    ("AccessDenied", 403, base.Permanent),
    # bad arguments: only the spec or the config fixes them
    ("InvalidAMIID.NotFound", 400, base.Permanent),
    ("InvalidAMIID.Malformed", 400, base.Permanent),
    ("InvalidSubnetID.NotFound", 400, base.Permanent),
    ("InvalidParameterValue", 400, base.Permanent),
    ("InvalidParameterCombination", 400, base.Permanent),
    ("MissingParameter", 400, base.Permanent),
    ("Unsupported", 400, base.Permanent),
    ("RulesPerSecurityGroupLimitExceeded", 400, base.Permanent),
    ("InvalidInstanceID.Malformed", 400, base.Permanent),
    ("InvalidVpcID.NotFound", 400, base.Permanent),
    # short-lived
    ("ExpiredToken", 400, base.Transient),
    ("RequestExpired", 400, base.Transient),
    ("InternalError", 500, base.Transient),
    ("Unavailable", 503, base.Transient),
    ("IncorrectState", 409, base.Transient),
    ("DependencyViolation", 400, base.Transient),
    ("InvalidGroup.NotFound", 400, base.Transient),  # our own group, right after creating it
    # unclassified
    ("SomethingNewFromAws", 400, base.Transient),
    ("", 500, base.Transient),
    ("", 403, base.Permanent),
]


@pytest.mark.parametrize(("code", "status", "want"), TABLE, ids=[f"{c or 'no-code'}-{s}" for c, s, _ in TABLE])
def test_classify(code, status, want):
    assert classify(client_error(code, status), "get") is want


@pytest.mark.parametrize(("op", "want"), [("get", base.NotFound), ("delete", base.NotFound), ("", base.NotFound),
                                          ("create", base.Transient), ("list", base.Transient)])
def test_instance_not_found_is_not_found_except_on_create_and_list(op, want):
    assert classify(client_error("InvalidInstanceID.NotFound"), op) is want


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (bexc.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), base.Transient),
        (bexc.ConnectTimeoutError(endpoint_url="http://x"), base.Transient),
        (bexc.ReadTimeoutError(endpoint_url="http://x"), base.Transient),
        (bexc.ConnectionClosedError(endpoint_url="http://x"), base.Transient),
        (bexc.NoCredentialsError(), base.Transient),  # a Secret not mounted yet
        (bexc.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), base.Transient),
        (bexc.ParamValidationError(report="bad"), base.Permanent),
        (bexc.NoRegionError(), base.Permanent),
        (bexc.ProfileNotFound(profile="x"), base.Permanent),
        (ResponseParserError("not XML"), base.Transient),
        (DeadlineCut("cut"), base.Transient),
        (KeyError("Reservations"), base.Transient),
        (TypeError("bad"), base.Transient),
        (ValueError("not an SDK error"), base.Transient),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else getattr(v, "__name__", str(v)),
)
def test_classify_what_is_not_an_ec2_answer(exc, want):
    assert classify(exc, "create") is want


@pytest.fixture
def proxy(moto):
    with Ec2FaultProxy(moto.url) as p:
        yield p


@pytest.mark.parametrize(("fault", "want"), [("throttled", base.Transient), ("instance-limit", base.QuotaExceeded),
                                             ("vcpu-limit", base.QuotaExceeded), ("no-capacity", base.QuotaExceeded),
                                             ("http-401", base.Permanent), ("http-403", base.Permanent),
                                             ("http-500", base.Transient)])
def test_ec2_error_xml_on_the_wire_reaches_the_caller_as_its_class(make_provider, proxy, fault, want):
    assert fault in CODED or fault.startswith("http-")
    p = make_provider(endpointUrl=proxy.url)
    proxy.inject(fault, nth=2)  # RunInstances: after CreateSecurityGroup and AuthorizeSecurityGroupIngress
    with pytest.raises(base.ProviderError) as err:
        p.create(request(), dl())
    assert type(err.value) is want and isinstance(err.value.__cause__, bexc.ClientError)
    assert proxy.fired() == 1
