"""The upstream Checker: one target, `upstream`, one tunnel through it.

Vendor mode dials the endpoint with a fresh session's username (placement
placeholders from `checkPlacement`); list mode dials the first entry with
its credentials. The tunnel goes to `checkURL` (host:port): CONNECT for
HTTP, RFC 1928/1929 for SOCKS5 (`dialing`), and is closed at once.

Reasons: `Reachable` (tunnel up), `Unauthorized` (407, SOCKS5 auth refused),
`Unreachable` (no TCP connection), `Timeout` (no complete answer by the
deadline), `Forbidden` (a 403), `APIError` (any other refusal, or an answer
that is not the protocol), and one of its own:

- `CredentialsUnreadable`: usernameFile, passwordFile or listFile can't be
  read or parsed (the Secret isn't mounted, or holds a wrong key): fix the
  Secret, not the network.

Details: mode, scheme, entries (list mode), session (vendor: the checked
one, never the username). Never raises.
"""

from __future__ import annotations

import secrets
import socket
import time

from providers import base
from providers.base import Deadline, TargetStatus
from providers.upstream import credentials, dialing
from providers.upstream.config import Endpoint, UpstreamConfig

TARGET = "upstream"
REASON_CREDENTIALS_UNREADABLE = "CredentialsUnreadable"
UPSTREAM_REASONS = (*base.SHARED_REASONS, REASON_CREDENTIALS_UNREADABLE)


def new_session() -> str:
    """A vendor session id: 16 lowercase letters and digits, random."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(16))


def reason(exc: BaseException) -> str:
    """Pure: what a dial raised → the reason."""
    if isinstance(exc, dialing.AuthFailed):
        return base.REASON_UNAUTHORIZED
    if isinstance(exc, dialing.Refused):
        return base.REASON_FORBIDDEN if exc.code == 403 else base.REASON_API_ERROR
    if isinstance(exc, dialing.ProtocolError):
        return base.REASON_API_ERROR
    if isinstance(exc, TimeoutError | socket.timeout):
        return base.REASON_TIMEOUT
    if isinstance(exc, OSError):
        return base.REASON_UNREACHABLE
    return base.REASON_API_ERROR


def check_upstream(cfg: UpstreamConfig, deadline: Deadline) -> list[TargetStatus]:
    start = time.monotonic()
    details = {"mode": cfg.mode}
    address = cfg.endpoint
    try:
        endpoint: Endpoint
        if cfg.mode == "vendor":
            endpoint = cfg.vendor_endpoint()
            session = new_session()
            details["session"] = session
            creds: credentials.Credentials | None = credentials.for_session(cfg, session, dict(cfg.checkPlacement))
        else:
            entries = credentials.entries(cfg)
            details["entries"] = str(len(entries))
            if not entries:
                raise ValueError("the list is empty")
            endpoint = entries[0].endpoint
            creds = credentials.for_entry(cfg, entries[0])
        address = endpoint.url
        details["scheme"] = endpoint.scheme
    except (OSError, ValueError) as exc:
        msg = f"{type(exc).__name__}: {exc.filename}" if isinstance(exc, OSError) and exc.filename else str(exc)
        return [TargetStatus(TARGET, address, False, REASON_CREDENTIALS_UNREADABLE, msg[:300], time.monotonic() - start, details)]
    host, port = cfg.check_target()
    try:
        dialing.connect(endpoint, creds, host, port, deadline).close()
    except Exception as exc:  # never raises: a failure is a verdict
        return [TargetStatus(TARGET, address, False, reason(exc), _message(exc), time.monotonic() - start, details)]
    return [TargetStatus(TARGET, address, True, base.REASON_REACHABLE, "", time.monotonic() - start, details)]


def _message(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "no complete answer before the deadline"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)[:300]
