"""The prober's own /metrics: every probe observed, per Proxy.

- `proxy_operator_healthcheck_duration_seconds{proxy}` (histogram) and
  `proxy_operator_healthcheck_failures_total{proxy}` (counter, 0 from the
  moment a Proxy is this replica's), label `proxy` = `namespace/name`;
- `proxy_operator_prober_proxies`: the Proxies this replica probes.

A Proxy this replica stops probing (deleted, not Running, or moved to
another replica) loses its series here, so they do not pile up; the replica
that takes it over starts them again (Prometheus' rate() sees a reset).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import Collector

from fleet.serving import HEALTHCHECK_DURATION, HEALTHCHECK_FAILURES, PROBER_PROXIES

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProberSeries:
    def __init__(self) -> None:
        self.duration = Histogram(HEALTHCHECK_DURATION, "Time of each probe through a proxy (good or failed), by Proxy.",
                                  ["proxy"], buckets=BUCKETS, registry=None)
        self.failures = Counter(HEALTHCHECK_FAILURES, "Failed probes through a proxy, by Proxy.", ["proxy"], registry=None)
        self.proxies = Gauge(PROBER_PROXIES, "Proxies this prober replica probes (its share).", registry=None)
        self._children: dict[str, tuple[Histogram, Counter]] = {}

    def collectors(self) -> tuple[Collector, ...]:
        return (self.duration, self.failures, self.proxies)

    def track(self, key: str) -> None:
        if key not in self._children:
            self._children[key] = (self.duration.labels(proxy=key), self.failures.labels(proxy=key))

    def forget(self, key: str) -> None:
        if self._children.pop(key, None) is not None:
            self.duration.remove(key)
            self.failures.remove(key)

    def observe(self, key: str, seconds: float, ok: bool) -> None:
        children = self._children.get(key)
        if children is None:  # no longer ours: its series are gone and stay gone
            return
        children[0].observe(seconds)
        if not ok:
            children[1].inc()

    def set_share(self, n: int) -> None:
        self.proxies.set(n)
