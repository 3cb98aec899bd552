"""A loopback HTTP server that answers one byte at a time.

Every request gets a well-formed 200 (JSON body) sent a byte per
`interval`, status line included, so no single socket read ever waits long:
a client's per-read timeout never trips, only a bound on the whole answer
ends the call. The server notices a client that closed (it watches the
socket between bytes) and drops the connection at once, so its own sockets
and threads track the client's. `open` counts connections not yet closed on the server's side.
"""

from __future__ import annotations

import contextlib
import select
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from fleet.testing.http import LoopbackServer


class DripServer(LoopbackServer):
    def __init__(self, interval: float = 1.0, body: bytes = b'{"items": []}' + b" " * 4096) -> None:
        self.interval = interval
        self.requests = 0
        self.open = 0
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with outer._cond:
                    outer.open += 1
                    outer._cond.notify_all()

            def finish(self) -> None:
                with contextlib.suppress(OSError):
                    super().finish()

            def do_GET(self) -> None:
                with outer._cond:
                    outer.requests += 1
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                self.close_connection = True
                for b in head.encode() + body:
                    readable, _, _ = select.select([self.connection], [], [], outer.interval)
                    if readable:
                        return  # the client closed (or shut down) its end
                    try:
                        self.connection.sendall(bytes([b]))
                    except OSError:
                        return

        super().__init__(Handler, "drip-http")
        close = self.httpd.shutdown_request

        def shutdown_request(request: Any) -> None:  # after the handler: the socket is closed here
            close(request)
            with self._cond:
                self.open -= 1
                self._cond.notify_all()

        self.httpd.shutdown_request = shutdown_request  # type: ignore[method-assign]

    def wait_idle(self, timeout: float) -> bool:
        """True once no connection is being served (the client closed its end)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.open == 0, timeout)
