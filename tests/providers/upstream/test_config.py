"""The `upstream:` block: both modes, strict validation naming the field
(never a credential), the placement hook, ids, and `fleet validate`."""

from __future__ import annotations

import pytest
import yaml

from fleet import cli
from fleet import config as fleet_config
from providers import registry
from providers.base import Placement
from providers.upstream import ids
from providers.upstream.config import Endpoint, UpstreamConfig, parse_list, parse_url, render_username

VENDOR = {"mode": "vendor", "endpoint": "http://gate.vendor.example:7777",
          "usernameTemplate": "{user}-session-{session}-country-{country}",
          "usernameFile": "/etc/fleet/vendor/username", "passwordFile": "/etc/fleet/vendor/password"}
LIST = {"mode": "list", "proxies": ["http://203.0.113.7:8080", "socks5://[2001:db8::1]:1080", "socks5://px.example.net"]}


def providers_file(block: dict) -> dict:
    return {"providers": [{"name": "up", "type": "upstream", "upstream": block}]}


def test_both_modes_load_through_the_providers_file():
    cfg = fleet_config.parse(providers_file(LIST)).get("up").block
    assert registry.config_model("upstream") is UpstreamConfig
    assert cfg.proxies == ["http://203.0.113.7:8080", "socks5://[2001:db8::1]:1080", "socks5://px.example.net:1080"]
    v = fleet_config.parse(providers_file(VENDOR)).get("up").block
    assert v.vendor_endpoint() == Endpoint("http", "gate.vendor.example", 7777)
    assert v.placementFields == {"region": "country", "zone": "city"}
    assert v.runtime().files == ("/etc/fleet/vendor/username", "/etc/fleet/vendor/password")


SECRET = "hunter2-SENTINEL"


@pytest.mark.parametrize(
    ("block", "path", "says"),
    [
        ({**LIST, "proxies": [f"http://bob:{SECRET}@203.0.113.7:8080"]}, "proxies", "never stand in the providers file"),
        ({**VENDOR, "endpoint": f"http://bob:{SECRET}@gate.vendor.example:7777"}, "endpoint", "never stand in the providers file"),
        ({**LIST, "proxies": ["https://203.0.113.7:8080"]}, "proxies", "http:// or socks5://"),
        ({**LIST, "proxies": ["http://203.0.113.7:70000"]}, "proxies", "1 to 65535"),
        ({**LIST, "proxies": ["http://203.0.113.7:8080/path"]}, "proxies", "no path"),
        ({**LIST, "proxies": ["http://a b:8080"]}, "proxies", "not a host name"),
        ({**LIST, "proxies": ["http://1.2.3.4:8080", "http://1.2.3.4:8080/"]}, "proxies", "listed twice"),
        ({"mode": "list"}, "upstream", "needs proxies or listFile"),
        ({**LIST, "listFile": "relative"}, "listFile", "absolute"),
        ({**LIST, "usernameFile": "/a/u"}, "upstream", "together"),
        ({**LIST, "endpoint": "http://x:1"}, "upstream", "endpoint is for mode vendor"),
        ({**VENDOR, "proxies": ["http://x:1"]}, "upstream", "proxies is for mode list"),
        ({**VENDOR, "usernameTemplate": "{user}"}, "usernameTemplate", "{session}"),
        ({**VENDOR, "usernameTemplate": "{user}-{session}-{planet}"}, "usernameTemplate", "unknown placeholder {planet}"),
        ({**VENDOR, "usernameTemplate": "{user}:{session}"}, "usernameTemplate", "other than ':'"),
        ({**VENDOR, "usernameTemplate": "{session}-{session}"}, "usernameTemplate", "twice"),
        ({k: v for k, v in VENDOR.items() if k != "usernameFile" and k != "passwordFile"}, "upstream", "usernameFile"),
        ({**VENDOR, "placementFields": {"image": "city"}}, "placementFields", "region, zone"),
        ({**VENDOR, "placementFields": {"region": "country", "zone": "country"}}, "placementFields", "same placeholder"),
        ({**VENDOR, "checkPlacement": {"city": "berlin"}}, "upstream", "usernameTemplate has no {city}"),
        ({**VENDOR, "checkPlacement": {"country": "u s"}}, "checkPlacement", "letters, digits"),
        ({**VENDOR, "checkURL": "example.com"}, "checkURL", "host:port"),
        ({**VENDOR, "mode": "cloud"}, "mode", ""),
        ({**VENDOR, "sessions": 3}, "sessions", "unknown key"),
    ],
)
def test_errors_name_the_field_and_never_a_secret(block, path, says):
    with pytest.raises(fleet_config.ConfigError) as err:
        fleet_config.parse(providers_file(block))
    text = str(err.value)
    assert "providers[0].upstream" in text and path in text and says in text, text
    assert SECRET not in text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("http://203.0.113.7:8080", ("http", "203.0.113.7", 8080)),
        ("HTTP://Proxy.Example.NET:3128/", ("http", "proxy.example.net", 3128)),
        ("socks5://[2001:DB8::1]:1080", ("socks5", "2001:db8::1", 1080)),
        ("socks5://203.0.113.9", ("socks5", "203.0.113.9", 1080)),
        ("http://203.0.113.9", ("http", "203.0.113.9", 8080)),
    ],
)
def test_urls(text, want):
    e = parse_url(text, credentials=False).endpoint
    assert (e.scheme, e.host, e.port) == want


