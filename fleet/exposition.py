"""A provider worker's own /metrics: the provider-call counter and histogram
(`fleet.calls.METRICS`) of this process and its config-reload status
(`fleet.reload.STATUS`), on `--worker-metrics-bind-address`
(off by default).

Provider workers run the threads pool, one process each, so a plain
in-process registry is the whole truth: no prometheus_client multiprocess
mode (files in a shared directory, needed only with a forking pool).
Prometheus scrapes each worker pod, the controller keeps its own /metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, start_http_server

from fleet import reload
from fleet.calls import METRICS, CallMetrics
from fleet.logs import kv
from fleet.settings import parse_bind_address

log = logging.getLogger("fleet.metrics")
FLAG = "--worker-metrics-bind-address"


def registry_for(recorder: CallMetrics) -> CollectorRegistry:
    registry = CollectorRegistry()
    for c in recorder.collectors():
        registry.register(c)
    registry.register(reload.STATUS.collector())  # is this worker's providers file the one in use?
    return registry


def serve(address: str, providers: Iterable[str], recorder: CallMetrics = METRICS) -> object | None:
    """Serve `recorder`'s series (at 0 for `providers`) on `address`; None when off.
    Raises OSError naming the address when it cannot bind."""
    bind = parse_bind_address(address, FLAG)
    if bind is None:
        log.info("worker metrics endpoint off")
        return None
    recorder.start(providers)
    try:
        server, _thread = start_http_server(bind[1], bind[0], registry=registry_for(recorder))
    except OSError as exc:  # busy port, unknown host: say which address
        raise OSError(exc.errno, f"cannot serve /metrics on {bind[0]}:{bind[1]}: {exc.strerror or exc}") from exc
    log.info("serving worker /metrics", extra=kv(address=f"{bind[0]}:{bind[1]}"))
    return server
