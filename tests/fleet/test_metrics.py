"""Metric names, the controller's counters, the bind address, heartbeats."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleet import metrics
from fleet.store import Store, keys


def test_metric_names_are_stable():
    assert (metrics.TARGET_UP, metrics.CHECK_DURATION, metrics.CHECK_TIMESTAMP) == (
        "proxy_operator_provider_target_up",
        "proxy_operator_provider_check_duration_seconds",
        "proxy_operator_provider_check_timestamp_seconds",
    )


def test_parse_bind():
    assert metrics.parse_bind(":8080") == ("0.0.0.0", 8080)
    assert metrics.parse_bind("127.0.0.1:9") == ("127.0.0.1", 9)
    assert metrics.parse_bind("0") is None


def test_heartbeats_count_live_workers():
    import fakeredis

    from fleet import heartbeat

    r = fakeredis.FakeRedis()
    heartbeat.beat_once(Store(r), ["a", "b"], "w1@h")
    heartbeat.beat_once(Store(r), ["a"], "w2@h")
    assert heartbeat.live_workers(Store(r)) == {"a": ["w1@h", "w2@h"], "b": ["w1@h"]}
    assert 0 < r.ttl(keys.worker("a", "w1@h")) <= heartbeat.TTL


def counters_scrape(c):
    reg = CollectorRegistry()
    for col in c.collectors():
        reg.register(col)
    return reg, generate_latest(reg).decode()


def test_controller_counters_start_at_zero_for_every_label_value():
    c = metrics.ControllerCounters(kinds=("ProviderHealth",))
    _, text = counters_scrape(c)
    assert 'proxy_operator_foreign_objects_skipped_total{kind="ProviderHealth"} 0.0' in text
    for reason in ("unconfigured", "checks_off"):
        assert f'proxy_operator_results_dropped_total{{reason="{reason}"}} 0.0' in text
    c.dropped(metrics.DROP_UNCONFIGURED)
    c.skipped_foreign("ProviderHealth")
    c.skipped_foreign("ProviderHealth")
    reg, _ = counters_scrape(c)
    assert reg.get_sample_value(metrics.RESULTS_DROPPED, {"reason": "unconfigured"}) == 1
    assert reg.get_sample_value(metrics.FOREIGN_SKIPPED, {"kind": "ProviderHealth"}) == 2


def test_controller_counters_refuse_unknown_label_values():
    """The label sets are fixed: a new drop reason is added to DROP_REASONS, not invented at a call site."""
    c = metrics.ControllerCounters(kinds=("ProviderHealth",))
    with pytest.raises(ValueError, match="unknown drop reason 'bogus'"):
        c.dropped("bogus")
    with pytest.raises(ValueError, match="unknown kind 'Proxy'"):
        c.skipped_foreign("Proxy")


def test_counter_names_are_stable():
    assert (metrics.FOREIGN_SKIPPED, metrics.RESULTS_DROPPED) == (
        "proxy_operator_foreign_objects_skipped_total",
        "proxy_operator_results_dropped_total",
    )
