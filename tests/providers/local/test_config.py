"""The `local:` block: defaults, resolved values, and strict validation that
names the field and the value (through fleet.config, as users meet it)."""

import pytest

from fleet import config as fleet_config
from providers import base, registry
from providers.local import config as local_config
from providers.local.config import LocalConfig, parse_port_range


def providers_file(block: dict) -> dict:
    return {"providers": [{"name": "here", "type": "local", "local": block}]}


def test_defaults_and_the_registry_entry():
    cfg = LocalConfig()
    assert registry.config_model("local") is LocalConfig
    assert (cfg.bindAddress, cfg.portRange, cfg.ports) == ("127.0.0.1", "31280-31379", (31280, 31379))
    assert cfg.sources() == ["127.0.0.0/8"]
    assert registry.placement_problem("local", cfg, registry.Placement(zone="any", image="x")) is None  # ignored
    assert fleet_config.parse({"providers": [{"name": "here", "type": "local"}]}).get("here").block == cfg


@pytest.mark.parametrize(
    ("bind", "sources", "want"),
    [
        ("127.0.0.1", None, ["127.0.0.0/8"]),
        ("127.0.0.2", None, ["127.0.0.0/8"]),
        ("::1", None, ["::1/128"]),
        ("10.1.2.3", None, ["10.1.2.3/32"]),
        ("fd00::5", None, ["fd00::5/128"]),
        ("10.1.2.3", ["10.0.0.0/8", "192.168.1.7/32"], ["10.0.0.0/8", "192.168.1.7/32"]),
    ],
)
def test_allowed_sources_default_to_the_bind_address_neighbourhood(bind, sources, want):
    assert LocalConfig(bindAddress=bind, allowedSources=sources).sources() == want


def test_state_dir_default_depends_on_the_user(monkeypatch):
    monkeypatch.setattr(local_config.os, "geteuid", lambda: 0)
    assert LocalConfig().state_dir("here") == "/var/lib/fleet/local/here"
    monkeypatch.setattr(local_config.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", "/home/u/.state")
    assert LocalConfig().state_dir("here") == "/home/u/.state/fleet/local/here"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert LocalConfig().state_dir("here") == "/home/u/.local/state/fleet/local/here"
    assert LocalConfig(stateDir="/srv/fleet").state_dir("here") == "/srv/fleet"


def test_squid_path_default_is_found_on_path_or_usr_sbin(monkeypatch):
    monkeypatch.setattr(local_config.shutil, "which", lambda name: None)
    assert LocalConfig().squid() == "/usr/sbin/squid"
    monkeypatch.setattr(local_config.shutil, "which", lambda name: f"/opt/bin/{name}")
    assert LocalConfig().squid() == "/opt/bin/squid"
    assert LocalConfig(squidPath="/x/squid").squid() == "/x/squid"


@pytest.mark.parametrize(
    ("text", "want"),
    [("31280-31379", (31280, 31379)), ("1024-1024", (1024, 1024)), ("64536-65535", (64536, 65535))],
)
def test_port_ranges(text, want):
    assert parse_port_range(text) == want


@pytest.mark.parametrize(
    ("edit", "path", "value"),
    [
        ({"portRange": "31379-31280"}, "providers[0].local.portRange", "'31379-31280'"),
        ({"portRange": "80-90"}, "providers[0].local.portRange", "'80-90'"),
        ({"portRange": "65000-65536"}, "providers[0].local.portRange", "'65000-65536'"),
        ({"portRange": "20000-21000"}, "providers[0].local.portRange", "'20000-21000'"),  # 1001 ports
        ({"portRange": "31280"}, "providers[0].local.portRange", "'31280'"),
        ({"portRange": 31280}, "providers[0].local.portRange", "31280"),
        ({"bindAddress": "localhost"}, "providers[0].local.bindAddress", "'localhost'"),
        ({"bindAddress": "0.0.0.0"}, "providers[0].local.bindAddress", "'0.0.0.0'"),
        ({"bindAddress": "::"}, "providers[0].local.bindAddress", "'::'"),
        ({"bindAddress": "127.0.0.1:3128"}, "providers[0].local.bindAddress", "'127.0.0.1:3128'"),
        ({"allowedSources": ["0.0.0.0/0"]}, "providers[0].local.allowedSources[0]", "0.0.0.0/0"),
        ({"allowedSources": ["::/0"]}, "providers[0].local.allowedSources[0]", "::/0"),
        ({"allowedSources": ["10.0.0.1/8"]}, "providers[0].local.allowedSources[0]", "10.0.0.1/8"),
        ({"allowedSources": ["somewhere"]}, "providers[0].local.allowedSources[0]", "somewhere"),
        ({"allowedSources": []}, "providers[0].local.allowedSources", "[]"),
        ({"stateDir": "relative/dir"}, "providers[0].local.stateDir", "'relative/dir'"),
        ({"stateDir": "/var/lib/my fleet"}, "providers[0].local.stateDir", "'/var/lib/my fleet'"),
        ({"stateDir": "/var/lib/fleet#x"}, "providers[0].local.stateDir", "'/var/lib/fleet#x'"),
        ({"squidPath": "squid"}, "providers[0].local.squidPath", "'squid'"),
        ({"cacheDir": "/x"}, "providers[0].local.cacheDir", "unknown key"),
    ],
)
def test_errors_name_the_field_and_value(edit, path, value):
    with pytest.raises(fleet_config.ConfigError) as err:
        fleet_config.parse(providers_file(edit))
    text = str(err.value)
    assert path in text and value in text, text


def test_values_are_normalised():
    cfg = LocalConfig(bindAddress="::0001", allowedSources=["10.0.0.0/8"])
    assert cfg.bindAddress == "::1"


def test_the_registry_builds_it_without_touching_the_host(tmp_path):
    from providers.local.provider import LocalProvider

    state = tmp_path / "not-yet"
    p = registry.build("here", "local", LocalConfig(stateDir=str(state), squidPath=str(tmp_path / "no-squid")))
    assert isinstance(p, LocalProvider) and isinstance(p, base.Provider) and isinstance(p, base.Checker)
    assert p.root == str(state) and not state.exists()  # made on first use, never by the constructor
