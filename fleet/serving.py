"""The controller's /metrics endpoint, and its probes on the same port.

`/readyz` answers 200 only while Redis answers PING (the gauges read Redis at
scrape time and turn an outage into an empty scrape, so /metrics itself
cannot tell); `/livez` answers while the process serves. HTTP probes rather
than an exec'd `fleet probe`, which would count against the controller's
128Mi memory limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from fleet import beatstate, heartbeat
from fleet.health import status
from fleet.health.recording import Controller
from fleet.logs import kv
from fleet.metrics import ProviderGauges, ProviderTargetCollector, parse_bind
from fleet.routing import provider_queue

log = logging.getLogger("fleet.metrics")


def collector_for(ctl: Controller) -> ProviderTargetCollector:
    """Results are read a chunk of keys at a time, and the overdue gauge uses
    the checkedAt of the results already read: one pass over Redis per scrape,
    holding a few results at once."""

    def results():
        return ctl.store.iter_latest(ctl.config.names())

    def providers(checked: dict[str, float]):
        now = time.time()
        live = heartbeat.live_workers(ctl.store.r)
        out = []
        for n in ctl.config.names():
            q = provider_queue(n)
            overdue = ctl.settings.checks_enabled and status.is_overdue(
                checked.get(n), ctl.store.seen(n), now, ctl.settings.overdue_after)
            out.append(ProviderGauges(n, q, ctl.store.queue_length(q), len(live.get(n, ())), overdue))
        return out

    return ProviderTargetCollector(results, providers, ctl.settings.provider_check_interval,
                                   read_last_round=lambda: beatstate.last_round(ctl.store.r))


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


def registry_for(ctl: Controller) -> CollectorRegistry:
    """What the controller's /metrics serves: the Redis-read gauges and its counters."""
    registry = CollectorRegistry()
    registry.register(collector_for(ctl))
    for c in ctl.counters.collectors():
        registry.register(c)
    return registry


def serve_metrics(ctl: Controller) -> object | None:
    bind = parse_bind(ctl.settings.metrics_bind_address)
    if bind is None:
        log.info("metrics endpoint off")
        return None
    app = with_probes(make_wsgi_app(registry_for(ctl)), ctl.store.r.ping)
    try:
        server = make_server(bind[0], bind[1], app, ThreadingWSGIServer, handler_class=_QuietHandler)
    except OSError as exc:  # busy port, unknown host: say which address
        raise OSError(exc.errno, f"cannot serve /metrics on {bind[0]}:{bind[1]}: {exc.strerror or exc}") from exc
    threading.Thread(target=server.serve_forever, name="fleet-metrics", daemon=True).start()
    log.info("serving /metrics", extra=kv(address=f"{bind[0]}:{bind[1]}"))
    return server
