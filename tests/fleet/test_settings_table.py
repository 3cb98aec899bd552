"""The settings table: `Settings`' fields are the one place each option's
facts live (read as `OPTIONS`). `validate()`'s bounds, the CLI's help and
the docs' settings page are derived from it, and each is checked here
against the table, as applied (parsing raw strings, the argparse help, the
committed page docs/reference/settings.md)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fleet import settings as module
from fleet.cli.subcommands import parser
from fleet.durations import format_duration
from fleet.settings import GROUPS, OPTIONS, Settings, SettingsError
from tests.docsgen import REFERENCE, generator

PAGE = REFERENCE / "settings.md"
TYPES = {"str": {"str", "str | None"}, "duration": {"float"}, "int": {"int"}, "bool": {"bool"}}
BOUNDED = [o for o in OPTIONS if o.high is not None]


def _raw(opt, value) -> str:
    return format_duration(value) if opt.kind == "duration" else str(value)


def _page_sections() -> dict[str, str]:
    """The settings page: group → the text of its section."""
    parts = re.split(r"^## (\w+)\n", PAGE.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# --- the table itself --------------------------------------------------------------


def test_every_option_is_unique_grouped_and_typed():
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS) and len({o.env for o in OPTIONS}) == len(OPTIONS)
    assert {o.group for o in OPTIONS} == set(GROUPS), "a group without options, or an option outside the groups"
    for o in OPTIONS:
        if o.default is not None:
            want = {"str": str, "duration": float, "int": int, "bool": bool}[o.kind]
            assert type(o.default) is want, (o.flag, o.default)
        assert not (o.choices and o.high is not None), o.flag


def test_settings_fields_are_the_options_with_their_defaults_and_types():
    fields = dataclasses.fields(Settings)
    assert [f.name for f in fields] == [o.attr for o in OPTIONS]
    for f, o in zip(fields, OPTIONS, strict=True):
        assert f.default == o.default and type(f.default) is type(o.default), o.flag
        assert f.type in TYPES[o.kind], (o.flag, f.type)
    assert Settings() == Settings.from_values({}), "from_values with nothing set must give the table's defaults"


def test_the_defaults_pass_validation_and_round_trip_through_the_environment():
    s = Settings()
    s.validate()
    assert Settings.from_env(s.to_env()) == s
    changed = Settings.from_values({"trace_health_probes": "yes", "insecure_no_auth": "TRUE", "gc_interval": "0",
                                    "lease_grace": "30s", "probe_timeout": "200ms"})
    assert Settings.from_env(changed.to_env()) == changed


# --- validate(): each bound as the table states it -------------------------------------


@pytest.mark.parametrize("opt", BOUNDED, ids=lambda o: o.flag)
def test_each_bound_holds_at_its_edges_and_is_refused_beyond(opt):
    low, high = opt.low or 0, opt.high
    step = 1 if opt.kind == "int" else 0.001
    base = {"api_max_connections_per_client": "1"}  # below every --api-max-connections the table allows
    for ok in (low, high):
        assert getattr(Settings.from_values({**base, opt.attr: _raw(opt, ok)}), opt.attr) == ok
    beyond = [high + step] + ([low - step] if low > 0 and not (opt.zero and low - step <= 0) else [])
    if opt.kind == "duration" and low == 0:
        beyond.append(-1.0)  # parse_duration takes a sign
    for bad in beyond:
        # Built directly: the parsers refuse some of these first (durations over 24h, ints over 6 digits).
        with pytest.raises(SettingsError) as err:
            Settings(**{opt.attr: bad}).validate()
        assert str(err.value).startswith(f"--{opt.flag} must be {opt.bounds}, got "), str(err.value)
        with pytest.raises(SettingsError, match=f"^--{opt.flag}"):
            Settings.from_values({opt.attr: _raw(opt, bad)})
    if opt.zero:
        assert getattr(Settings.from_values({opt.attr: "0"}), opt.attr) == 0


def test_zero_is_refused_where_the_table_does_not_allow_it():
    for opt in BOUNDED:
        if (opt.low or 0) > 0 and not opt.zero:
            with pytest.raises(SettingsError, match=f"--{opt.flag} must be from"):
                Settings.from_values({opt.attr: "0"})


@pytest.mark.parametrize(("attr", "raw", "message"), [
    # The messages that were written out by hand before the table: the same words now.
    ("gc_interval", "30s", "--gc-interval must be 0 (off) or from 1m to 24h, got 30s"),
    ("gc_min_age", "-1s", "--gc-min-age must be at most 24h, got -1s"),
    ("probe_interval", "50ms", "--probe-interval must be from 100ms to 1h, got 50ms"),
    ("probe_failure_threshold", "0", "--probe-failure-threshold must be from 1 to 100, got 0"),
    ("max_leases_per_proxy", "10001", "--max-leases-per-proxy must be from 1 to 10000, got 10001"),
    ("api_max_connections", "15", "--api-max-connections must be from 16 to 1000000, got 15"),
    ("lease_grace", "500ms", "--lease-grace must be 0 (--lease-max-ttl) or from 1s to 24h, got 500ms"),
    ("lease_replica_wait", "6s", "--lease-replica-wait must be from 0 (never) to 5s, got 6s"),
    ("log_level", "loud", "--log-level must be debug, info, warning or error, got 'loud'"),
    ("log_format", "xml", "--log-format must be text or json, got 'xml'"),
    ("trace_health_probes", "maybe", "--trace-health-probes must be true or false, got 'maybe'"),
    ("insecure_no_auth", "perhaps", "--insecure-no-auth must be true or false, got 'perhaps'"),
    ("api_max_connections_per_client", "20000",
     "--api-max-connections-per-client must be from 1 to --api-max-connections (16384), got 20000"),
    ("kubeconfig", "a\nb", "--kubeconfig must be printable and at most 4096 characters"),
    ("installation", "Fleet", "--installation must be a DNS-1123 label"),
    ("api_bind_address", "nowhere", "--api-bind-address must be host:port, :port or 0"),
])
def test_messages(attr, raw, message):
    with pytest.raises(SettingsError) as err:
        Settings.from_values({attr: raw})
    assert message in str(err.value)


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("TRUE", True), ("1", True), ("yes", True),
                                            ("false", False), ("0", False), ("No", False)])
def test_booleans_are_parsed_once_into_real_booleans(raw, value):
    s = Settings.from_values({"trace_health_probes": raw, "insecure_no_auth": raw})
    assert s.trace_health_probes is value and s.insecure_no_auth is value
    assert (s.traces_probes, s.api_insecure) == (value, value)
    assert s.to_env()["FLEET_TRACE_HEALTH_PROBES"] == ("true" if value else "false")


def test_a_string_where_a_boolean_belongs_is_refused():
    # Before the table a Settings(insecure_no_auth="false") meant False at one reader and could mean True at
    # another (a non-empty string is truthy); validate() now refuses anything but a bool.
    with pytest.raises(SettingsError, match="--insecure-no-auth must be true or false, got 'false'"):
        Settings(insecure_no_auth="false").validate()  # type: ignore[arg-type]
    assert not Settings(insecure_no_auth="false").api_insecure  # type: ignore[arg-type]


# --- the CLI's help ------------------------------------------------------------------------


def test_the_help_of_each_flag_states_its_default_bounds_and_variable():
    validate = parser()._subparsers._group_actions[0].choices["validate"]  # every group: it validates them all
    actions = {a.dest: a for a in validate._actions if a.dest in {o.attr for o in OPTIONS}}
    assert set(actions) == {o.attr for o in OPTIONS}
    for o in OPTIONS:
        help_ = actions[o.attr].help or ""
        assert f"Default {o.default_text}" in help_ and help_.endswith(f"[{o.env}]"), (o.flag, help_)
        if o.bounds:
            assert o.bounds in help_, (o.flag, help_)
    assert actions["providers_config"].option_strings == ["--providers-config", "-c"]
    assert "Default 10m; 0 (off) or from 1m to 24h." in (actions["gc_interval"].help or "")


# --- the docs' settings page ------------------------------------------------------------------


def test_the_settings_page_lists_exactly_the_options_each_in_its_group():
    sections = _page_sections()
    assert list(sections) == list(GROUPS), "a section per group, in the table's order"
    flags = [f for text in sections.values() for f in re.findall(r"^\| `--([a-z-]+)`", text, re.M)]
    assert sorted(flags) == sorted(o.flag for o in OPTIONS), (
        sorted(set(o.flag for o in OPTIONS) - set(flags)), sorted(set(flags) - set(o.flag for o in OPTIONS)))
    for o in OPTIONS:
        row = next(line for line in sections[o.group].splitlines() if line.startswith(f"| `--{o.flag}`"))
        assert f"`{o.env}`" in row and o.help in row, row


def test_the_settings_page_is_freshly_generated():
    assert PAGE.read_text(encoding="utf-8") == generator().settings_page(), (
        "docs/reference/settings.md is stale: run python docs/generate.py")


def test_python_m_fleet_settings_prints_the_whole_table(capsys):
    assert module.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| group | flag |") and all(f"`--{o.flag}`" in out for o in OPTIONS)
