"""The one place Hetzner Cloud failures become provider error classes.

hcloud raises `APIException` with the API's error code (`{"error": {"code":
…}}`), or the HTTP status when the answer had no such body (a proxy's
page, garbage). Rate limiting is Transient: the limit refills by the
second (3600 requests an hour, one more each second), so the ordinary
back-off fits. Project limits and a location without capacity are
QuotaExceeded. Token problems and bad arguments are Permanent. `not_found`
is NotFound on get and delete; on create it names an image, type or
location that does not exist (Permanent); in a list it is Transient. A
status without an error body (a 404 from something in between) never says
NotFound. Network errors, timeouts, unparsable answers and anything
unknown are Transient.
"""

from __future__ import annotations

from hcloud import APIException

from providers import base

QUOTA = frozenset({"resource_limit_exceeded", "resource_unavailable", "placement_error", "server_limit_exceeded"})
PERMANENT = frozenset({"unauthorized", "forbidden", "token_readonly", "invalid_input", "json_error", "unsupported_error",
                       "protected", "invalid_server_type", "invalid_image", "invalid_location"})
TRANSIENT = frozenset({"rate_limit_exceeded", "conflict", "locked", "server_error", "service_error", "maintenance",
                       "unavailable", "timeout", "bad_gateway", "resource_in_use", "uniqueness_error"})
NOT_FOUND = "not_found"
UNIQUENESS = "uniqueness_error"
IN_USE = "resource_in_use"


def api_code(exc: BaseException) -> str:
    code = exc.code if isinstance(exc, APIException) else None
    return code if isinstance(code, str) else ""


def http_status(exc: BaseException) -> int:
    code = exc.code if isinstance(exc, APIException) else None
    return code if isinstance(code, int) else 0


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    code = api_code(exc)
    if code == NOT_FOUND:
        if op == "create":
            return base.Permanent
        return base.NotFound if op in ("get", "delete", "") else base.Transient
    if code in QUOTA:
        return base.QuotaExceeded
    if code in PERMANENT:
        return base.Permanent
    if code:
        return base.Transient  # TRANSIENT, and any code added later
    if http_status(exc) in (401, 403):
        return base.Permanent
    return base.Transient
