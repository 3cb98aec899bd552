"""The one place kubernetes-client errors become provider error classes.

Everything the provider's `_call` catches comes here: the client's
`ApiException` (an HTTP status), urllib3's network and protocol errors (a
refused or reset connection, a truncated body), and an answer that does not
parse (JSONDecodeError, or a KeyError/TypeError/AttributeError from a body of
the wrong shape). Only statuses carry meaning; the rest is Transient.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from providers import base


def classify(exc: BaseException, op: str = "") -> type[base.ProviderError]:
    """404 NotFound, except on create, where it names a namespace that does
    not exist (Permanent: create never says NotFound); 400/401/403/422
    Permanent (RBAC and quota can't be told apart on a 403, so it stays
    Permanent, as in the seed); the rest, and anything that is not an API
    status, Transient."""
    if isinstance(exc, ApiException):
        if exc.status == 404:
            return base.Permanent if op == "create" else base.NotFound
        if exc.status in (400, 401, 403, 422):
            return base.Permanent
    return base.Transient
