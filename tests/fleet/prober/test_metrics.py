"""The prober's per-Proxy series (fleet.prober.metrics) render exactly as
prometheus_client's own labelled Histogram and Counter render the same
observations: the reference is the library, not a copy of the code."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from fleet import serving
from fleet.prober.metrics import BUCKETS, ProberSeries
from fleet.serving import HEALTHCHECK_DURATION, HEALTHCHECK_FAILURES, PROBER_PROXIES

CREATED = re.compile(r"^(\S+_created\{[^}]*\}) \S+$", re.M)

# (key, seconds, ok); on every bound, between bounds, below the first, above the last
OBSERVED = [("crawl/a", s, i % 3 != 0) for i, s in enumerate((0.0, 0.001, *BUCKETS, 0.0051, 0.3, 2.49, 10.0001, 99.0))]
OBSERVED += [("crawl/b", 0.3, False), ("crawl/c", 0.02, True)]


def reference() -> tuple[CollectorRegistry, dict[str, tuple[Histogram, Counter]], Gauge]:
    duration = Histogram(HEALTHCHECK_DURATION, "Time of each probe through a proxy (good or failed), by Proxy.", ["proxy"],
                         buckets=BUCKETS, registry=None)
    failures = Counter(HEALTHCHECK_FAILURES, "Failed probes through a proxy, by Proxy.", ["proxy"], registry=None)
    share = Gauge(PROBER_PROXIES, "Proxies this prober replica probes (its share).", registry=None)
    registry = serving.registry_of([duration, failures, share])
    return registry, {"duration": duration, "failures": failures}, share  # type: ignore[return-value]


def without_created_values(text: str) -> str:
    return CREATED.sub(r"\1 T", text)


@pytest.mark.parametrize("render", [generate_latest, generate_openmetrics])
def test_the_series_render_as_prometheus_clients_own(render):
    ours = ProberSeries()
    registry = serving.registry_of(ours.collectors())
    ref_registry, ref, share = reference()
    assert without_created_values(render(registry).decode()) == without_created_values(render(ref_registry).decode())  # empty
    for key in ("crawl/a", "crawl/b", "crawl/c"):
        ours.track(key)
        ref["duration"].labels(proxy=key)
        ref["failures"].labels(proxy=key)
    for key, seconds, ok in OBSERVED:
        ours.observe(key, seconds, ok)
        ref["duration"].labels(proxy=key).observe(seconds)
        if not ok:
            ref["failures"].labels(proxy=key).inc()
    ours.forget("crawl/c")
    ref["duration"].remove("crawl/c")
    ref["failures"].remove("crawl/c")
    ours.observe("crawl/c", 1.0, False)  # no longer ours: nothing comes back
    ours.set_share(2)
    share.set(2)
    got, want = render(registry).decode(), render(ref_registry).decode()
    assert 'proxy="crawl/a"' in got and "crawl/c" not in got
    assert without_created_values(got) == without_created_values(want)


def test_a_tracked_proxy_starts_at_zero_and_created_is_when_it_was_tracked():
    ours = ProberSeries()
    registry = serving.registry_of(ours.collectors())
    ours.track("crawl/a")
    assert registry.get_sample_value(HEALTHCHECK_FAILURES, {"proxy": "crawl/a"}) == 0.0
    assert registry.get_sample_value(f"{HEALTHCHECK_DURATION}_count", {"proxy": "crawl/a"}) == 0.0
    created = registry.get_sample_value(f"{HEALTHCHECK_DURATION}_created", {"proxy": "crawl/a"})
    ours.observe("crawl/a", 0.2, True)
    ours.track("crawl/a")  # tracked again (a reassign): its figures stay
    assert registry.get_sample_value(f"{HEALTHCHECK_DURATION}_count", {"proxy": "crawl/a"}) == 1.0
    assert registry.get_sample_value(f"{HEALTHCHECK_DURATION}_created", {"proxy": "crawl/a"}) == created