def test_a_list_file_may_carry_credentials_and_hides_them():
    entries = parse_list(f"# bought 2024\n\nhttp://bob:{SECRET}@203.0.113.7:8080\nsocks5://203.0.113.8:1080\n")
    assert [(e.endpoint.url, e.username, e.password) for e in entries] == [
        ("http://203.0.113.7:8080", "bob", SECRET), ("socks5://203.0.113.8:1080", "", "")]
    assert SECRET not in repr(entries)
    with pytest.raises(ValueError, match="line 2") as err:
        parse_list(f"http://1.2.3.4:1\nftp://bob:{SECRET}@x:1\n")
    assert SECRET not in str(err.value)


def test_username_templates_of_common_vendor_styles():
    vals = {"user": "acme", "session": "k3x9a8b7c6d5e4f3", "country": "us", "city": "berlin"}
    assert render_username("{user}-session-{session}-country-{country}", vals) == "acme-session-k3x9a8b7c6d5e4f3-country-us"
    assert render_username("{user}_country-{country}_city-{city}_session-{session}", vals) == \
        "acme_country-us_city-berlin_session-k3x9a8b7c6d5e4f3"
    assert render_username("customer-{user}-cc-{country}-sessid-{session}", vals) == "customer-acme-cc-us-sessid-k3x9a8b7c6d5e4f3"
    assert render_username("{user}-{session}", {"user": "{session}", "session": "x"}) == "{session}-x"  # values are not re-read


@pytest.mark.parametrize(
    ("block", "placement", "problem"),
    [
        (LIST, Placement(), None),
        (LIST, Placement(region="us"), "list member has no placement"),
        (VENDOR, Placement(region="us"), None),
        (VENDOR, Placement(), "usernameTemplate holds {country}: give placement.region"),
        (VENDOR, Placement(region="us", zone="berlin"), "placement.zone 'berlin' fills {city}, which usernameTemplate lacks"),
        (VENDOR, Placement(region="us", machine_type="big"), "placement.machineType"),
        (VENDOR, Placement(region="u/s"), "letters, digits"),
        ({**VENDOR, "usernameTemplate": "{user}-s-{session}"}, Placement(region="us"), "fills {country}, which usernameTemplate lacks"),
        ({**VENDOR, "usernameTemplate": "{user}-{session}-r-{region}", "placementFields": {"zone": "region"}},
         Placement(zone="california"), None),
        ({**VENDOR, "placementFields": {}}, Placement(region="us"), "maps only none"),
    ],
)
def test_placement_hook(block, placement, problem):
    got = registry.placement_problem("upstream", UpstreamConfig.model_validate(block), placement)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got


@pytest.mark.parametrize(
    "pid",
    ["http://203.0.113.7:8080", "socks5://[2001:db8::1]:1080", "http://gate.vendor.example:7777/sessions/k3x9a8b7c6d5e4f3",
     "http://gate.vendor.example:7777/sessions/k3x9a8b7c6d5e4f3?country=us&city=berlin"],
)
def test_ids_round_trip(pid):
    assert ids.parse(pid).id == pid


@pytest.mark.parametrize(
    "pid",
    ["", "http://203.0.113.7", "http://203.0.113.7:8080/", "http://u:p@203.0.113.7:8080", "HTTP://203.0.113.7:8080",
     "http://gate:1/sessions/abc", "http://gate:1/sessions/abcdefgh?city=b&country=us", "http://gate:1/sessions/abcdefgh?country=us&country=de",
     "http://gate:1/sessions/abcdefgh?country=a/b"],
)
def test_malformed_ids(pid):
    with pytest.raises(ids.MalformedId):
        ids.parse(pid)


def test_fleet_validate_accepts_a_good_block_and_explains_a_bad_one(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(providers_file(VENDOR)))
    assert cli.main(["validate", "-c", str(good)]) == 0
    assert "types upstream" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(providers_file({**LIST, "proxies": [f"http://bob:{SECRET}@203.0.113.7:8080"]})))
    assert cli.main(["validate", "-c", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "providers[0].upstream.proxies" in err and "usernameFile/passwordFile" in err and SECRET not in err
