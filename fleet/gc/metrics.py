"""GC's part of the controller's /metrics.

- `proxy_operator_gc_deleted_total{provider}`: instances GC deleted, counted
  when the provider answers the delete with success (not when it is sent);
- `proxy_operator_gc_skipped_total{provider,reason}`: a provider left out of
  a sweep, by reason (`SKIP_REASONS`); provider `*` when the whole sweep was
  skipped (`SWEEP_REASONS`);
- `proxy_operator_gc_last_success_timestamp_seconds{provider}`: when a
  provider's last complete sweep decided (its list answered, its deletes
  sent), read from Redis at scrape time, so every replica reports the same.

The counters are events of one controller process, unregistered (as
`fleet.serving.ControllerCounters`): `collectors()` go into its registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet.serving import GC_DELETED, GC_LAST_SUCCESS, GC_SKIPPED
from fleet.store import StoreError

ALL = "*"  # the provider label of a skip of the whole sweep

# A provider skipped for one sweep:
LIST_FAILED = "list-failed"  # its list answered ok=false
NO_ANSWER = "no-answer"  # no answer within the call timeout (+ grace)
NO_WORKER = "no-worker"  # no live worker consumes its queue: nothing sent
INVALID_ANSWER = "invalid-answer"  # an answer that failed validation (fleet.gc.answers)
LIVE_UNAVAILABLE = "live-uids-unavailable"  # the live Proxy UIDs could not be read when its answer came
DELETE_FAILED = "delete-failed"  # one of its deletes failed (the next sweep tries again)
SKIP_REASONS = (LIST_FAILED, NO_ANSWER, NO_WORKER, INVALID_ANSWER, LIVE_UNAVAILABLE, DELETE_FAILED)
# The whole sweep skipped (provider "*"):
NO_SOURCE = "no-proxies-source"  # neither --proxies nor a cluster: no UID can be vouched for
IN_PROGRESS = "in-progress"  # the previous sweep is still waiting for answers
STORE_ERROR = "store-error"  # Redis did not answer
SWEEP_REASONS = (NO_SOURCE, LIVE_UNAVAILABLE, IN_PROGRESS, STORE_ERROR, INVALID_ANSWER)


class GcCounters:
    def __init__(self, providers: Iterable[str]) -> None:
        self.providers: tuple[str, ...] = ()
        self.deleted = Counter(GC_DELETED, "Orphan instances GC deleted (the provider answered the delete), by provider.",
                               ["provider"], registry=None)
        self.skipped = Counter(GC_SKIPPED, "Providers left out of a GC sweep, by reason; provider \"*\": the whole sweep.",
                               ["provider", "reason"], registry=None)
        self.reconfigure(providers)
        for reason in SWEEP_REASONS:
            self.skipped.labels(provider=ALL, reason=reason)

    def reconfigure(self, providers: Iterable[str]) -> None:
        """Count for these providers from now on, each new one's series at 0
        (a removed one's series stay: counters of this process)."""
        self.providers = tuple(providers)
        for p in self.providers:
            self.deleted.labels(provider=p)
            for reason in SKIP_REASONS:
                self.skipped.labels(provider=p, reason=reason)

    def skip(self, provider: str, reason: str) -> None:
        known = SWEEP_REASONS if provider == ALL else SKIP_REASONS
        if reason not in known:
            raise ValueError(f"unknown GC skip reason {reason!r} (known: {', '.join(known)})")
        if provider != ALL and provider not in self.providers:
            return  # not a configured provider: no series for it (label values are a fixed set)
        self.skipped.labels(provider=provider, reason=reason).inc()

    def delete(self, provider: str) -> None:
        if provider in self.providers:
            self.deleted.labels(provider=provider).inc()

    def collectors(self) -> tuple[Collector, ...]:
        return (self.deleted, self.skipped)


class LastSuccessCollector(Collector):
    """`proxy_operator_gc_last_success_timestamp_seconds{provider}` for the
    configured providers that have completed a sweep (none before the first)."""

    def __init__(self, providers: Iterable[str] | Callable[[], Iterable[str]],
                 read: Callable[[], Mapping[str, bytes | str]]) -> None:
        # a callable: the providers configured at each scrape (a reload changes them)
        fixed = () if callable(providers) else tuple(providers)
        self._providers: Callable[[], Iterable[str]] = providers if callable(providers) else (lambda: fixed)
        self._read = read

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(GC_LAST_SUCCESS, "Unix time of the provider's last complete GC sweep.", labels=["provider"])
        try:
            stored = self._read()
        except StoreError:  # Redis down: no samples rather than a failed scrape
            stored = {}
        for p in self._providers():
            raw = stored.get(p)
            try:
                value = float(raw) if raw is not None else math.nan
            except ValueError:
                value = math.nan
            if math.isfinite(value):
                g.add_metric([p], value)
        yield g
