"""The ProxyPools' part of the controller's /metrics: the figures of the
pool loop's last pass and the replacements it made, served by the controller
replica that runs the loop (the one holding `fleet:pool:lock`; the others
serve the families without samples, so `max by (pool_namespace, pool)` in a
rule sees one value per pool):

- `proxy_operator_pool_replicas{pool_namespace,pool,state}`: `desired`
  (spec.replicas, or what the autoscaler just chose), `ready`, `available`
  (Ready for minReadySeconds), `updated` (current template, within maxAge);
- `proxy_operator_pool_max_unavailable{pool_namespace,pool}`: its
  strategy.maxUnavailable resolved against desired by the decision's own
  rounding (so `PoolUnavailable` needs no percent arithmetic in PromQL);
- `proxy_operator_pool_autoscale_max_replicas{pool_namespace,pool}`:
  autoscale.max, for autoscaling pools only (`PoolAtMaxScale`);
- `proxy_operator_pool_remediation_blocked{pool_namespace,pool}`: 1 while
  more members are unhealthy than maxUnhealthy allows, so none is replaced
  (RemediationAllowed=False; `PoolRemediationBlocked`);
- `proxy_operator_pool_replacements_total{pool_namespace,pool,reason}`:
  members deleted to be replaced, by why (`REPLACEMENTS`): `rotation`
  (past maxAge + jitter), `template` (its template changed or its provider
  left the list), `remediation` (unhealthy), `egress` (an egress address
  an earlier member has: uniqueEgressIP). One family with a reason rather
  than one per kind: they are the same act, and their sum is the pool's
  churn, what an outage makes spike (`sum without (reason)`). Scale-downs
  replace nothing and are not counted here.

Figures rather than gauges read from the API server at scrape time: they
are the decision's own (the autoscaled desired, maxUnavailable rounded as
the decision rounds it), at no extra API read per scrape and replica; the
pool's status in the API server is no fresher (the same pass writes it).
A pass replaces the figures of every pool it saw (a pool gone loses its
series, counters included); a replica that loses the lock forgets them all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet.pools.decide import REPLACEMENTS
from fleet.serving import POOL_AUTOSCALE_MAX, POOL_MAX_UNAVAILABLE, POOL_REMEDIATION_BLOCKED, POOL_REPLACEMENTS, POOL_REPLICAS

STATES = ("desired", "ready", "available", "updated")
LABELS = ["pool_namespace", "pool"]


@dataclass(frozen=True)
class Figures:
    """One pool after one pass."""

    desired: int
    ready: int
    available: int
    updated: int
    max_unavailable: int
    remediation_blocked: bool
    autoscale_max: int | None = None


class PoolSeries(Collector):
    """Written by the pool loop (`fleet.pools.cluster.PoolController`), read by scrapes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[tuple[str, str], Figures] = {}
        self._replaced: dict[tuple[str, str], dict[str, int]] = {}

    def observe(self, namespace: str, pool: str, figures: Figures) -> None:
        with self._lock:
            self._figures[(namespace, pool)] = figures
            self._replaced.setdefault((namespace, pool), dict.fromkeys(REPLACEMENTS, 0))

    def replaced(self, namespace: str, pool: str, reason: str) -> None:
        if reason not in REPLACEMENTS:
            return  # a scale-down or an orphan: not a replacement
        with self._lock:
            counts = self._replaced.setdefault((namespace, pool), dict.fromkeys(REPLACEMENTS, 0))
            counts[reason] += 1

    def retain(self, pools: Iterable[tuple[str, str]]) -> None:
        """Keep only these pools' series (after a pass: the pools it saw)."""
        keep = set(pools)
        with self._lock:
            for d in (self._figures, self._replaced):
                for k in [k for k in d if k not in keep]:
                    del d[k]

    def forget(self) -> None:
        """This replica no longer runs the loop: no series of its own."""
        with self._lock:
            self._figures.clear()
            self._replaced.clear()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            figures = dict(self._figures)
            replaced = {k: dict(v) for k, v in self._replaced.items()}
        r = GaugeMetricFamily(POOL_REPLICAS, "ProxyPool members by state (desired: spec.replicas or the autoscaler's choice; "
                                             "available: Ready for minReadySeconds; updated: current template, within maxAge).",
                              labels=[*LABELS, "state"])
        u = GaugeMetricFamily(POOL_MAX_UNAVAILABLE, "The pool's strategy.maxUnavailable, resolved against desired.", labels=LABELS)
        a = GaugeMetricFamily(POOL_AUTOSCALE_MAX, "The pool's autoscale.max (autoscaling pools only).", labels=LABELS)
        b = GaugeMetricFamily(POOL_REMEDIATION_BLOCKED, "1 while more members are unhealthy than maxUnhealthy allows: "
                                                        "none is replaced.", labels=LABELS)
        for (ns, name), f in sorted(figures.items()):
            for state in STATES:
                r.add_metric([ns, name, state], getattr(f, state))
            u.add_metric([ns, name], f.max_unavailable)
            if f.autoscale_max is not None:
                a.add_metric([ns, name], f.autoscale_max)
            b.add_metric([ns, name], 1 if f.remediation_blocked else 0)
        c = CounterMetricFamily(POOL_REPLACEMENTS, "Pool members deleted to be replaced, by reason: rotation (past maxAge), "
                                                   "template (changed), remediation (unhealthy), egress (a shared egress address).",
                                labels=[*LABELS, "reason"])
        for (ns, name), counts in sorted(replaced.items()):
            for reason in REPLACEMENTS:
                c.add_metric([ns, name, reason], counts[reason])
        yield from (r, u, a, b, c)
