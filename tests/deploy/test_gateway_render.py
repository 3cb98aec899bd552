"""The gateway's optional listeners in `fleet render`: --gateway-socks-bind-address and --gateway-tls-bind-address
put their ports on the gateway's container and Service (`socks5`, `proxy-tls`) and nothing when not given; a port
already taken is refused. deploy/network admitting them is tests/deploy/test_overlay.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.cli import render
from fleet.cli import subcommands as cli
from fleet.config import load
from fleet.settings import Settings
from tests.deploy.conftest import by_kind, of_component, pod


def gateway(three_path, **settings: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The gateway's container and Service as `fleet render` writes them with these settings."""
    objs = of_component(render.render(load(str(three_path)), three_path.read_text(), settings=Settings(**settings)),
                        "gateway")
    (c,) = pod(by_kind(objs, "Deployment")[render.GATEWAY])["containers"]
    return c, by_kind(objs, "Service")[render.GATEWAY]


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in c["env"]}


@pytest.mark.parametrize("settings", [{}, {"gateway_socks_bind_address": ""}, {"gateway_socks_bind_address": "0"},
                                      {"gateway_tls_bind_address": "0"}])
def test_no_listener_but_the_proxy_unless_asked(three_path, settings):
    c, svc = gateway(three_path, **settings)
    assert c["ports"] == [{"name": "proxy", "containerPort": 8888}, {"name": "metrics", "containerPort": 8083}]
    assert svc["spec"]["ports"] == [{"name": "proxy", "port": 8888, "targetPort": "proxy"},
                                    {"name": "metrics", "port": 8083, "targetPort": "metrics"}]
    assert not {k for k in env(c) if k.startswith(("FLEET_GATEWAY_SOCKS", "FLEET_GATEWAY_TLS"))}


def test_the_socks5_listener_on_the_pods_and_the_service(three_path):
    c, svc = gateway(three_path, gateway_socks_bind_address=":1080")
    assert c["ports"] == [{"name": "proxy", "containerPort": 8888}, {"name": "socks5", "containerPort": 1080},
                          {"name": "metrics", "containerPort": 8083}]
    assert {"name": "socks5", "port": 1080, "targetPort": "socks5"} in svc["spec"]["ports"]
    assert env(c)["FLEET_GATEWAY_SOCKS_BIND_ADDRESS"] == ":1080"
    assert all(v["name"] != "tls" for v in c["volumeMounts"])  # SOCKS5 needs no certificate
    Settings(gateway_socks_bind_address=env(c)["FLEET_GATEWAY_SOCKS_BIND_ADDRESS"]).validate()


def test_both_listeners_each_under_its_name(three_path):
    c, svc = gateway(three_path, gateway_socks_bind_address="0.0.0.0:1080", gateway_tls_bind_address="127.0.0.1:8443")
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [
        ("proxy", 8888), (render.GATEWAY_SOCKS_PORT_NAME, 1080), (render.GATEWAY_TLS_PORT_NAME, 8443), ("metrics", 8083)]
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("proxy", 8888, "proxy"), ("socks5", 1080, "socks5"), ("proxy-tls", 8443, "proxy-tls"), ("metrics", 8083, "metrics")]
    # the pod's listeners take any address: the flags' host is theirs outside a cluster
    assert (env(c)["FLEET_GATEWAY_SOCKS_BIND_ADDRESS"], env(c)["FLEET_GATEWAY_TLS_BIND_ADDRESS"]) == (":1080", ":8443")


@pytest.mark.parametrize(("settings", "message"), [
    ({"gateway_socks_bind_address": ":8888"}, "--gateway-socks-bind-address: port 8888 is the gateway's proxy port"),
    ({"gateway_socks_bind_address": ":8083"}, "--gateway-socks-bind-address: port 8083 is the gateway's metrics port"),
    ({"gateway_socks_bind_address": ":1080", "gateway_tls_bind_address": ":1080"},
     "--gateway-tls-bind-address: port 1080 is the port of --gateway-socks-bind-address"),
    ({"gateway_socks_bind_address": "nope"}, "--gateway-socks-bind-address must be host:port"),
])
def test_a_port_taken_or_malformed_is_refused(three_path, settings, message):
    with pytest.raises(render.RenderError, match=message):
        gateway(three_path, **settings)


def test_the_flags_reach_fleet_render(three_path, capsys, monkeypatch):
    for var in ("FLEET_GATEWAY_SOCKS_BIND_ADDRESS", "FLEET_GATEWAY_TLS_BIND_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["render", "-c", str(three_path), "-o", "json", "--gateway-socks-bind-address", ":1080"]) == 0
    objs = json.loads(capsys.readouterr().out)
    assert {"name": "socks5", "port": 1080, "targetPort": "socks5"} in by_kind(objs, "Service")[render.GATEWAY]["spec"]["ports"]
    monkeypatch.setenv("FLEET_GATEWAY_SOCKS_BIND_ADDRESS", ":8888")
    assert cli.main(["render", "-c", str(three_path)]) == 2
    assert "port 8888" in capsys.readouterr().err
