"""A threaded HTTP server on a free loopback port, for the wire-level fakes and the test origins, and a quiet
handler base with the one way they answer."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Quiet(BaseHTTPRequestHandler):
    """A handler with no access log, answering through `reply`."""

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        """`status`, `headers`, a Content-Length and `body`."""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Backlogged(ThreadingHTTPServer):
    """socketserver's backlog of 5 drops the SYNs of a burst (a browser's or a crawler's parallel connections
    through several proxies), each then retried a second or more later: a wait no real origin makes."""

    request_queue_size = 1024


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str = "fake-http", host: str = "127.0.0.1",
                 server: type[ThreadingHTTPServer] = Backlogged) -> None:
        self.httpd = server((host, 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name=name, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
