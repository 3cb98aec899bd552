"""A fault-injecting HTTP proxy for the providers' wire-level fakes.

The kubernetes and gcp providers talk to their fake (fleet/testing/kubeapi.py,
tests/providers/gcp/fakecompute.py) through this proxy on 127.0.0.1. It
forwards every request unchanged, except the one chosen by `inject` (the
n-th from now, or every one), which it answers with a fault instead: an HTTP
error status with the backend's own error body, a malformed or wrongly shaped
JSON answer, a truncated body, a reset or silently closed connection, or no
answer at all (a hang, until the client gives up or the test ends). The
conformance suite (conformance.py) drives it; the fakes stay as they are.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from fleet.testing.http import LoopbackServer
from tests.providers import conformance

STATUSES = (400, 401, 403, 404, 409, 429, 500, 503)
MALFORMED = "malformed-json"
WRONG_SHAPE = "wrong-shape"
TRUNCATED = "truncated-body"
RESET = "connection-reset"
CLOSED = "connection-closed"
HANG = "timeout"
WIRE_FAULTS = (MALFORMED, WRONG_SHAPE, TRUNCATED, RESET, CLOSED, HANG)
HTTP_FAULTS: tuple[str, ...] = tuple(f"http-{s}" for s in STATUSES) + WIRE_FAULTS

# Valid JSON a client cannot read as the object it asked for: every field a
# provider reads has the wrong type, and the list's items are not objects.
WRONG_SHAPE_BODY = {
    "kind": 7,
    "metadata": "garbage",
    "status": "garbage",
    "labels": "garbage",
    "networkInterfaces": "garbage",
    "items": ["garbage", {"metadata": {}}],
}
MALFORMED_BODY = b'{"kind": "PodList", "items": [{"metadata": {"na'
HANG_LIMIT = 30.0  # a hung answer is released by then at the latest
# The fault on every request that puts an HTTP backend in each Checker state
# (HEALTHY: none; UNREACHABLE: a URL nothing listens on, closed_port_url).
STATE_FAULTS = {
    conformance.MALFORMED: MALFORMED,
    conformance.SERVER_ERROR: "http-500",
    conformance.DROPPED: CLOSED,
    conformance.HANGS: HANG,
}


def status_of(fault: str) -> int | None:
    """`http-503` → 503; a wire fault → None."""
    return int(fault.removeprefix("http-")) if fault.startswith("http-") else None


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FaultProxy:
    """`with FaultProxy(upstream_url, error_body) as proxy: proxy.url`

    `error_body(status)` is the body the backend answers that status with
    (a JSON value; with `encode`, whatever `encode` turns into bytes). A backend
    that speaks another wire (EC2's XML: tests/providers/aws/ec2faults.py) gives
    its `content_type`, its own `malformed` and `wrong_shape` bodies, and
    `extra` faults of its own: name → (status, body).
    """

    def __init__(self, upstream: str, error_body: Callable[[int], Any], *,
                 encode: Callable[[Any], bytes] = lambda v: json.dumps(v).encode(),
                 content_type: str = "application/json", malformed: bytes = MALFORMED_BODY,
                 wrong_shape: bytes = json.dumps(WRONG_SHAPE_BODY).encode(),
                 extra: dict[str, tuple[int, bytes]] | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.error_body = error_body
        self.encode, self.content_type = encode, content_type
        self.malformed, self.wrong_shape, self.extra = malformed, wrong_shape, dict(extra or {})
        self.requests = 0  # every request seen, faulted or forwarded
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._nth = -1  # -1: every request
        self._seen = 0
        self._fired = 0
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fault = proxy._take()
                try:
                    if fault is None:
                        self._forward(body)
                    else:
                        self._fail(fault)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _forward(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=HANG_LIMIT)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self._answer(resp.status, data, ctype=resp.getheader("Content-Type"))

            def _answer(self, status: int, data: bytes, length: int | None = None, ctype: str | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype or proxy.content_type)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, fault: str) -> None:
                status = status_of(fault)
                if status is not None:
                    self._answer(status, proxy.encode(proxy.error_body(status)))
                elif fault in proxy.extra:
                    self._answer(*proxy.extra[fault])
                elif fault == MALFORMED:
                    self._answer(200, proxy.malformed)
                elif fault == WRONG_SHAPE:
                    self._answer(200, proxy.wrong_shape)
                elif fault == TRUNCATED:
                    self._answer(200, proxy.malformed, length=4096)
                    self._drop()
                elif fault == RESET:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self._drop(shutdown=False)
                elif fault == CLOSED:
                    self._drop()
                elif fault == HANG:
                    proxy._release.wait(HANG_LIMIT)
                    self._drop()
                else:
                    raise ValueError(f"unknown fault {fault!r}")

            def _drop(self, shutdown: bool = True) -> None:
                self.close_connection = True
                self.wfile.flush()
                if shutdown:
                    with suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                self.connection.close()

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _do

        self.server = LoopbackServer(Handler, "fault-proxy")
        self.url = self.server.url

    # -- what the tests call ---------------------------------------------------------

    def inject(self, fault: str | None, nth: int = -1) -> None:
        """Answer the `nth` request from now (0-based; -1: every request)
        with `fault`; None forwards everything again."""
        with self._lock:
            self._fault, self._nth, self._seen, self._fired = fault, nth, 0, 0

    def fired(self) -> int:
        """How many requests got the fault since `inject`."""
        with self._lock:
            return self._fired

    def release(self) -> None:
        """Let every hung answer end (its connection is closed)."""
        self._release.set()
        self._release = threading.Event()

    def _take(self) -> str | None:
        with self._lock:
            self.requests += 1
            index, self._seen = self._seen, self._seen + 1
            if self._fault is None or (self._nth >= 0 and index != self._nth):
                return None
            self._fired += 1
            return self._fault

    def __enter__(self) -> FaultProxy:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self.server.__exit__(*exc)


@dataclass
class ProxiedBackend:
    """conformance.FaultBackend for a provider pointed at a FaultProxy."""

    provider: Any
    proxy: FaultProxy

    def inject(self, fault: str | None, nth: int = -1) -> None:
        self.proxy.inject(fault, nth)

    def fired(self) -> int:
        return self.proxy.fired()

    def release(self) -> None:
        self.proxy.release()
