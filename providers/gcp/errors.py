"""The one place Compute API failures become provider error classes.

Two kinds of failure reach here:

- an HTTP error from the SDK (`google.api_core.exceptions.GoogleAPICallError`,
  `.code` is the HTTP status with the REST transport), and
- `OperationFailedError`: an insert the API accepted that failed later, read back
  from its zone operation (see provider.get).

Everything else (network errors, a token that can't be fetched, a retry
budget spent, anything unknown) is Transient.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.api_core import exceptions as gexc

from providers import base

# `errors[].reason` of a 403 that means "slow down", not "not allowed".
QUOTA_REASONS = frozenset({"quotaExceeded", "rateLimitExceeded", "userRateLimitExceeded"})
# The same in the newer ErrorInfo detail.
QUOTA_INFO_REASONS = frozenset({"RATE_LIMIT_EXCEEDED", "QUOTA_EXCEEDED"})
# Operation error codes worth retrying slowly: quota, and a zone out of
# capacity for the machine type (a stockout clears by itself).
QUOTA_OPERATION_CODES = frozenset(
    {
        "QUOTA_EXCEEDED",
        "RATE_LIMIT_EXCEEDED",
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    }
)


class OperationFailedError(Exception):
    """A zone operation that finished with an error (`Operation.error`)."""

    def __init__(self, operation: str, status: int, codes: Iterable[str], message: str) -> None:
        self.operation = operation
        self.status = status  # httpErrorStatusCode, 0 when absent
        self.codes = tuple(codes)
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        code = ",".join(self.codes) or "UNKNOWN"
        status = f" (HTTP {self.status})" if self.status else ""
        return f"operation {self.operation} failed{status}: {code}: {self.message}"


def error_reasons(exc: BaseException) -> list[str]:
    """The API's machine-readable reasons: `errors[].reason`, then the
    ErrorInfo reason; empty for anything that isn't an API error."""
    if not isinstance(exc, gexc.GoogleAPICallError):
        return []
    out = [e.get("reason", "") for e in exc.errors if isinstance(e, Mapping) and e.get("reason")]
    info = exc.reason
    if info and info not in out:
        out.append(info)
    return out


def http_status(exc: BaseException) -> int:
    code: Any = getattr(exc, "code", None) if isinstance(exc, gexc.GoogleAPICallError) else None
    return code if isinstance(code, int) else 0


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    """404 NotFound, except on create: there it names a zone, machine type,
    image or network that does not exist, so Permanent (create never says
    NotFound); 429, and 403 with a quota or rate-limit reason, QuotaExceeded;
    400, 401 and other 403s Permanent; 5xx, network errors, an answer that
    does not parse and anything unknown Transient. A failed operation: quota
    codes and 429 QuotaExceeded, any other 4xx Permanent (a bad image is a
    404 there, and must not read as "the instance is gone"), 5xx or no status
    Transient."""
    if isinstance(exc, OperationFailedError):
        if QUOTA_OPERATION_CODES.intersection(exc.codes) or exc.status == 429:
            return base.QuotaExceeded
        if 400 <= exc.status < 500:
            return base.Permanent
        return base.Transient
    status = http_status(exc)
    if status == 404:
        return base.Permanent if op == "create" else base.NotFound
    if status == 429:
        return base.QuotaExceeded
    if status == 403:
        reasons = set(error_reasons(exc))
        if reasons & QUOTA_REASONS or reasons & QUOTA_INFO_REASONS:
            return base.QuotaExceeded
        return base.Permanent
    if status in (400, 401):
        return base.Permanent
    return base.Transient
