"""The hetzner Checker: one request, GET /servers with the managed label
selector and per_page=1 — the same token, path and selector as
list_by_tag, whatever the project's size.

One target: the project the token belongs to (its name is `hcloud`, its
address the API endpoint). Details from that answer: `managedServers`
(meta.pagination.total_entries), `credentials` (inline token or
tokenFile), and on an API error `httpStatus` or `errorCode`. Hetzner has
no API for the project's limits, so there is no quota headroom to show.

Own reason: `NoCredentials`, no token to send (tokenFile missing or empty).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import requests

from providers import base
from providers.base import Deadline, TargetStatus
from providers.hetzner.client import NoToken
from providers.hetzner.errors import api_code, http_status
from providers.hetzner.servers import MANAGED_SELECTOR
from providers.watchdog import CUT_MESSAGE, guard

if TYPE_CHECKING:
    from providers.hetzner.provider import HetznerProvider

TARGET = "hcloud"
REASON_NO_CREDENTIALS = "NoCredentials"
HETZNER_REASONS = (REASON_NO_CREDENTIALS,)


def check_project(p: HetznerProvider, deadline: Deadline) -> list[TargetStatus]:
    start = time.monotonic()
    address = p.cfg.apiEndpoint
    details = {"credentials": p.hcloud.credentials_kind()}
    cut = False
    try:
        if deadline.remaining() <= 0:
            raise TimeoutError("deadline passed before the request")
        client = p.hcloud.client()
        with guard(deadline) as g:
            try:
                res = client.servers.get_list(label_selector=MANAGED_SELECTOR, per_page=1)
                total = res.meta.pagination.total_entries if res.meta and res.meta.pagination else None
                if total is not None and not isinstance(total, int):
                    raise TypeError("meta.pagination.total_entries is not a number")
            finally:
                cut = g.fired
    except Exception as exc:  # never raises: a failure is a verdict
        latency = time.monotonic() - start
        if http_status(exc):
            details["httpStatus"] = str(http_status(exc))
        if api_code(exc):
            details["errorCode"] = api_code(exc)
        p.log_api_error("check", "", exc)
        if cut:
            return [TargetStatus(TARGET, address, False, base.REASON_TIMEOUT, CUT_MESSAGE, latency, details)]
        return [TargetStatus(TARGET, address, False, check_reason(exc, deadline), f"{type(exc).__name__}: {exc}", latency, details)]
    details["managedServers"] = "" if total is None else str(total)
    return [TargetStatus(TARGET, address, True, base.REASON_REACHABLE, "", time.monotonic() - start, details)]


def check_reason(exc: BaseException, deadline: Deadline) -> str:
    code, status = api_code(exc), http_status(exc)
    if isinstance(exc, NoToken):
        return REASON_NO_CREDENTIALS
    if code == "unauthorized" or status == 401:
        return base.REASON_UNAUTHORIZED
    if code in ("forbidden", "token_readonly") or status == 403:
        return base.REASON_FORBIDDEN
    if code or status:
        return base.REASON_API_ERROR
    if deadline.expired or isinstance(exc, TimeoutError | requests.Timeout):
        return base.REASON_TIMEOUT
    if isinstance(exc, requests.ConnectionError):
        return base.REASON_UNREACHABLE
    return base.REASON_API_ERROR  # an answer that does not read
