"""Metric names, the controller's counters, the bind address, heartbeats."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleet import serving
from fleet.store import Store, keys


def test_metric_names_are_stable():
    assert (serving.TARGET_UP, serving.CHECK_DURATION, serving.CHECK_TIMESTAMP) == (
        "proxy_operator_provider_target_up",
        "proxy_operator_provider_check_duration_seconds",
        "proxy_operator_provider_check_timestamp_seconds",
    )


def test_serve_metrics_parses_the_address_as_the_flag_does():
    from fleet.settings import SettingsError

    assert serving.serve_metrics("0", CollectorRegistry(), None) is None
    with pytest.raises(SettingsError, match="--metrics-bind-address must be host:port, :port or 0"):
        serving.serve_metrics("8080", CollectorRegistry(), None)


def test_heartbeats_count_live_workers():
    import fakeredis

    from fleet.celery import presence

    r = fakeredis.FakeRedis()
    presence.beat_once(Store(r), ["a", "b"], "w1@h")
    presence.beat_once(Store(r), ["a"], "w2@h")
    assert presence.live_workers(Store(r)) == {"a": ["w1@h", "w2@h"], "b": ["w1@h"]}
    assert 0 < r.ttl(keys.worker("a", "w1@h")) <= presence.TTL


def counters_scrape(c):
    reg = CollectorRegistry()
    for col in c.collectors():
        reg.register(col)
    return reg, generate_latest(reg).decode()


def test_controller_counters_start_at_zero_for_every_label_value():
    c = serving.ControllerCounters(kinds=("ProviderHealth",))
    _, text = counters_scrape(c)
    assert 'proxy_operator_foreign_objects_skipped_total{kind="ProviderHealth"} 0.0' in text
    for reason in ("unconfigured", "checks_off"):
        assert f'proxy_operator_results_dropped_total{{reason="{reason}"}} 0.0' in text
    c.dropped(serving.DROP_UNCONFIGURED)
    c.skipped_foreign("ProviderHealth")
    c.skipped_foreign("ProviderHealth")
    reg, _ = counters_scrape(c)
    assert reg.get_sample_value(serving.RESULTS_DROPPED, {"reason": "unconfigured"}) == 1
    assert reg.get_sample_value(serving.FOREIGN_SKIPPED, {"kind": "ProviderHealth"}) == 2


def test_controller_counters_refuse_unknown_label_values():
    """The label sets are fixed: a new drop reason is added to DROP_REASONS, not invented at a call site."""
    c = serving.ControllerCounters(kinds=("ProviderHealth",))
    with pytest.raises(ValueError, match="unknown drop reason 'bogus'"):
        c.dropped("bogus")
    with pytest.raises(ValueError, match="unknown kind 'Proxy'"):
        c.skipped_foreign("Proxy")


def test_counter_names_are_stable():
    assert (serving.FOREIGN_SKIPPED, serving.RESULTS_DROPPED) == (
        "proxy_operator_foreign_objects_skipped_total",
        "proxy_operator_results_dropped_total",
    )
