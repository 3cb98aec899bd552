"""The kubernetes Checker: one cluster-wide list of at most one managed pod.

Same client, verb and scope as `list_by_tag` and GC, so a pass means the API
server answers and the RBAC still covers them. It does not prove create or
delete rights.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import urllib3
from kubernetes.client.exceptions import ApiException

from providers import base
from providers.base import Deadline, TargetStatus

if TYPE_CHECKING:
    from providers.kubernetes.provider import KubernetesProvider

TARGET = "apiserver"
MANAGED_SELECTOR = f"{base.LABEL_MANAGED}={base.LABEL_MANAGED_YES}"


def check_apiserver(p: KubernetesProvider, deadline: Deadline) -> list[TargetStatus]:
    start = time.monotonic()
    address = ""
    try:
        api = p.api_client()
        address = api.configuration.host
        remaining = deadline.remaining()
        if remaining <= 0:
            raise TimeoutError("deadline passed before the request")
        core = p.core()
        core.list_pod_for_all_namespaces(
            label_selector=MANAGED_SELECTOR, limit=1, _request_timeout=remaining, _preload_content=False
        )
    except Exception as exc:  # never raises: a failure is a verdict
        return [
            TargetStatus(TARGET, address, False, check_reason(exc, deadline), _message(exc), time.monotonic() - start)
        ]
    return [TargetStatus(TARGET, address, True, base.REASON_REACHABLE, "", time.monotonic() - start)]


def check_reason(exc: BaseException, deadline: Deadline) -> str:
    if isinstance(exc, ApiException):
        reason = _status_reason(exc)
        if reason in ("Timeout", "ServerTimeout") or exc.status == 504:
            return base.REASON_TIMEOUT
        if exc.status == 401:
            return base.REASON_UNAUTHORIZED
        if exc.status == 403:
            return base.REASON_FORBIDDEN
        if exc.status:
            return base.REASON_API_ERROR
    cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    # urllib3's NewConnectionError subclasses its ConnectTimeoutError: a refused
    # connection must not read as a timeout.
    if isinstance(cause, urllib3.exceptions.NewConnectionError):
        return base.REASON_UNREACHABLE
    if deadline.expired or isinstance(cause, TimeoutError | urllib3.exceptions.TimeoutError):
        return base.REASON_TIMEOUT
    return base.REASON_UNREACHABLE


def _status_reason(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("reason", "")
    except (ValueError, AttributeError):
        return ""


def _message(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        try:
            msg = json.loads(exc.body or "{}").get("message")
        except (ValueError, AttributeError):
            msg = None
        return f"{exc.status} {exc.reason}: {msg}" if msg else f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
