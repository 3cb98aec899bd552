"""The controller's /metrics endpoint."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, start_http_server

from fleet import heartbeat, status
from fleet.controller import Controller
from fleet.logs import kv
from fleet.metrics import ProviderGauges, ProviderTargetCollector, parse_bind
from fleet.routing import provider_queue
from fleet.store import SEEN_KEY

log = logging.getLogger("fleet.metrics")


def collector_for(ctl: Controller) -> ProviderTargetCollector:
    configured = set(ctl.config.names())

    def results():
        return [r for name, r in ctl.store.all().items() if name in configured]

    def providers():
        now = time.time()
        live = heartbeat.live_workers(ctl.store.r)
        latest = ctl.store.all()
        out = []
        for n in ctl.config.names():
            seen = ctl.store.r.get(SEEN_KEY + n)
            last = latest[n].checked_at if n in latest else None
            overdue = ctl.settings.checks_enabled and status.is_overdue(
                last, float(seen) if seen else None, now, ctl.settings.overdue_after
            )
            q = provider_queue(n)
            out.append(ProviderGauges(n, q, ctl.store.queue_length(q), len(live.get(n, ())), overdue))
        return out

    return ProviderTargetCollector(results, providers, ctl.settings.provider_check_interval)


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
