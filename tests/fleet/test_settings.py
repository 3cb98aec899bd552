"""Process settings: durations, the seed's ValidateSchedule table, env vs flags."""

import pytest

from fleet.durations import format_duration, parse_duration
from fleet.settings import Settings, SettingsError, validate_schedule


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("15s", 15), ("1m", 60), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), ("-1m", -60), ("1.5s", 1.5)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "1x", "s", "1m 2s", "abc"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (10, "10s"), (60, "1m0s"), (90, "1m30s"), (3600, "1h0m0s"), (0.5, "500ms")])
def test_format_duration_like_go(seconds, text):
    assert format_duration(seconds) == text


# The seed's TestValidateSchedule.
@pytest.mark.parametrize(
    ("name", "interval", "timeout", "want_err"),
    [
        ("off", 0, 0, False),
        ("defaults", 60, 15, False),
        ("shortest interval", 10, 10, False),
        ("too frequent", 5, 1, True),
        ("negative interval", -60, 1, True),
        ("timeout left to derive, short interval", 12, 0, False),
        ("negative timeout", 60, -1, True),
        ("timeout longer than interval", 60, 120, True),
    ],
)
def test_validate_schedule(name, interval, timeout, want_err):
    if want_err:
        with pytest.raises(SettingsError):
            validate_schedule(interval, timeout)
    else:
        validate_schedule(interval, timeout)


def test_schedule_messages_are_the_seeds():
    with pytest.raises(SettingsError) as err:
        validate_schedule(5, 1)
    assert str(err.value) == "--provider-check-interval must be 0 (off) or at least 10s, got 5s"
    with pytest.raises(SettingsError) as err:
        validate_schedule(60, 120)
    assert str(err.value) == "--provider-check-timeout must be at most the interval (1m0s), got 2m0s"


# The seed's TestMonitor_setDefaults_timeout.
@pytest.mark.parametrize(("interval", "timeout", "want"), [(60, 0, 15), (12, 0, 12), (60, 20, 20)])
def test_timeout_default(interval, timeout, want):
    assert Settings(provider_check_interval=interval, provider_check_timeout=timeout).check_timeout == want


def test_overdue_after_is_two_intervals_plus_timeout():
    assert Settings(provider_check_interval=60).overdue_after == 135


def test_from_env_and_round_trip():
    env = {"FLEET_PROVIDER_CHECK_INTERVAL": "10s", "FLEET_BROKER_URL": "redis://h:1/2", "FLEET_PROVIDERS_CONFIG": "p.yaml"}
    s = Settings.from_env(env)
    assert (s.provider_check_interval, s.broker, s.providers_config) == (10, "redis://h:1/2", "p.yaml")
    assert Settings.from_env(s.to_env()) == s


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # A value from the environment is named by its variable, which is where the user must fix it.
        ({"FLEET_PROVIDER_CHECK_INTERVAL": "soon"}, "FLEET_PROVIDER_CHECK_INTERVAL: invalid duration 'soon'"),
        ({"FLEET_PROVIDER_CHECK_INTERVAL": "5s"}, "at least 10s, got 5s"),
        ({"FLEET_LOG_FORMAT": "xml"}, "FLEET_LOG_FORMAT must be text or json, got 'xml'"),
        ({"FLEET_BROKER_URL": "amqp://x"}, "FLEET_BROKER_URL must be a redis://, rediss://, unix:// or sentinel:// URL, got 'amqp://x'"),
        ({"FLEET_GC_INTERVAL": "30s"}, "FLEET_GC_INTERVAL must be 0 (off) or from 1m to 24h, got 30s"),
    ],
)
def test_bad_settings_name_the_variable_and_value(env, message):
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    assert message in str(err.value)


