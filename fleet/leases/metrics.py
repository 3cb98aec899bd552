"""The API's /metrics: what this process answered (counters, every label
value present from the start at 0) and what Redis holds at scrape time
(gauges, shared by every replica: each replica reports the same value).

- `proxy_operator_lease_requests_total{result}`: granted, none_free (409),
  no_proxy (503), bad_request, unauthorized, unavailable (Redis);
- `proxy_operator_reports_total{outcome}`: ok, blocked, error;
- `proxy_operator_lease_renewals_total{result}`: renewed, recreated (Redis had lost it), revoked,
  unknown (404: released, expired, never granted), lost (409: lost and its proxy full), bad_request,
  unauthorized, unavailable;
- `proxy_operator_lease_unreplicated_total`: grants and renewals answered although no replica had them
  within --lease-replica-wait (a replica was connected but slow);
- `proxy_operator_lease_recovering`: 1 while this process grants nothing after a loss of Redis data;
- `proxy_operator_leases_active`: open leases (not expired) in Redis;
- `proxy_operator_cooldowns_active{scope}`: target, global.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleet.leases.requests import OUTCOMES
from fleet.serving import (
    COOLDOWNS_ACTIVE,
    LEASE_RECOVERING,
    LEASE_RENEWALS,
    LEASE_REQUESTS,
    LEASE_UNREPLICATED,
    LEASES_ACTIVE,
    REPORTS,
)

RESULTS = ("granted", "none_free", "no_proxy", "recovering", "bad_request", "unauthorized", "unavailable")
RENEWALS = ("renewed", "recreated", "revoked", "unknown", "lost", "bad_request", "unauthorized", "unavailable")


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
        self.renewals = Counter(LEASE_RENEWALS, "Renewals answered by this API process, by result.", ["result"],
                                registry=None)
        self._renewals = {r: self.renewals.labels(result=r) for r in RENEWALS}
        self.unreplicated_total = Counter(LEASE_UNREPLICATED, "Grants and renewals this API process answered before "
                                          "a replica had them (WAIT timed out).", registry=None)
        self.recovering_gauge = Gauge(LEASE_RECOVERING, "1 while this API process grants nothing after Redis lost "
                                      "lease data (the grace period).", registry=None)
        self.gauges = _Gauges()
        self.registry = CollectorRegistry()
        for c in (self.requests, self.reports, self.renewals, self.unreplicated_total, self.recovering_gauge, self.gauges):
            self.registry.register(c)

    def lease(self, result: str) -> None:
        self._requests[result].inc()

    def report(self, outcome: str) -> None:
        self._reports[outcome].inc()

    def renewal(self, result: str) -> None:
        self._renewals[result].inc()

    def unreplicated(self) -> None:
        self.unreplicated_total.inc()

    def recovering(self, on: bool) -> None:
        self.recovering_gauge.set(1 if on else 0)

    def render(self, gauges: tuple[int, int, int] | None) -> bytes:
        self.gauges.values = gauges
        return generate_latest(self.registry)
