"""The prober's own /metrics: every probe observed, per Proxy.

- `proxy_operator_healthcheck_duration_seconds{proxy}` (histogram) and
  `proxy_operator_healthcheck_failures_total{proxy}` (counter, 0 from the
  moment a Proxy is this replica's), label `proxy` = `namespace/name`;
- `proxy_operator_prober_proxies`: the Proxies this replica probes.

A Proxy this replica stops probing (deleted, not Running, or moved to
another replica) loses its series here, so they do not pile up; the replica
that takes it over starts them again (Prometheus' rate() sees a reset).

The two per-Proxy families are one collector over a plain list per Proxy
(bucket counts, sum, failures, created), rendered at scrape time exactly as
prometheus_client's Histogram and Counter children render
(tests/fleet/prober/test_metrics.py): a labelled child of those is about 33
objects with a lock per value, which at 5,000 Proxies was two thirds of the
prober's heap (each full garbage collection walked it: 70 ms pauses) and
1.9 µs per observation (issue 24). Only the loop thread writes the lists; a
scrape (the metrics thread) reads them and takes `_count` from the buckets
it read, so a scrape never shows a count its buckets disagree with.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import Gauge
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from fleet.serving import HEALTHCHECK_DURATION, HEALTHCHECK_FAILURES, PROBER_PROXIES

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LE = tuple(floatToGoString(b) for b in BUCKETS) + ("+Inf",)  # type: ignore[no-untyped-call, unused-ignore]
_SUM, _FAILURES, _CREATED = len(_LE), len(_LE) + 1, len(_LE) + 2  # a row: bucket counts (not cumulative), then these
_DURATION_HELP = "Time of each probe through a proxy (good or failed), by Proxy."
_FAILURES_HELP = "Failed probes through a proxy, by Proxy."
_FAILURES_FAMILY = HEALTHCHECK_FAILURES.removesuffix("_total")


class _PerProxy(Collector):
    """The duration histogram and the failure counter of every tracked Proxy."""

    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = {}

    def describe(self) -> Iterator[Metric]:
        yield Metric(HEALTHCHECK_DURATION, _DURATION_HELP, "histogram")
        yield Metric(_FAILURES_FAMILY, _FAILURES_HELP, "counter")

    def collect(self) -> Iterator[Metric]:
        created = getattr(_prometheus_metrics, "_use_created", True)  # prometheus_client's switch for _created series
        duration = Metric(HEALTHCHECK_DURATION, _DURATION_HELP, "histogram")
        failures = Metric(_FAILURES_FAMILY, _FAILURES_HELP, "counter")
        for key, row in list(self.rows.items()):
            row = list(row)  # one read of the row: its buckets, count and sum agree
            total = 0.0
            for le, n in zip(_LE, row, strict=False):
                total += n
                duration.add_sample(f"{HEALTHCHECK_DURATION}_bucket", {"proxy": key, "le": le}, total)
            duration.add_sample(f"{HEALTHCHECK_DURATION}_count", {"proxy": key}, total)
            duration.add_sample(f"{HEALTHCHECK_DURATION}_sum", {"proxy": key}, row[_SUM])
            if created:
                duration.add_sample(f"{HEALTHCHECK_DURATION}_created", {"proxy": key}, row[_CREATED])
            failures.add_sample(HEALTHCHECK_FAILURES, {"proxy": key}, row[_FAILURES])
            if created:
                failures.add_sample(f"{_FAILURES_FAMILY}_created", {"proxy": key}, row[_CREATED])
        yield duration
        yield failures


class ProberSeries:
    def __init__(self) -> None:
        self._per_proxy = _PerProxy()
        self.proxies = Gauge(PROBER_PROXIES, "Proxies this prober replica probes (its share).", registry=None)

    def collectors(self) -> tuple[Collector, ...]:
        return (self._per_proxy, self.proxies)

    def track(self, key: str) -> None:
        if key not in self._per_proxy.rows:
            self._per_proxy.rows[key] = [0.0] * _CREATED + [time.time()]

    def forget(self, key: str) -> None:
        self._per_proxy.rows.pop(key, None)

    def observe(self, key: str, seconds: float, ok: bool) -> None:
        row = self._per_proxy.rows.get(key)
        if row is None:  # no longer ours: its series are gone and stay gone
            return
        row[bisect_left(BUCKETS, seconds)] += 1.0  # the first bucket whose bound is >= seconds (le), else +Inf
        row[_SUM] += seconds
        if not ok:
            row[_FAILURES] += 1.0

    def set_share(self, n: int) -> None:
        self.proxies.set(n)
