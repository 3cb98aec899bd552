"""Serving /metrics: the metric and label names, the controller's event
counters, and the one /metrics endpoint every process serves (the
controller, each provider worker, the prober), with the probes on the same
port where the process has a store to ping.

Metric and label names live here only (the docs' metrics page,
docs/reference/metrics.md, is generated from the registries and pinned to
them by a test). Counters count what this process did (Prometheus' rate()
handles the reset at a restart); their label values are fixed sets, each
series present from the start at 0. The gauges that read the store at every
scrape are each feature's (`fleet.health.metrics`, `fleet.proxies.metrics`,
`fleet.gc.metrics`); what a process serves is composed where it starts
(`tasks.controller.controller_startup`, `fleet.celery.calls.serve_worker`,
`fleet.prober.process`).

`/readyz` answers 200 only while Redis answers PING (the gauges read Redis at
scrape time and turn an outage into an empty scrape, so /metrics itself
cannot tell); `/livez` answers while the process serves. HTTP probes rather
than an exec'd `fleet probe`, which would count against the controller's
128Mi memory limit. A process without a store to ping (a provider worker)
serves /metrics alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from fleet.logs import kv
from fleet.settings import parse_bind_address

TARGET_UP = "proxy_operator_provider_target_up"
CHECK_DURATION = "proxy_operator_provider_check_duration_seconds"
CHECK_TIMESTAMP = "proxy_operator_provider_check_timestamp_seconds"
QUEUE_LENGTH = "proxy_operator_provider_queue_length"
WORKERS = "proxy_operator_provider_workers"
CHECK_OVERDUE = "proxy_operator_provider_check_overdue"
CHECK_INTERVAL = "proxy_operator_provider_check_interval_seconds"
LABELS = ["provider", "target"]
FOREIGN_SKIPPED = "proxy_operator_foreign_objects_skipped_total"
RESULTS_DROPPED = "proxy_operator_results_dropped_total"
METRICS_TRUNCATED = "proxy_operator_metrics_truncated"
LAST_ROUND = "proxy_operator_last_round_timestamp_seconds"  # beat's stamp (fleet.celery.beat), exported by the controller
# Provider calls (fleet.celery.calls), counted by the provider worker that made them and served on its own /metrics.
REQUESTS_TOTAL = "proxy_operator_provider_requests_total"  # {provider,op,result}, the seed's name
REQUEST_DURATION = "proxy_operator_provider_request_duration_seconds"  # {provider,op}
PROXIES = "proxy_operator_proxies"  # {phase}: Proxies by status.phase, read from Redis at scrape time
# Seconds the longest-waiting Proxy has been in a phase ({phase}; 0 when none is): "stuck in Provisioning/Deleting".
PROXIES_OLDEST_IN_PHASE = "proxy_operator_proxies_oldest_in_phase_seconds"
PROXIES_UNHEALTHY = "proxy_operator_proxies_unhealthy"  # Running Proxies whose last probe verdict is unhealthy
PROXIES_EGRESS_SHARED = "proxy_operator_proxies_egress_shared"  # Proxies whose egress IP another Proxy also has
PROXIES_EGRESS_MISMATCH = "proxy_operator_proxies_egress_mismatch"  # egress IP ≠ the IP their instance reported
# Reloading the providers file (fleet.reload), on the controller's /metrics and each provider worker's.
CONFIG_RELOAD_SUCCESSFUL = "proxy_operator_config_last_reload_successful"  # 1: the file on disk is in use; 0: refused
CONFIG_RELOAD_SUCCESS_TIMESTAMP = "proxy_operator_config_last_reload_success_timestamp_seconds"  # start or last reload
CONFIG_RELOAD_FAILURES = "proxy_operator_config_reload_failures_total"  # versions of the file refused
# Orphan GC (fleet.gc), on the controller.
GC_DELETED = "proxy_operator_gc_deleted_total"  # {provider}
GC_SKIPPED = "proxy_operator_gc_skipped_total"  # {provider,reason}; provider "*" when the whole sweep is skipped
GC_LAST_SUCCESS = "proxy_operator_gc_last_success_timestamp_seconds"  # {provider}, read from Redis at scrape time
# The prober (fleet.prober), on its own /metrics.
HEALTHCHECK_DURATION = "proxy_operator_healthcheck_duration_seconds"  # {proxy}: every probe (the seed's name)
HEALTHCHECK_FAILURES = "proxy_operator_healthcheck_failures_total"  # {proxy}: every failed probe (the seed's name)
PROBER_PROXIES = "proxy_operator_prober_proxies"  # proxies this prober replica probes (its share)
# The discovery and lease API (fleet.leases), on its own /metrics.
LEASES_ACTIVE = "proxy_operator_leases_active"  # read from Redis at scrape time (the seed's name)
LEASE_REQUESTS = "proxy_operator_lease_requests_total"  # {result}: granted, none_free, bad_request, unauthorized, …
HTTP_CONNECTIONS = "proxy_operator_http_connections"  # open connections of this API process (fleet.httpguard)
HTTP_CONNECTIONS_CLOSED = "proxy_operator_http_connections_closed_total"  # {reason}: idle, header_timeout, … (fleet.httpguard)
COOLDOWNS_ACTIVE = "proxy_operator_cooldowns_active"  # {scope}: target, global; read from Redis at scrape time
REPORTS = "proxy_operator_reports_total"  # {outcome}: ok, blocked, error
LEASE_RENEWALS = "proxy_operator_lease_renewals_total"  # {result}: renewed, recreated, revoked, unknown, lost, …
LEASE_UNREPLICATED = "proxy_operator_lease_unreplicated_total"  # grants/renewals answered before a replica had them
LEASE_RECOVERING = "proxy_operator_lease_recovering"  # 1 while this API process grants nothing after a data loss
GATEWAY_REQUESTS = "proxy_operator_gateway_requests_total"  # {client, kind, outcome, protocol} of this gateway process
GATEWAY_RETRIES = "proxy_operator_gateway_upstream_retries_total"  # {reason}: refused, timeout, connect_error, …
GATEWAY_BYTES = "proxy_operator_gateway_bytes_total"  # {direction}: up, down
GATEWAY_TUNNELS_OPEN = "proxy_operator_gateway_tunnels_open"  # {protocol}: http, socks5
GATEWAY_TUNNEL_DURATION = "proxy_operator_gateway_tunnel_duration_seconds"  # histogram of closed tunnels
GATEWAY_SESSIONS_ACTIVE = "proxy_operator_gateway_sessions_active"  # sessions with a life in Redis (every replica's)
GATEWAY_SESSIONS_RETIRED = "proxy_operator_gateway_sessions_retired_total"  # {reason}: uses, age, errors, ban
# ProxyPools (fleet.pools.metrics), on the controller replica that runs the pool loop: the last pass's figures.
# Labelled `pool_namespace`, not `namespace`: a scrape's own `namespace` label (fleet's) would rename it.
POOL_REPLICAS = "proxy_operator_pool_replicas"  # {pool_namespace,pool,state}: desired, ready, available, updated
POOL_MAX_UNAVAILABLE = "proxy_operator_pool_max_unavailable"  # {pool_namespace,pool}: strategy.maxUnavailable resolved
POOL_AUTOSCALE_MAX = "proxy_operator_pool_autoscale_max_replicas"  # {pool_namespace,pool}: autoscaling pools only
POOL_REMEDIATION_BLOCKED = "proxy_operator_pool_remediation_blocked"  # {pool_namespace,pool}: 1 above maxUnhealthy
POOL_REPLACEMENTS = "proxy_operator_pool_replacements_total"  # {pool_namespace,pool,reason}: rotation, template, remediation

# Why a check result was dropped before it was stored or written (the
# `reason` label); `fleet.health.messages` decides the last three.
DROP_UNCONFIGURED = "unconfigured"  # its provider is not in this controller's config
DROP_CHECKS_OFF = "checks_off"  # configured, but --provider-check-interval=0
DROP_INVALID = "invalid"  # wrong types, NaN/infinite numbers, absurd names, a checkedAt before 2020
DROP_FUTURE = "future"  # checkedAt later than the controller's clock plus the skew allowance
DROP_TOO_LARGE = "too_large"  # message bytes, targets or details over fleet.health.limits
DROP_REASONS = (DROP_UNCONFIGURED, DROP_CHECKS_OFF, DROP_INVALID, DROP_FUTURE, DROP_TOO_LARGE)



class ControllerCounters:
    """Events of one controller process; `collectors()` go into its /metrics
    registry (nothing is registered globally, so tests build as many as they like)."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self.kinds = tuple(kinds)
        self.foreign_skipped = Counter(
            FOREIGN_SKIPPED,
            "Writes skipped because the object of that name lacks this installation's labels "
            "(unlabelled, or another installation's).",
            ["kind"], registry=None,
        )
        self.results_dropped = Counter(
            RESULTS_DROPPED, "Check results the controller dropped without storing or writing them, by reason.",
            ["reason"], registry=None,
        )
        for kind in self.kinds:
            self.foreign_skipped.labels(kind=kind)
        for reason in DROP_REASONS:
            self.results_dropped.labels(reason=reason)

    def skipped_foreign(self, kind: str) -> None:
        if kind not in self.kinds:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(self.kinds)})")
        self.foreign_skipped.labels(kind=kind).inc()

    def dropped(self, reason: str) -> None:
        if reason not in DROP_REASONS:
            raise ValueError(f"unknown drop reason {reason!r} (known: {', '.join(DROP_REASONS)})")
        self.results_dropped.labels(reason=reason).inc()

    def collectors(self) -> tuple[Collector, ...]:
        return (self.foreign_skipped, self.results_dropped)



