"""Prometheus gauges, read from Redis at every scrape, and the controller's
event counters.

Scrape-time collectors never drift and never leak series: a provider that
was never checked has no series, and one removed from the config disappears.
Counters count what this controller process did (Prometheus' rate() handles
the reset at a restart); their label values are fixed sets, each series
present from the start at 0. Metric and label names live here only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleet.health.limits import LIMITS, Limits
from fleet.health.results import CheckResult

TARGET_UP = "proxy_operator_provider_target_up"
CHECK_DURATION = "proxy_operator_provider_check_duration_seconds"
CHECK_TIMESTAMP = "proxy_operator_provider_check_timestamp_seconds"
QUEUE_LENGTH = "proxy_operator_provider_queue_length"
WORKERS = "proxy_operator_provider_workers"
CHECK_OVERDUE = "proxy_operator_provider_check_overdue"
# Provider calls (fleet.calls), counted by the provider worker that made them and served on its own /metrics.
REQUESTS_TOTAL = "proxy_operator_provider_requests_total"  # {provider,op,result}, the seed's name
REQUEST_DURATION = "proxy_operator_provider_request_duration_seconds"  # {provider,op}
CHECK_INTERVAL = "proxy_operator_provider_check_interval_seconds"
LABELS = ["provider", "target"]
FOREIGN_SKIPPED = "proxy_operator_foreign_objects_skipped_total"
RESULTS_DROPPED = "proxy_operator_results_dropped_total"
METRICS_TRUNCATED = "proxy_operator_metrics_truncated"
LAST_ROUND = "proxy_operator_last_round_timestamp_seconds"  # beat's stamp (fleet.beatstate), exported by the controller

# Why a check result was dropped before it was stored or written (the
# `reason` label); `fleet.messages` decides the last three.
DROP_UNCONFIGURED = "unconfigured"  # its provider is not in this controller's config
DROP_CHECKS_OFF = "checks_off"  # configured, but --provider-check-interval=0
DROP_INVALID = "invalid"  # wrong types, NaN/infinite numbers, absurd names, a checkedAt before 2020
DROP_FUTURE = "future"  # checkedAt later than the controller's clock plus the skew allowance
DROP_TOO_LARGE = "too_large"  # message bytes, targets or details over fleet.limits
DROP_REASONS = (DROP_UNCONFIGURED, DROP_CHECKS_OFF, DROP_INVALID, DROP_FUTURE, DROP_TOO_LARGE)


@dataclass(frozen=True)
class ProviderGauges:
    """Per configured provider, beyond its targets' verdicts."""

    provider: str
    queue: str
    queue_length: int
    workers: int  # live heartbeats of workers consuming the queue
    overdue: bool

log = logging.getLogger("fleet.metrics")


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


class ProviderTargetCollector(Collector):
    """The seed's three gauges plus the length of each provider's queue.

    Bounded (issue 9): at most `limits.max_targets` targets per provider and
    `limits.max_series` in all get series; what is cut is counted in
    `proxy_operator_metrics_truncated`. `read_results` may be a generator
    reading Redis a few results at a time; `read_providers` gets the
    checkedAt of each result read."""

    def __init__(
        self,
        read_results: Callable[[], Iterable[CheckResult]],
        read_providers: Callable[[dict[str, float]], Iterable[ProviderGauges]] = lambda checked: (),
        interval: float | None = None,
        limits: Limits = LIMITS,
        read_last_round: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.read_results = read_results
        self.read_providers = read_providers
        self.interval = interval
        self.limits = limits
        self.read_last_round = read_last_round

    def describe(self):  # static descriptions: no Redis read at registration
        return [
            GaugeMetricFamily(TARGET_UP, "", labels=LABELS),
            GaugeMetricFamily(CHECK_DURATION, "", labels=LABELS),
            GaugeMetricFamily(CHECK_TIMESTAMP, "", labels=LABELS),
            GaugeMetricFamily(QUEUE_LENGTH, "", labels=["provider", "queue"]),
            GaugeMetricFamily(WORKERS, "", labels=["provider"]),
            GaugeMetricFamily(CHECK_OVERDUE, "", labels=["provider"]),
            GaugeMetricFamily(METRICS_TRUNCATED, ""),
            GaugeMetricFamily(CHECK_INTERVAL, ""),
            GaugeMetricFamily(LAST_ROUND, ""),
        ]

    def collect(self):
        up = GaugeMetricFamily(
            TARGET_UP, "Whether the target passed its latest provider health check (1) or not (0).", labels=LABELS
        )
        duration = GaugeMetricFamily(CHECK_DURATION, "Duration of the target's latest provider health check.", labels=LABELS)
        stamp = GaugeMetricFamily(CHECK_TIMESTAMP, "Unix time of the target's latest provider health check.", labels=LABELS)
        queues = GaugeMetricFamily(
            QUEUE_LENGTH, "Messages waiting in the provider's queue (checks not yet taken by a worker).",
            labels=["provider", "queue"],
        )
        workers = GaugeMetricFamily(
            WORKERS, "Workers consuming the provider's queue, by their heartbeats in Redis.", labels=["provider"]
        )
        overdue = GaugeMetricFamily(
            CHECK_OVERDUE, "1 when the provider has had no check result for 2 x interval + timeout (CheckOverdue).",
            labels=["provider"],
        )
        emitted = cut = 0
        try:
            checked: dict[str, float] = {}
            for r in self.read_results():
                checked[r.provider] = r.checked_at
                room = max(0, min(self.limits.max_targets, self.limits.max_series - emitted))
                for t in r.targets[:room]:
                    up.add_metric([r.provider, t.name], 1.0 if t.ready else 0.0)
                    duration.add_metric([r.provider, t.name], t.latency)
                    stamp.add_metric([r.provider, t.name], r.checked_at)
                emitted += min(room, len(r.targets))
                cut += max(0, len(r.targets) - room)
            for g in self.read_providers(checked):
                queues.add_metric([g.provider, g.queue], g.queue_length)
                workers.add_metric([g.provider], g.workers)
                overdue.add_metric([g.provider], 1.0 if g.overdue else 0.0)
        except Exception:  # a Redis outage yields an empty scrape, not a 500
            log.exception("reading results for /metrics")
        yield from (up, duration, stamp, queues, workers, overdue)
        yield GaugeMetricFamily(
            METRICS_TRUNCATED,
            f"Targets left out of this scrape by its bounds ({self.limits.max_targets} per provider, "
            f"{self.limits.max_series} in all); 0 when none.",
            value=cut,
        )
        if self.interval is not None:
            yield GaugeMetricFamily(CHECK_INTERVAL, "The configured --provider-check-interval.", value=self.interval)
        try:
            last_round = self.read_last_round()
        except Exception:  # as above: no sample rather than a 500
            log.exception("reading beat's last round for /metrics")
            last_round = None
        rounds = GaugeMetricFamily(LAST_ROUND, "Unix time of the last check round the active beat sent (no sample: none on record).")
        if last_round is not None:
            rounds.add_metric([], last_round)
        yield rounds


def parse_bind(address: str) -> tuple[str, int] | None:
    """`:8080` → ("0.0.0.0", 8080); `127.0.0.1:9000`; `0` → off."""
    if address in ("0", ""):
        return None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--metrics-bind-address must be host:port, :port or 0, got {address!r}")
    return (host or "0.0.0.0"), int(port)
