"""The proxies feature's part of the controller's /metrics, read from Redis
at scrape time (never a gauge kept up to date by the reconciler, which would
drift and leak series): `proxy_operator_proxies{phase}`, every phase present."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet.metrics import PROXIES
from fleet.proxies.model import PHASES


class ProxiesCollector(Collector):
    def __init__(self, phases: Callable[[], dict[str, str]]) -> None:
        self._phases = phases

    def collect(self) -> Iterator[Metric]:
        counts = Counter(self._phases().values())
        g = GaugeMetricFamily(PROXIES, "Proxies by status.phase (those without a phase yet are not counted).", labels=["phase"])
        for phase in PHASES:
            g.add_metric([phase], counts.get(phase, 0))
        yield g