log = logging.getLogger("fleet.metrics")


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_probes(metrics: WSGIApp, ping: Callable[[], object] | None) -> WSGIApp:
    """`/readyz` (ping succeeds) and `/livez` in front of the metrics app;
    the metrics app alone without `ping`."""
    if ping is None:
        return metrics

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


def serve_metrics(bind_address: str, registry: CollectorRegistry, ping: Callable[[], object] | None,
                  flag: str = "--metrics-bind-address", who: str = "") -> object | None:
    """Serve `registry` at /metrics, and the probes when there is a `ping`
    (`/readyz`: `ping` succeeds), on `bind_address` in a daemon thread; None
    when the address is `0`. `who` names the process in the log ("worker ").
    Raises SettingsError naming `flag` for a bad
    address, OSError naming the address when it cannot bind."""
    bind = parse_bind_address(bind_address, flag)
    if bind is None:
        log.info(f"{who}metrics endpoint off")
        return None
    app = with_probes(make_wsgi_app(registry), ping)
    try:
        server = make_server(bind[0], bind[1], app, ThreadingWSGIServer, handler_class=_QuietHandler)
    except OSError as exc:  # busy port, unknown host: say which address
        raise OSError(exc.errno, f"cannot serve /metrics on {bind[0]}:{bind[1]}: {exc.strerror or exc}") from exc
    threading.Thread(target=server.serve_forever, name="fleet-metrics", daemon=True).start()
    log.info(f"serving {who}/metrics", extra=kv(address=f"{bind[0]}:{bind[1]}"))
    return server
