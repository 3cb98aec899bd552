"""The API's /metrics: what this process answered (counters, every label
value present from the start at 0) and what Redis holds at scrape time
(gauges, shared by every replica: each replica reports the same value).

- `proxy_operator_lease_requests_total{result}`: granted, none_free (409),
  no_proxy (503), bad_request, unauthorized, unavailable (Redis);
- `proxy_operator_reports_total{outcome}`: ok, blocked, error;
- `proxy_operator_leases_active`: open leases (not expired) in Redis;
- `proxy_operator_cooldowns_active{scope}`: target, global.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleet.leases.requests import OUTCOMES
from fleet.metrics import COOLDOWNS_ACTIVE, LEASE_REQUESTS, LEASES_ACTIVE, REPORTS

RESULTS = ("granted", "none_free", "no_proxy", "bad_request", "unauthorized", "unavailable")


class _Gauges(Collector):
    def __init__(self) -> None:
        self.values: tuple[int, int, int] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.values is None:  # Redis did not answer: no gauges rather than wrong ones
            return
        active, target, global_ = self.values
        yield GaugeMetricFamily(LEASES_ACTIVE, "Open (unexpired) leases, read from Redis at scrape time.", value=active)
        g = GaugeMetricFamily(COOLDOWNS_ACTIVE, "Cooldowns in force, by scope, read from Redis at scrape time.",
                              labels=["scope"])
        g.add_metric(["target"], target)
        g.add_metric(["global"], global_)
        yield g


class ApiSeries:
    def __init__(self) -> None:
        self.requests = Counter(LEASE_REQUESTS, "Lease requests answered by this API process, by result.", ["result"],
                                registry=None)
        self.reports = Counter(REPORTS, "Reports accepted by this API process, by outcome.", ["outcome"], registry=None)
        self._requests = {r: self.requests.labels(result=r) for r in RESULTS}
        self._reports = {o: self.reports.labels(outcome=o) for o in OUTCOMES}
        self.gauges = _Gauges()
        self.registry = CollectorRegistry()
        for c in (self.requests, self.reports, self.gauges):
            self.registry.register(c)

    def lease(self, result: str) -> None:
        self._requests[result].inc()

    def report(self, outcome: str) -> None:
        self._reports[outcome].inc()

    def render(self, gauges: tuple[int, int, int] | None) -> bytes:
        self.gauges.values = gauges
        return generate_latest(self.registry)
