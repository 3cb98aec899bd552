"""The one place EC2 failures become provider error classes.

A `botocore.exceptions.ClientError` carries EC2's error code; the table
below maps the codes that need more than the default. Throttling is
Transient, not QuotaExceeded: EC2's request limits are token buckets that
refill within seconds, so the ordinary back-off (1 s doubling) fits, and
the 5-minute quota wait would only delay the fleet. Capacity and account
limits are QuotaExceeded (they clear when something else goes, or when AWS
has room again). Credentials and rights are Permanent: only the config or
IAM fixes them. `InvalidInstanceID.NotFound` is NotFound except on create
(create never says NotFound). Any other `Invalid…`/`….Malformed` code
names a bad argument (an AMI, a subnet, an instance type): Permanent.
Network errors, timeouts, an answer that does not parse, missing
credentials (a Secret not mounted yet) and anything unknown are Transient.
"""

from __future__ import annotations

from typing import Any

from botocore import exceptions as bexc

from providers import base

THROTTLING = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled", "RequestThrottledException",
    "TooManyRequestsException", "SlowDown", "EC2ThrottledException", "PriorRequestNotComplete",
})
QUOTA = frozenset({
    "InstanceLimitExceeded", "VcpuLimitExceeded", "InsufficientInstanceCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientCapacity", "InsufficientFreeAddressesInSubnet",
    "MaxSpotInstanceCountExceeded", "SecurityGroupLimitExceeded", "ResourceLimitExceeded", "AddressLimitExceeded",
})
PERMANENT = frozenset({
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch", "OptInRequired",
    "Blocked", "AccessDenied", "AccessDeniedException", "UnrecognizedClientException", "MissingParameter",
    "UnknownParameter", "Unsupported", "UnsupportedOperation", "RulesPerSecurityGroupLimitExceeded",
    "InvalidParameterValue", "InvalidParameterCombination", "InvalidParameter", "ValidationError",
})
# Short-lived: a rotated session token, a clock a little off, an internal error.
TRANSIENT = frozenset({
    "ExpiredToken", "RequestExpired", "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
    "IdempotentParameterMismatch", "IncorrectState", "IncorrectInstanceState", "DependencyViolation",
})
INSTANCE_NOT_FOUND = "InvalidInstanceID.NotFound"
GROUP_NOT_FOUND = "InvalidGroup.NotFound"
GROUP_DUPLICATE = "InvalidGroup.Duplicate"
PERMISSION_DUPLICATE = "InvalidPermission.Duplicate"
PERMISSION_NOT_FOUND = "InvalidPermission.NotFound"
DEPENDENCY = "DependencyViolation"


def error_code(exc: BaseException) -> str:
    if not isinstance(exc, bexc.ClientError):
        return ""
    err: Any = exc.response.get("Error") if isinstance(exc.response, dict) else None
    code = err.get("Code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else ""


def http_status(exc: BaseException) -> int:
    if not isinstance(exc, bexc.ClientError) or not isinstance(exc.response, dict):
        return 0
    meta = exc.response.get("ResponseMetadata")
    status = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
    return status if isinstance(status, int) else 0


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    if isinstance(exc, bexc.ParamValidationError | bexc.NoRegionError | bexc.ProfileNotFound):
        return base.Permanent  # a request botocore refuses to send: a bad value in the spec or config
    code = error_code(exc)
    if not code:
        status = http_status(exc)
        if status in (401, 403):
            return base.Permanent
        return base.Transient
    if code == INSTANCE_NOT_FOUND:
        return base.NotFound if op in ("get", "delete", "") else base.Transient  # create and list never say NotFound
    if code in THROTTLING:
        return base.Transient
    if code in QUOTA:
        return base.QuotaExceeded
    if code in PERMANENT:
        return base.Permanent
    if code in TRANSIENT:
        return base.Transient
    if code == GROUP_NOT_FOUND:
        # right after CreateSecurityGroup, EC2 may not see the group yet
        return base.Transient
    if code.startswith("Invalid") or code.endswith((".Malformed", ".NotFound")):
        return base.Permanent
    if http_status(exc) in (401, 403):
        return base.Permanent
    return base.Transient
