"""A fault-injecting HTTP proxy in front of moto, speaking EC2's wire:
error answers are EC2's XML (`<Response><Errors><Error><Code>…`), garbage is
XML-shaped garbage, and the wire faults (truncated body, reset, closed,
hang) are those of tests/providers/faults.py. Same interface as
faults.FaultProxy (inject / fired / release), so faults.ProxiedBackend
drives it for the conformance suite."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from contextlib import suppress
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from tests.fakes.http import LoopbackServer
from tests.providers import conformance, faults

# The EC2 code each injected status comes with: what EC2 answers that status with.
CODES = {
    400: "InvalidParameterValue",
    401: "AuthFailure",
    403: "UnauthorizedOperation",
    404: "InvalidInstanceID.NotFound",
    409: "IncorrectState",
    429: "RequestLimitExceeded",
    500: "InternalError",
    503: "Unavailable",
}
# More EC2 answers worth their own fault: (status, code).
CODED = {
    "throttled": (503, "RequestLimitExceeded"),
    "instance-limit": (400, "InstanceLimitExceeded"),
    "vcpu-limit": (400, "VcpuLimitExceeded"),
    "no-capacity": (500, "InsufficientInstanceCapacity"),
}
MALFORMED_XML = "malformed-xml"
WRONG_SHAPE_XML = "wrong-shape-xml"
# What the conformance suite injects at every request (CODED is for the wire classification test).
FAULTS = (tuple(f"http-{s}" for s in CODES) + ("throttled", MALFORMED_XML, WRONG_SHAPE_XML)
          + (faults.TRUNCATED, faults.RESET, faults.CLOSED, faults.HANG))
MALFORMED_BODY = b'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse><reservationSet><item><instan'
# Well-formed XML in none of the shapes asked for: every element a caller reads is missing or garbage.
WRONG_SHAPE_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><requestId>x</requestId>'
                    b'<reservationSet>garbage</reservationSet><securityGroupInfo>garbage</securityGroupInfo>'
                    b'<instancesSet><item><state>7</state></item></instancesSet><accountAttributeSet>7</accountAttributeSet>'
                    b'</Response>')
STATE_FAULTS = {
    conformance.MALFORMED: MALFORMED_XML,
    conformance.SERVER_ERROR: "http-500",
    conformance.DROPPED: faults.CLOSED,
    conformance.HANGS: faults.HANG,
}


def error_xml(code: str, message: str = "injected by the test") -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>fault-0</RequestID></Response>").encode()


class Ec2FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._nth = -1
        self._seen = 0
        self._fired = 0
        self._release = threading.Event()
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
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

            do_GET = do_POST

            def _forward(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=faults.HANG_LIMIT)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self._answer(resp.status, data, ctype=resp.getheader("Content-Type") or "text/xml")

            def _answer(self, status: int, data: bytes, length: int | None = None, ctype: str = "text/xml") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, fault: str) -> None:
                status = faults.status_of(fault)
                if status is not None:
                    self._answer(status, error_xml(CODES[status]))
                elif fault in CODED:
                    status, code = CODED[fault]
                    self._answer(status, error_xml(code))
                elif fault == MALFORMED_XML:
                    self._answer(200, MALFORMED_BODY)
                elif fault == WRONG_SHAPE_XML:
                    self._answer(200, WRONG_SHAPE_BODY)
                elif fault == faults.TRUNCATED:
                    self._answer(200, MALFORMED_BODY, length=4096)
                    self._drop()
                elif fault == faults.RESET:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self._drop(shutdown=False)
                elif fault == faults.CLOSED:
                    self._drop()
                elif fault == faults.HANG:
                    proxy._release.wait(faults.HANG_LIMIT)
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

        self.server = LoopbackServer(Handler, "ec2-fault-proxy")
        self.url = self.server.url

    def inject(self, fault: str | None, nth: int = -1) -> None:
        with self._lock:
            self._fault, self._nth, self._seen, self._fired = fault, nth, 0, 0

    def fired(self) -> int:
        with self._lock:
            return self._fired

    def release(self) -> None:
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

    def __enter__(self) -> Ec2FaultProxy:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self.server.__exit__(*exc)
