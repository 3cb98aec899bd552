"""The scrape-time gauges; the seed's TestRegisterProviderTargets_scrape."""

from prometheus_client import CollectorRegistry, generate_latest

from fleet import metrics
from fleet.results import CheckResult
from providers.base import TargetStatus

CHECKED = 1757602800.0


def scrape(results, queues=()):
    reg = CollectorRegistry()
    reg.register(metrics.ProviderTargetCollector(lambda: results, lambda: queues))
    return generate_latest(reg).decode()


def test_scrape():
    r = CheckResult("kvm-home", "kvm", True, CHECKED, (
        TargetStatus("nas1", ready=True, latency=0.084), TargetStatus("nas2", ready=False, latency=15.0)))
    text = scrape([r], [("kvm-home", "provider.kvm-home", 3)])
    expected = """\
# HELP proxy_operator_provider_target_up Whether the target passed its latest provider health check (1) or not (0).
# TYPE proxy_operator_provider_target_up gauge
proxy_operator_provider_target_up{provider="kvm-home",target="nas1"} 1.0
proxy_operator_provider_target_up{provider="kvm-home",target="nas2"} 0.0
# HELP proxy_operator_provider_check_duration_seconds Duration of the target's latest provider health check.
# TYPE proxy_operator_provider_check_duration_seconds gauge
proxy_operator_provider_check_duration_seconds{provider="kvm-home",target="nas1"} 0.084
proxy_operator_provider_check_duration_seconds{provider="kvm-home",target="nas2"} 15.0
# HELP proxy_operator_provider_check_timestamp_seconds Unix time of the target's latest provider health check.
# TYPE proxy_operator_provider_check_timestamp_seconds gauge
proxy_operator_provider_check_timestamp_seconds{provider="kvm-home",target="nas1"} 1.7576028e+09
proxy_operator_provider_check_timestamp_seconds{provider="kvm-home",target="nas2"} 1.7576028e+09
# HELP proxy_operator_provider_queue_length Messages waiting in the provider's queue (checks not yet taken by a worker).
# TYPE proxy_operator_provider_queue_length gauge
proxy_operator_provider_queue_length{provider="kvm-home",queue="provider.kvm-home"} 3.0
"""
    assert text == expected


def test_never_checked_has_no_series():
    assert "{" not in scrape([])


def test_redis_outage_gives_an_empty_scrape_not_an_error():
    def broken():
        raise ConnectionError("redis down")

    reg = CollectorRegistry()
    reg.register(metrics.ProviderTargetCollector(broken))
    assert "{" not in generate_latest(reg).decode()


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
