"""The gcp Checker: one request, the first page of an aggregated list of at
most one managed instance.

Same credentials, call and filter as `list_by_tag` (and so GC), so a pass
proves the token, the Compute API and `compute.instances.list` on the
project, in one request whatever the project's size. The SDK's pager would
fetch every further page on iteration (`maxResults` is only the page size),
so only the first page is read, from `pager.pages`. The target is the
project: the config names no zones.

Details (all from that one answer, no extra request):

- `managedInstances`: "0", "1", or "more than 1" (the page is full and has a
  next page token) — whether this provider runs anything at all;
- `unreachableZones`: scopes the API could not read (empty when none) —
  where creates fail and GC is blind right now;
- `credentials` and `principal`: which credentials ADC picked and whom they
  act as, when the credentials know it locally or learnt it with the token
  — the first thing to look at on Unauthorized or Forbidden;
- on an API error, `httpStatus` and `errorReason` (e.g. accessNotConfigured
  for a disabled API, insufficientPermissions, SERVICE_DISABLED) — the
  reason splits "enable the API" from "grant the role" under Forbidden.

The request gets the time left as its `timeout=` (per socket read) and runs
under a `providers.watchdog` guard, which shuts its socket down at the
deadline: an endpoint answering a byte at a time would otherwise hold the
check's thread and socket for as long as it drips.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials, Credentials

from providers import base
from providers.base import Deadline, TargetStatus
from providers.gcp.client import address_of
from providers.gcp.errors import error_reasons, http_status
from providers.gcp.listing import list_request, read_page
from providers.watchdog import CUT_MESSAGE, guard

if TYPE_CHECKING:
    from providers.gcp.provider import GcpProvider


def check_project(p: GcpProvider, deadline: Deadline) -> list[TargetStatus]:
    start = time.monotonic()
    target = p.cfg.project
    address = address_of(p.cfg)
    details: dict[str, str] = {}
    cut = False
    try:
        remaining = deadline.remaining()
        if remaining <= 0:
            raise TimeoutError("deadline passed before the request")
        client = p.compute.instances()
        with guard(deadline) as g:
            try:
                pager = client.aggregated_list(
                    request=list_request(p.cfg.project, max_results=1), timeout=remaining, retry=None
                )
                first = next(iter(pager.pages))  # the answer already fetched; never the next page
            finally:
                cut = g.fired
    except Exception as exc:  # never raises: a failure is a verdict
        latency = time.monotonic() - start
        details.update(_credential_details(p.compute.credentials()))
        status = http_status(exc)
        if status:
            details["httpStatus"] = str(status)
            reasons = error_reasons(exc)
            if reasons:
                details["errorReason"] = reasons[0]
        p.log_api_error("check", "", exc)
        if cut:
            return [TargetStatus(target, address, False, base.REASON_TIMEOUT, CUT_MESSAGE, latency, details)]
        return [TargetStatus(target, address, False, check_reason(exc, deadline), message(exc), latency, details)]
    latency = time.monotonic() - start
    page = read_page(first)
    seen = len(page.instances)
    details["managedInstances"] = "more than 1" if seen and page.next_page_token else str(seen)
    details["unreachableZones"] = ",".join(sorted(page.unreachable))
    details.update(_credential_details(p.compute.credentials()))
    return [TargetStatus(target, address, True, base.REASON_REACHABLE, "", latency, details)]


def check_reason(exc: BaseException, deadline: Deadline) -> str:
    """Timeout (the deadline), Unauthorized (401), Forbidden (403, also a
    disabled API), APIError (any other status), Unreachable (network, or no
    token: a token that can't be fetched never reaches the API)."""
    status = http_status(exc)
    if status == 401:
        return base.REASON_UNAUTHORIZED
    if status == 403:
        return base.REASON_FORBIDDEN
    if status:
        return base.REASON_API_ERROR
    if deadline.expired or isinstance(exc, TimeoutError | requests.ReadTimeout | gexc.RetryError):
        return base.REASON_TIMEOUT
    return base.REASON_UNREACHABLE


def message(exc: BaseException) -> str:
    if isinstance(exc, gexc.GoogleAPICallError):
        return str(exc)  # "403 GET <url>: <message>"; the URL holds no credentials
    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return f"no Application Default Credentials: {exc}"
    if isinstance(exc, auth_exc.GoogleAuthError):
        return f"cannot get a token: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _credential_details(creds: Credentials | None) -> dict[str, str]:
    if creds is None:
        return {}
    if isinstance(creds, AnonymousCredentials):
        return {"credentials": "anonymous"}
    out = {"credentials": type(creds).__module__.rsplit(".", 1)[-1]}
    try:
        info = creds.get_cred_info() or {}
    except Exception:  # informational only
        info = {}
    if info.get("credential_type"):
        out["credentials"] = str(info["credential_type"])
    principal = info.get("principal")
    if principal and principal != "default":
        out["principal"] = str(principal)
    return out
