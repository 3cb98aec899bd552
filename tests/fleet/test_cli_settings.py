"""Settings as a user gives them to `fleet`: a boolean is a switch, an empty
flag is empty and beats the environment, a bad environment variable is named
as such, and each feature's config gets every setting it is built from."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from fleet import httpguard
from fleet.cli import subcommands as cli
from fleet.gateway import process as gateway_process
from fleet.gateway.server import GatewayConfig
from fleet.leases import process as api_process
from fleet.leases.app import ApiConfig
from fleet.prober import process as prober_process
from fleet.settings import OPTION, Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("FLEET_"):
            monkeypatch.delenv(k)


@pytest.fixture
def started(monkeypatch):
    """The Settings each process would have started with (its main replaced)."""
    got: list[Settings] = []

    def main(settings, *a, **k):
        got.append(settings)
        return 0

    for module in (gateway_process, api_process, prober_process):
        monkeypatch.setattr(module, "main", main)
    return got


# --- a boolean is a switch -------------------------------------------------------------------


def test_a_boolean_flag_alone_turns_it_on(started):
    assert cli.main(["api", "--insecure-no-auth"]) == 0
    assert started[-1].api_insecure is True
    assert cli.main(["prober", "--trace-health-probes"]) == 0
    assert started[-1].traces_probes is True


@pytest.mark.parametrize(("argv", "want"), [
    (["--insecure-no-auth", "true"], True), (["--insecure-no-auth=true"], True),
    (["--insecure-no-auth", "false"], False), ([], False),
])
def test_a_boolean_flag_still_takes_a_value(started, argv, want):
    assert cli.main(["api", *argv]) == 0
    assert started[-1].api_insecure is want


def test_a_boolean_flag_beats_the_environment(started, monkeypatch):
    monkeypatch.setenv("FLEET_INSECURE_NO_AUTH", "true")
    assert cli.main(["api", "--insecure-no-auth", "false"]) == 0
    assert started[-1].api_insecure is False
    assert cli.main(["api"]) == 0
    assert started[-1].api_insecure is True


def test_a_default_on_boolean_has_a_no_switch(monkeypatch):
    # No boolean is on by default today: make one, as a future option would be.
    from fleet.cli import common

    on = dataclasses.replace(OPTION["trace-health-probes"], default=True)
    import argparse

    p = argparse.ArgumentParser()
    common._add_setting(p, on)
    assert p.parse_args(["--no-trace-health-probes"]).trace_health_probes == "false"
    assert p.parse_args(["--trace-health-probes"]).trace_health_probes == "true"


# --- an empty value is empty, and beats the environment ----------------------------------------


def test_empty_ban_statuses_bans_none(started):
    assert cli.main(["gateway", "--gateway-ban-statuses", ""]) == 0
    assert gateway_process.config_of(started[-1]).ban_statuses == frozenset()


def test_an_empty_flag_beats_the_environment(started, monkeypatch):
    monkeypatch.setenv("FLEET_GATEWAY_BAN_STATUSES", "403,429")
    monkeypatch.setenv("FLEET_GATEWAY_BAN_PATTERN", "captcha")
    assert cli.main(["gateway"]) == 0
    assert gateway_process.config_of(started[-1]).ban_statuses == frozenset({403, 429})
    assert cli.main(["gateway", "--gateway-ban-statuses=", "--gateway-ban-pattern", ""]) == 0
    config = gateway_process.config_of(started[-1])
    assert config.ban_statuses == frozenset() and config.ban_pattern is None


def test_an_empty_variable_is_empty_too():
    assert gateway_process.config_of(Settings.from_env({"FLEET_GATEWAY_BAN_STATUSES": ""})).ban_statuses == frozenset()
    assert gateway_process.config_of(Settings.from_env({})).ban_statuses == frozenset({403, 429, 503})


def test_an_empty_path_clears_the_environments(monkeypatch, tmp_path):
    # A process started with the settings' environment must not get the variable back.
    monkeypatch.setenv("FLEET_PROXIES", str(tmp_path))
    args = cli.parser().parse_args(["gc", "--proxies", ""])
    settings = cli.settings_from(args)
    assert settings.proxies is None
    assert settings.to_env()["FLEET_PROXIES"] == "" and Settings.from_env(settings.to_env()).proxies is None


def test_an_empty_duration_takes_its_default(started, monkeypatch):
    monkeypatch.setenv("FLEET_PROBE_INTERVAL", "5s")
    assert cli.main(["prober", "--probe-interval", ""]) == 0
    assert started[-1].probe_interval == OPTION["probe-interval"].default


# --- a bad environment variable is named ----------------------------------------------------------


def test_a_bad_variable_is_named_by_the_command(capsys, monkeypatch):
    monkeypatch.setenv("FLEET_PROBE_INTERVAL", "banana")
    assert cli.main(["prober"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("fleet prober: FLEET_PROBE_INTERVAL: invalid duration 'banana'"), err
    monkeypatch.setenv("FLEET_PROBE_INTERVAL", "2h")
    assert cli.main(["prober"]) == cli.EXIT_BAD_INPUT
    assert "fleet prober: FLEET_PROBE_INTERVAL must be from 100ms to 1h, got 2h" in capsys.readouterr().err


def test_a_bad_flag_is_named_as_the_flag(capsys, monkeypatch):
    monkeypatch.setenv("FLEET_PROBE_INTERVAL", "5s")
    assert cli.main(["prober", "--probe-interval", "banana"]) == cli.EXIT_BAD_INPUT
    assert "fleet prober: --probe-interval: invalid duration 'banana'" in capsys.readouterr().err


def test_the_fleet_command_names_the_variable():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "prober"], env={**env, "FLEET_PROBE_INTERVAL": "banana"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "FLEET_PROBE_INTERVAL: invalid duration 'banana'" in done.stderr and "--probe-interval" not in done.stderr


# --- each feature's config from the settings, by name ------------------------------------------------


NON_DEFAULT = {
    "max_leases_per_proxy": "7", "cooldown_blocked": "11s", "cooldown_errors": "5", "cooldown_global": "13s",
    "lease_max_ttl": "17s", "lease_grace": "19s", "lease_replica_wait": "2s",
    "api_header_timeout": "3s", "api_idle_timeout": "4s", "api_body_timeout": "6s", "api_max_connections": "100",
    "api_max_connections_per_client": "9",
    "gateway_lease_ttl": "23s", "gateway_session_ttl": "29s", "gateway_max_attempts": "4",
    "gateway_connect_timeout": "2s", "gateway_response_timeout": "31s", "gateway_header_timeout": "8s",
    "gateway_idle_timeout": "37s", "gateway_tunnel_max_duration": "41s", "gateway_max_tunnels": "43",
    "gateway_max_tunnels_per_client": "47", "gateway_max_body": "53", "gateway_body_timeout": "59s",
    "gateway_ban_statuses": "418", "gateway_ban_pattern": "nope", "gateway_session_connections": "5",
}


def test_the_gateway_config_gets_every_setting():
    s = Settings.from_values(NON_DEFAULT)
    c = gateway_process.config_of(s)
    assert c.ban_statuses == frozenset({418}) and c.ban_pattern is not None and c.ban_pattern.pattern == "nope"
    assert dataclasses.replace(c, ban_pattern=None) == GatewayConfig(
        max_per_proxy=7, lease_ttl=23, session_ttl=29, max_attempts=4, connect_timeout=2, response_timeout=31,
        header_timeout=8, idle_timeout=37, tunnel_max_duration=41, max_tunnels=43, max_tunnels_per_client=47,
        ban_statuses=frozenset({418}), max_body=53, body_timeout=59, cooldown_blocked=11, cooldown_errors=5,
        cooldown_global=13, session_connections=5)


def test_the_api_config_and_limits_get_every_setting():
    s = Settings.from_values(NON_DEFAULT)
    assert api_process.config_of(s, b"t" * 32) == ApiConfig(
        token=b"t" * 32, max_ttl=17, max_per_proxy=7, cooldown_blocked=11, cooldown_errors=5, cooldown_global=13,
        grace=19, replica_wait=2)
    assert api_process.limits_of(s) == httpguard.Limits(header_timeout=3, idle_timeout=4, body_timeout=6,
                                                        max_connections=100, max_connections_per_client=9)


def test_the_feature_configs_own_defaults_are_the_settings_defaults():
    """A config built in a test (`GatewayConfig()`) behaves as the process with no flags: the two defaults agree."""
    assert gateway_process.config_of(Settings()) == GatewayConfig()
    assert api_process.config_of(Settings(), None) == ApiConfig(token=None)