# The Proxy, GC, prober and lease-API settings (issues 12-14): each bad value is
# refused naming its flag; the defaults are the issues' numbers.
@pytest.mark.parametrize("attr, raw, flag", [
    ("max_provider_calls", "0", "--max-provider-calls"),
    ("max_provider_calls", "three", "--max-provider-calls"),
    ("proxy_poll_interval", "500ms", "--proxy-poll-interval"),
    ("provider_call_timeout", "11m", "--provider-call-timeout"),
    ("gc_interval", "30s", "--gc-interval"),
    ("gc_min_age", "25h", "--gc-min-age"),
    ("probe_interval", "50ms", "--probe-interval"),
    ("probe_timeout", "2m", "--probe-timeout"),
    ("probe_failure_threshold", "0", "--probe-failure-threshold"),
    ("probe_success_threshold", "101", "--probe-success-threshold"),
    ("trace_health_probes", "maybe", "--trace-health-probes"),
    ("probe_target", "no-port", "--probe-target"),
    ("probe_target", "http://x:99999/", "--probe-target"),
    ("prober_metrics_bind_address", "nowhere", "--prober-metrics-bind-address"),
    ("api_bind_address", "nowhere", "--api-bind-address"),
    ("insecure_no_auth", "perhaps", "--insecure-no-auth"),
    ("max_leases_per_proxy", "0", "--max-leases-per-proxy"),
    ("lease_max_ttl", "2d", "--lease-max-ttl"),
    ("cooldown_errors", "0", "--cooldown-errors"),
    ("gateway_ban_pattern", "(unclosed", "--gateway-ban-pattern"),
    ("gateway_ban_pattern", "a" * 1001, "--gateway-ban-pattern"),
    ("gateway_max_body", "-1", "--gateway-max-body"),
    ("gateway_body_timeout", "20m", "--gateway-body-timeout"),
])
def test_new_settings_refuse_bad_values_naming_the_flag(attr, raw, flag):
    with pytest.raises(SettingsError) as err:
        Settings.from_values({attr: raw})
    assert flag in str(err.value)


def test_new_settings_defaults_and_derived_values():
    s = Settings.from_values({})
    assert (s.max_provider_calls, s.proxy_poll_interval, s.proxy_resync_interval, s.provider_call_timeout) == (3, 10, 60, 60)
    assert (s.gc_interval, s.gc_min_age, s.gc_enabled) == (600, 600, True)
    assert not Settings.from_values({"gc_interval": "0"}).gc_enabled
    assert (s.probe_interval, s.probe_time_limit, s.probe_failure_threshold, s.probe_success_threshold) == (1, 5, 3, 1)
    assert Settings.from_values({"probe_interval": "200ms"}).probe_time_limit == 1.0
    assert not s.traces_probes and Settings.from_values({"trace_health_probes": "true"}).traces_probes
    assert (s.max_leases_per_proxy, s.lease_max_ttl, s.cooldown_errors, s.api_insecure) == (1, 3600, 3, False)
    for target in ("example.com:443", "http://127.0.0.1:8080/ip", "[::1]:80"):
        assert Settings.from_values({"probe_target": target}).probe_target == target


# --proxy-namespaces (issue 18): a comma list of namespaces or '*'; default the installation's own.
@pytest.mark.parametrize(("raw", "scope"), [
    ("crawl", ("crawl",)),
    ("crawl,team-b", ("crawl", "team-b")),
    (" crawl , team-b ", ("crawl", "team-b")),
    ("crawl,team-b,crawl", ("crawl", "team-b")),  # a repeat counts once
    ("*", ("*",)),
    (" * ", ("*",)),
])
def test_proxy_namespaces(raw, scope):
    assert Settings.from_values({"proxy_namespaces": raw}).proxy_scope == scope
    assert Settings.from_env({"FLEET_PROXY_NAMESPACES": raw}).proxy_scope == scope


@pytest.mark.parametrize(("raw", "message"), [
    ("crawl,,b", "--proxy-namespaces must be a comma list of namespaces or '*', entry 2 is empty"),
    ("crawl,", "entry 2 is empty"),
    ("Crawl", "--proxy-namespaces: 'Crawl' is not a namespace name (a DNS-1123 label"),
    ("team_b", "'team_b' is not a namespace name"),
    ("a" * 64, "is not a namespace name"),
    ("-x", "'-x' is not a namespace name"),
    ("*,crawl", "'*' (every namespace) cannot be combined with names"),
    ("crawl,*", "'*' (every namespace) cannot be combined with names"),
    (",".join(f"n{i}" for i in range(101)), "at most 100 namespaces"),
])
def test_bad_proxy_namespaces_are_refused_naming_the_flag_and_entry(raw, message):
    with pytest.raises(SettingsError) as err:
        Settings.from_values({"proxy_namespaces": raw})
    assert message in str(err.value)


def test_the_default_scope_is_the_installations_namespace(monkeypatch):
    import fleet.settings as module

    monkeypatch.setattr(module, "NAMESPACE_FILE", "/nonexistent")
    monkeypatch.setenv("POD_NAMESPACE", "fleet-a")
    assert Settings().proxy_scope == ("fleet-a",)  # in a cluster: the pod's namespace
    monkeypatch.delenv("POD_NAMESPACE")
    assert Settings().proxy_scope == ("default",)  # outside one
    assert Settings(proxy_namespaces="x").to_env()["FLEET_PROXY_NAMESPACES"] == "x"
