"""The provider-health gauges of the controller's /metrics, read from the
store at every scrape: each target's latest verdict, duration and time, and
per provider its queue length, live workers and whether it is overdue; the
configured interval and beat's last round. Metric names are in
`fleet.serving`; the HTTP server is `fleet.serving`.

Scrape-time collectors never drift and never leak series: a provider that
was never checked has no series, and one removed from the config disappears.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet import serving
from fleet.celery import beat, presence
from fleet.celery.routing import provider_queue
from fleet.health import decide
from fleet.health.limits import LIMITS, Limits
from fleet.health.results import CheckResult
from fleet.serving import (
    CHECK_DURATION,
    CHECK_INTERVAL,
    CHECK_OVERDUE,
    CHECK_TIMESTAMP,
    LABELS,
    LAST_ROUND,
    METRICS_TRUNCATED,
    QUEUE_LENGTH,
    TARGET_UP,
    WORKERS,
)

if TYPE_CHECKING:
    from fleet.health.recording import Controller

log = logging.getLogger("fleet.metrics")


@dataclass(frozen=True)
class ProviderGauges:
    """Per configured provider, beyond its targets' verdicts."""

    provider: str
    queue: str
    queue_length: int
    workers: int  # live heartbeats of workers consuming the queue
    overdue: bool

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

    def describe(self) -> list[Metric]:  # static descriptions: no Redis read at registration
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

    def collect(self) -> Iterator[Metric]:
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


def collector_for(ctl: Controller) -> ProviderTargetCollector:
    """Results are read a chunk of keys at a time, and the overdue gauge uses
    the checkedAt of the results already read: one pass over Redis per scrape,
    holding a few results at once."""

    def results() -> Iterable[CheckResult]:
        return ctl.results.iter_latest(ctl.config.names())

    def providers(checked: dict[str, float]) -> list[ProviderGauges]:
        now = time.time()
        live = presence.live_workers(ctl.store)
        out = []
        for n in ctl.config.names():
            q = provider_queue(n)
            overdue = ctl.settings.checks_enabled and decide.is_overdue(
                checked.get(n), ctl.store.marks.seen(n), now, ctl.settings.overdue_after)
            out.append(ProviderGauges(n, q, ctl.store.queue_length(q), len(live.get(n, ())), overdue))
        return out

    return ProviderTargetCollector(results, providers, ctl.settings.provider_check_interval,
                                   read_last_round=lambda: beat.last_round(ctl.store))


def collectors(ctl: Controller) -> list[Collector]:
    """The health feature's part of the controller's /metrics: the store-read gauges and its counters."""
    return [collector_for(ctl), *ctl.counters.collectors()]


def registry_for(ctl: Controller) -> CollectorRegistry:
    return serving.registry_of(collectors(ctl))
