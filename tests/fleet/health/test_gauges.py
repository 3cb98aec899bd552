"""The scrape-time gauges of the health feature; the seed's TestRegisterProviderTargets_scrape."""

from prometheus_client import CollectorRegistry, generate_latest

from fleet import serving
from fleet.health import metrics
from fleet.health.results import CheckResult
from fleet.store import keys
from providers.base import TargetStatus

CHECKED = 1757602800.0


def scrape(results, providers=(), interval=None):
    reg = CollectorRegistry()
    reg.register(metrics.ProviderTargetCollector(lambda: results, lambda _checked: providers, interval))
    return generate_latest(reg).decode()


def test_scrape():
    r = CheckResult("kvm-home", "kvm", True, CHECKED, (
        TargetStatus("nas1", ready=True, latency=0.084), TargetStatus("nas2", ready=False, latency=15.0)))
    text = scrape([r], [metrics.ProviderGauges("kvm-home", "provider.kvm-home", 3, 2, True)], 60.0)
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
# HELP proxy_operator_provider_workers Workers consuming the provider's queue, by their heartbeats in Redis.
# TYPE proxy_operator_provider_workers gauge
proxy_operator_provider_workers{provider="kvm-home"} 2.0
# HELP proxy_operator_provider_check_overdue 1 when the provider has had no check result for 2 x interval + timeout (CheckOverdue).
# TYPE proxy_operator_provider_check_overdue gauge
proxy_operator_provider_check_overdue{provider="kvm-home"} 1.0
# HELP proxy_operator_metrics_truncated Targets left out of this scrape by its bounds (1000 per provider, 20000 in all); 0 when none.
# TYPE proxy_operator_metrics_truncated gauge
proxy_operator_metrics_truncated 0.0
# HELP proxy_operator_provider_check_interval_seconds The configured --provider-check-interval.
# TYPE proxy_operator_provider_check_interval_seconds gauge
proxy_operator_provider_check_interval_seconds 60.0
# HELP proxy_operator_last_round_timestamp_seconds Unix time of the last check round the active beat sent (no sample: none on record).
# TYPE proxy_operator_last_round_timestamp_seconds gauge
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


def test_series_are_bounded_per_provider_and_in_all():
    from fleet.health.limits import Limits

    def many(name, n):
        return CheckResult(name, "fake", True, CHECKED, tuple(TargetStatus(f"t{i}", ready=True) for i in range(n)))

    results = [many("a", 50), many("b", 200_000), many("c", 50)]
    reg = CollectorRegistry()
    reg.register(metrics.ProviderTargetCollector(lambda: iter(results), limits=Limits(max_targets=100, max_series=180)))
    text = generate_latest(reg).decode()
    up = [line for line in text.splitlines() if line.startswith(serving.TARGET_UP + "{")]
    assert sum('provider="a"' in line for line in up) == 50
    assert sum('provider="b"' in line for line in up) == 100  # per provider
    assert sum('provider="c"' in line for line in up) == 30  # in all: 180
    assert reg.get_sample_value(serving.METRICS_TRUNCATED) == (200_000 - 100) + 20


def test_overdue_uses_the_checked_at_of_the_results_read():
    got = {}

    def providers(checked):
        got.update(checked)
        return []

    r = CheckResult("a", "fake", True, CHECKED)
    reg = CollectorRegistry()
    reg.register(metrics.ProviderTargetCollector(lambda: [r], providers))
    generate_latest(reg)
    assert got == {"a": CHECKED}


def test_scrape_of_a_store_holding_bad_values(tmp_path):
    """Values stored before validation (year 5024, Infinity, garbage) are skipped, never a crash."""
    import json

    import fakeredis

    from fleet.config import parse
    from fleet.health.metrics import registry_for
    from fleet.health.recording import Controller
    from fleet.settings import Settings
    from fleet.store import Store

    r = fakeredis.FakeRedis()
    ok = CheckResult("good", "fake", True, CHECKED, (TargetStatus("t", ready=True),)).to_dict()
    r.set(keys.RESULT + "good", json.dumps(ok))
    r.set(keys.RESULT + "future", json.dumps({**ok, "provider": "future", "checkedAt": 95_000_000_000.0}))
    r.set(keys.RESULT + "inf", json.dumps({**ok, "provider": "inf", "checkedAt": float("inf")}))
    r.set(keys.RESULT + "junk", b"\xff{not json")
    names = ("good", "future", "inf", "junk")
    ctl = Controller(Settings(provider_check_interval=60.0), parse({"providers": [{"name": n, "type": "fake"} for n in names]}),
                     Store(r), None)
    reg = registry_for(ctl)
    text = generate_latest(reg).decode()
    assert 'proxy_operator_provider_target_up{provider="good",target="t"} 1.0' in text
    assert [n for n in names if f'target_up{{provider="{n}"' in text] == ["good"]
    assert 'proxy_operator_provider_check_overdue{provider="future"}' in text


def test_last_round_gauge_has_a_sample_only_when_beat_stamped_one():
    def last_round_lines(read):
        reg = CollectorRegistry()
        reg.register(metrics.ProviderTargetCollector(lambda: [], read_last_round=read))
        return [x for x in generate_latest(reg).decode().splitlines() if x.startswith(serving.LAST_ROUND + " ")]

    assert last_round_lines(lambda: CHECKED) == [f"{serving.LAST_ROUND} 1.7576028e+09"]
    assert last_round_lines(lambda: None) == []  # none on record: the alert's absent branch, not a 0

    def down():
        raise ConnectionError("redis down")

    assert last_round_lines(down) == []  # no sample, not a 500
