"""The proxies feature's part of the controller's /metrics, read from Redis
at scrape time (never a gauge kept up to date by the reconciler, which would
drift and leak series). Every series is present (0 when nothing counts):

- `proxy_operator_proxies{phase}`: Proxies by status.phase;
- `proxy_operator_proxies_oldest_in_phase_seconds{phase}`: how long the
  longest-waiting Proxy has been in that phase (stuck in Provisioning or
  Deleting);
- `proxy_operator_proxies_unhealthy`: Running Proxies whose prober verdict
  is unhealthy;
- `proxy_operator_proxies_egress_shared` / `_egress_mismatch`: Running
  Proxies whose egress IP another Running Proxy also has / that differs from
  the IP their instance reported (only where the probe target echoes it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet.proxies.model import PHASES, RUNNING
from fleet.proxies.reconciler import phase_since
from fleet.serving import PROXIES, PROXIES_EGRESS_MISMATCH, PROXIES_EGRESS_SHARED, PROXIES_OLDEST_IN_PHASE, PROXIES_UNHEALTHY

Raws = Callable[[], Mapping[str, bytes | str]]


class ProxiesCollector(Collector):
    def __init__(self, phases: Raws, verdicts: Raws = dict, clock: Callable[[], float] = time.time) -> None:
        self._phases, self._verdicts, self._clock = phases, verdicts, clock

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        states = {k: s for k, raw in self._phases().items() if (s := phase_since(raw)) is not None}
        counts = Counter(phase for phase, _ in states.values())
        oldest: dict[str, float] = {}
        for phase, since in states.values():
            if since:
                oldest[phase] = max(oldest.get(phase, 0.0), now - since)
        g = GaugeMetricFamily(PROXIES, "Proxies by status.phase (those without a phase yet are not counted).", labels=["phase"])
        o = GaugeMetricFamily(PROXIES_OLDEST_IN_PHASE, "Seconds the longest-waiting Proxy has been in each phase (0: none).",
                              labels=["phase"])
        for phase in PHASES:
            g.add_metric([phase], counts.get(phase, 0))
            o.add_metric([phase], round(oldest.get(phase, 0.0), 3))
        yield g
        yield o
        running = {k for k, (phase, _) in states.items() if phase == RUNNING}
        verdicts = [v for k, raw in self._verdicts().items() if k in running and (v := _doc(raw)) is not None]
        egress = Counter(v["egressIP"] for v in verdicts if isinstance(v.get("egressIP"), str) and v["egressIP"])
        yield _gauge(PROXIES_UNHEALTHY, "Running Proxies whose last probe verdict is unhealthy.",
                     sum(1 for v in verdicts if v.get("healthy") is False))
        yield _gauge(PROXIES_EGRESS_SHARED, "Running Proxies whose egress IP another Running Proxy also has.",
                     sum(n for n in egress.values() if n > 1))
        yield _gauge(PROXIES_EGRESS_MISMATCH, "Running Proxies whose egress IP differs from the IP their instance reported.",
                     sum(1 for v in verdicts if v.get("egressMismatch") is True))


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


def _doc(raw: bytes | str) -> dict[str, object] | None:
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
