"""The one place kubernetes-client errors become provider error classes."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from providers import base


def classify(exc: BaseException) -> type[base.ProviderError]:
    """404 NotFound; 400/401/403/422 Permanent (RBAC and quota can't be told
    apart on a 403, so it stays Permanent, as in the seed); the rest Transient."""
    if isinstance(exc, ApiException):
        if exc.status == 404:
            return base.NotFound
        if exc.status in (400, 401, 403, 422):
            return base.Permanent
    return base.Transient
