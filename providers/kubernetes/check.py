"""The kubernetes Checker: one cluster-wide list of at most one managed pod.

Same client, verb and scope as `list_by_tag` and GC, so a pass means the API
server answers and the RBAC still covers them. It does not prove create or
delete rights.

The request gets the time left as its timeout, and runs under a
`providers.watchdog` guard: the client's read timeout is per socket read, so
an API server (or a proxy in front of it) answering a byte at a time would
hold the check, its thread and its socket past any deadline; at the deadline
the guard shuts that socket down. The answer is read and the connection
handed back to the pool, so the next round reuses it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import urllib3
from kubernetes.client.exceptions import ApiException

from providers import base
from providers.base import Deadline, TargetStatus
from providers.kubernetes.client import watch_sockets
from providers.watchdog import CUT_MESSAGE, guard

if TYPE_CHECKING:
    from providers.kubernetes.provider import KubernetesProvider

TARGET = "apiserver"
MANAGED_SELECTOR = f"{base.LABEL_MANAGED}={base.LABEL_MANAGED_YES}"


def check_apiserver(p: KubernetesProvider, deadline: Deadline) -> list[TargetStatus]:
    start = time.monotonic()
    address = ""
    cut = False
    try:
        api = p.api_client()
        address = api.configuration.host
        watch_sockets(api)
        remaining = deadline.remaining()
        if remaining <= 0:
            raise TimeoutError("deadline passed before the request")
        core = p.core()
        with guard(deadline) as g:
            try:
                raw = core.list_pod_for_all_namespaces(
                    label_selector=MANAGED_SELECTOR, limit=1, _request_timeout=remaining, _preload_content=False
                )
                raw.read()
                raw.release_conn()
            finally:
                cut = g.fired
    except Exception as exc:  # never raises: a failure is a verdict
        reason = base.REASON_TIMEOUT if cut else check_reason(exc, deadline)
        msg = CUT_MESSAGE if cut else _message(exc)
        return [TargetStatus(TARGET, address, False, reason, msg, time.monotonic() - start)]
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
