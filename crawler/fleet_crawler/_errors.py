"""What can go wrong talking to fleet, each class saying what the crawler does next:

    ApiError              fleet answered something this client cannot use (status, the server's reason)
    ├── Unreachable       no HTTP answer, after the retries (status None): the API or the network is down
    ├── Unauthorized      401: a missing or wrong token; retrying will not help
    ├── NoProxy           no proxy now (409 busy or 503 none / recovering, after the retries): try later
    └── LeaseEnded        the lease is over (404 released, expired or unknown; 410 revoked): lease anew

Every answer is translated to one of these at one place (`_calls.answer_error`); httpx's own exceptions never
reach the caller (`_calls.TRANSPORT_ERRORS` become Unreachable).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An answer of the lease API this client cannot use: `status` (None when there was no answer), the
    server's `reason` (its `error` text), the `field` it names and the whole JSON `body`."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "", field: str | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.field = status, reason, field
        self.body: dict[str, Any] = body or {}


class Unreachable(ApiError):
    """No HTTP answer (refused, timed out, broken) after the retries."""


class Unauthorized(ApiError):
    """401: no or a wrong bearer token."""


class NoProxy(ApiError):
    """No proxy for the lease: every matching one is busy or cooling down (409, `busy`), none matches or fleet
    is recovering a loss of Redis data (503; `recovering`). `retry_after`: seconds the server suggested, if any."""

    @property
    def busy(self) -> bool:
        return self.status == 409

    @property
    def recovering(self) -> bool:
        return bool(self.body.get("recovering"))

    @property
    def retry_after(self) -> float | None:
        value = self.body.get("retryAfter")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class LeaseEnded(ApiError):
    """The lease cannot be renewed, reported on or released: 404 (released, expired or unknown), 410 (revoked:
    its proxy was deleted, replaced or turned unhealthy; `revoked` says which), 409 on a renewal (Redis lost
    it and its proxy is full now). Stop using its proxy and lease anew."""

    @property
    def revoked(self) -> str | None:
        """gone, replaced or unhealthy for a revoked lease; None otherwise."""
        reason = self.body.get("reason")
        return reason if self.status == 410 and isinstance(reason, str) else None
