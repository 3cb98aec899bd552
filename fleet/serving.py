"""The controller's /metrics endpoint."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

from fleet.controller import Controller
from fleet.logs import kv
from fleet.metrics import ProviderTargetCollector, parse_bind
from fleet.routing import provider_queue

log = logging.getLogger("fleet.metrics")


def collector_for(ctl: Controller) -> ProviderTargetCollector:
    configured = set(ctl.config.names())

    def results():
        return [r for name, r in ctl.store.all().items() if name in configured]

    def queues():
        return [(n, provider_queue(n), ctl.store.queue_length(provider_queue(n))) for n in ctl.config.names()]

    return ProviderTargetCollector(results, queues)


def serve_metrics(ctl: Controller) -> object | None:
    bind = parse_bind(ctl.settings.metrics_bind_address)
    if bind is None:
        log.info("metrics endpoint off")
        return None
    registry = CollectorRegistry()
    registry.register(collector_for(ctl))
    server = start_http_server(bind[1], addr=bind[0], registry=registry)
    log.info("serving /metrics", extra=kv(address=f"{bind[0]}:{bind[1]}"))
    return server
