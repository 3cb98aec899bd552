"""A /metrics endpoint, and the probes on the same port (the controller's:
what it serves is composed in `tasks.controller.controller_startup`).

`/readyz` answers 200 only while Redis answers PING (the gauges read Redis at
scrape time and turn an outage into an empty scrape, so /metrics itself
cannot tell); `/livez` answers while the process serves. HTTP probes rather
than an exec'd `fleet probe`, which would count against the controller's
128Mi memory limit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from fleet.logs import kv
from fleet.metrics import parse_bind

log = logging.getLogger("fleet.metrics")


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_probes(metrics: WSGIApp, ping: Callable[[], object]) -> WSGIApp:
    """`/readyz` (ping succeeds) and `/livez` in front of the metrics app."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/livez":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            try:
                ping()
            except Exception as exc:  # any failure to reach Redis is "not ready"
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [f"broker unreachable: {type(exc).__name__}\n".encode()]
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        return metrics(environ, start_response)

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no access log
        pass


def registry_of(collectors: Iterable[Collector]) -> CollectorRegistry:
    """A registry of its own (nothing is registered globally) holding `collectors`."""
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)
    return registry


def serve_metrics(bind_address: str, registry: CollectorRegistry, ping: Callable[[], object]) -> object | None:
    """Serve `registry` at /metrics and the probes (`/readyz`: `ping` succeeds)
    on `bind_address` in a daemon thread; None when the address is `0`."""
    bind = parse_bind(bind_address)
    if bind is None:
        log.info("metrics endpoint off")
        return None
    app = with_probes(make_wsgi_app(registry), ping)
    try:
        server = make_server(bind[0], bind[1], app, ThreadingWSGIServer, handler_class=_QuietHandler)
    except OSError as exc:  # busy port, unknown host: say which address
        raise OSError(exc.errno, f"cannot serve /metrics on {bind[0]}:{bind[1]}: {exc.strerror or exc}") from exc
    threading.Thread(target=server.serve_forever, name="fleet-metrics", daemon=True).start()
    log.info("serving /metrics", extra=kv(address=f"{bind[0]}:{bind[1]}"))
    return server
