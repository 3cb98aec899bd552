"""The aws Checker: one DescribeAccountAttributes per configured region.

One target per region (name: the region; address: its EC2 endpoint), in
the config's order. The call needs valid credentials and the
`ec2:DescribeAccountAttributes` right, and reaches the same endpoint as
every other call; it reads no instance, so a large fleet costs it nothing.

Details, all from that one answer or from the credentials in hand:

- `maxInstances`: the account's instance limit in the region (EC2's
  `max-instances` attribute), the headroom the answer can tell; vCPU
  quotas live in the Service Quotas API and would cost another request;
- `defaultVpc`: the region's default VPC (`none` when there is none: then
  `vpcId` and subnets are needed);
- `credentials`: where boto3's chain found them (`env`,
  `shared-credentials-file`, `assume-role-with-web-identity`, `iam-role`…);
- on an API error, `httpStatus` and `errorCode` (EC2's own code).

Own reason: `NoCredentials`, the chain found none (mount the Secret, or
bind a role): told apart from `Unauthorized` (credentials AWS refused).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from botocore import exceptions as bexc
from botocore.parsers import ResponseParserError

from providers import base
from providers.aws.client import address_of
from providers.aws.errors import error_code, http_status
from providers.base import Deadline, TargetStatus
from providers.watchdog import CUT_MESSAGE, guard

if TYPE_CHECKING:
    from providers.aws.provider import AwsProvider

REASON_NO_CREDENTIALS = "NoCredentials"
AWS_REASONS = (REASON_NO_CREDENTIALS,)
UNAUTHORIZED = frozenset({"AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken",
                          "UnrecognizedClientException"})
FORBIDDEN = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "OptInRequired", "Blocked"})


def check_regions(p: AwsProvider, deadline: Deadline) -> list[TargetStatus]:
    return [check_region(p, region, deadline) for region in p.cfg.all_regions]


def check_region(p: AwsProvider, region: str, deadline: Deadline) -> TargetStatus:
    start = time.monotonic()
    address = address_of(p.cfg, region)
    details: dict[str, str] = {}
    cut = False
    try:
        if deadline.remaining() <= 0:
            raise TimeoutError("deadline passed before the request")
        client = p.ec2.client(region)
        with guard(deadline) as g:
            try:
                answer = client.describe_account_attributes(AttributeNames=["max-instances", "default-vpc"])
                attrs = _attributes(answer)
            finally:
                cut = g.fired
    except Exception as exc:  # never raises: a failure is a verdict
        latency = time.monotonic() - start
        _credentials(p, details)
        status, code = http_status(exc), error_code(exc)
        if status:
            details["httpStatus"] = str(status)
        if code:
            details["errorCode"] = code
        p.log_api_error("check", region, exc)
        if cut:
            return TargetStatus(region, address, False, base.REASON_TIMEOUT, CUT_MESSAGE, latency, details)
        return TargetStatus(region, address, False, check_reason(exc, deadline), message(exc), latency, details)
    latency = time.monotonic() - start
    if "max-instances" in attrs:
        details["maxInstances"] = attrs["max-instances"]
    if "default-vpc" in attrs:
        details["defaultVpc"] = attrs["default-vpc"]
    _credentials(p, details)
    return TargetStatus(region, address, True, base.REASON_REACHABLE, "", latency, details)


def _attributes(answer: Any) -> dict[str, str]:
    """`AccountAttributes` as name → first value; refuses an answer of another shape."""
    out: dict[str, str] = {}
    for a in answer["AccountAttributes"]:
        values = [str(v["AttributeValue"]) for v in a.get("AttributeValues") or ()]
        out[str(a["AttributeName"])] = ",".join(values)
    return out


def _credentials(p: AwsProvider, details: dict[str, str]) -> None:
    kind = p.ec2.credentials_kind()
    if kind:
        details["credentials"] = kind


def check_reason(exc: BaseException, deadline: Deadline) -> str:
    code, status = error_code(exc), http_status(exc)
    if isinstance(exc, bexc.NoCredentialsError | bexc.PartialCredentialsError):
        return REASON_NO_CREDENTIALS
    if code in UNAUTHORIZED or status == 401:
        return base.REASON_UNAUTHORIZED
    if code in FORBIDDEN or status == 403:
        return base.REASON_FORBIDDEN
    if code or status:
        return base.REASON_API_ERROR
    if deadline.expired or isinstance(exc, TimeoutError | bexc.ReadTimeoutError | bexc.ConnectTimeoutError):
        return base.REASON_TIMEOUT
    if isinstance(exc, ResponseParserError):
        return base.REASON_API_ERROR
    return base.REASON_UNREACHABLE


def message(exc: BaseException) -> str:
    if isinstance(exc, bexc.ClientError):
        return str(exc)  # "An error occurred (Code) when calling the X operation: message"; no credentials in it
    if isinstance(exc, bexc.NoCredentialsError):
        return "no AWS credentials: none in the environment, the shared files, a web identity token or an instance role"
    return f"{type(exc).__name__}: {exc}"
