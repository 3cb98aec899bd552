"""A fault-injecting HTTP proxy in front of moto, speaking EC2's wire:
error answers are EC2's XML (`<Response><Errors><Error><Code>…`), garbage is
XML-shaped garbage, and the wire faults (truncated body, reset, closed,
hang) are those of tests/providers/faults.py: a faults.FaultProxy in EC2's
dialect, so faults.ProxiedBackend drives it for the conformance suite."""

from __future__ import annotations

from tests.providers import conformance, faults

# The EC2 code each injected status comes with: what EC2 answers that status with.
CODES = {
    400: "InvalidParameterValue",
    401: "AuthFailure",
    403: "UnauthorizedOperation",
    404: "InvalidInstanceID.NotFound",
    409: "IncorrectState",
    429: "RequestLimitExceeded",
    500: "InternalError",
    503: "Unavailable",
}
# More EC2 answers worth their own fault: (status, code).
CODED = {
    "throttled": (503, "RequestLimitExceeded"),
    "instance-limit": (400, "InstanceLimitExceeded"),
    "vcpu-limit": (400, "VcpuLimitExceeded"),
    "no-capacity": (500, "InsufficientInstanceCapacity"),
}
MALFORMED_XML = "malformed-xml"
WRONG_SHAPE_XML = "wrong-shape-xml"
# What the conformance suite injects at every request (CODED is for the wire classification test).
FAULTS = (tuple(f"http-{s}" for s in CODES) + ("throttled", MALFORMED_XML, WRONG_SHAPE_XML)
          + (faults.TRUNCATED, faults.RESET, faults.CLOSED, faults.HANG))
MALFORMED_BODY = b'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse><reservationSet><item><instan'
# Well-formed XML in none of the shapes asked for: every element a caller reads is missing or garbage.
WRONG_SHAPE_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><requestId>x</requestId>'
                    b'<reservationSet>garbage</reservationSet><securityGroupInfo>garbage</securityGroupInfo>'
                    b'<instancesSet><item><state>7</state></item></instancesSet><accountAttributeSet>7</accountAttributeSet>'
                    b'</Response>')
STATE_FAULTS = {
    conformance.MALFORMED: MALFORMED_XML,
    conformance.SERVER_ERROR: "http-500",
    conformance.DROPPED: faults.CLOSED,
    conformance.HANGS: faults.HANG,
}


def error_xml(code: str, message: str = "injected by the test") -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>fault-0</RequestID></Response>").encode()


def Ec2FaultProxy(upstream: str) -> faults.FaultProxy:  # noqa: N802  (it reads as the class it stands for)
    extra = {MALFORMED_XML: (200, MALFORMED_BODY), WRONG_SHAPE_XML: (200, WRONG_SHAPE_BODY),
             **{name: (status, error_xml(code)) for name, (status, code) in CODED.items()}}
    return faults.FaultProxy(upstream, lambda status: error_xml(CODES[status]), encode=lambda body: body,
                             content_type="text/xml", malformed=MALFORMED_BODY, wrong_shape=WRONG_SHAPE_BODY, extra=extra)
