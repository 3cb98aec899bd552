"""fleet_crawler.Gateway: every username it builds reads back, through the gateway's own parser, as the options
it was given; what the gateway would misread is refused; and requests, httpx and aiohttp, given its settings,
send the gateway those credentials (a loopback forward proxy records what arrives)."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

import aiohttp
import httpx
import pytest
import requests

from fleet.gateway.decide import Options, parse_basic, parse_username
from fleet.testing.http import LoopbackServer, Quiet
from fleet_crawler import Gateway, username

TOKEN = "t0ken:with/odd@chars"


@pytest.mark.parametrize("options", [
    {},
    {"session": "s1"},
    {"session": "site.example_1-a"},
    {"session": "s1", "sesstime": 10},
    {"session": "s1", "pool": "crawl-eu"},
    {"pool": "residential", "provider": "hetzner", "region": "fsn1"},
    {"region": "us-east-1", "zone": "us-east-1a"},
    {"session": "a-b-c", "sesstime": 1440, "pool": "p", "provider": "aws", "region": "eu-west-1", "zone": "eu-west-1b"},
    {"zone": "session-x"},  # no keyword can follow zone: any value reads back
    {"session": "x-session-y"},  # session may not follow session
])
def test_a_username_reads_back_as_its_options_in_the_gateways_parser(options):
    got = parse_username(username("acme", **options))
    assert got == Options("acme", **{k: str(v) for k, v in options.items()})


@pytest.mark.parametrize(("client", "options", "match"), [
    ("ac-me", {}, "client must be"),
    ("", {}, "client must be"),
    ("acme", {"session": "a-zone-b"}, "would read it as that option"),
    ("acme", {"session": "a-pool-b", "pool": "p"}, "would read it as that option"),
    ("acme", {"region": "r-zone-z"}, "would read it as that option"),
    ("acme", {"session": "a b"}, "is not one the gateway takes"),
    ("acme", {"session": "x" * 65}, "is not one the gateway takes"),
    ("acme", {"pool": "Upper"}, "is not one the gateway takes"),
    ("acme", {"sesstime": 0}, "sesstime must be"),
    ("acme", {"sesstime": 1441}, "sesstime must be"),
])
def test_what_the_gateway_would_refuse_or_misread_is_refused_here(client, options, match):
    with pytest.raises(ValueError, match=match):
        username(client, **options)


@pytest.mark.parametrize("url", ["https://gw:8888", "gw:8888", "http://u:p@gw:8888", "http://gw:8888/x"])
def test_the_gateway_url_is_plain_http_host_port(url):
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        Gateway(url, client="acme", token=TOKEN)


def test_each_librarys_settings():
    gw = Gateway("http://127.0.0.1:8888", client="acme", token=TOKEN)
    url = "http://acme-session-s1-pool-eu:t0ken%3Awith%2Fodd%40chars@127.0.0.1:8888"
    assert gw.proxy_url(session="s1", pool="eu") == url == gw.httpx(session="s1", pool="eu")
    assert gw.requests(session="s1", pool="eu") == {"http": url, "https": url}
    assert gw.playwright(session="s1") == {"server": "http://127.0.0.1:8888", "username": "acme-session-s1",
                                           "password": TOKEN}
    assert gw.aiohttp(session="s1", pool="eu") == {"proxy": url}
    assert Gateway.ban_report_url("shop.example") == "http://fleet.gateway/v1/bans?host=shop.example"
    assert Gateway.ban_report_url("a.example", "crawl/p-3").endswith("?host=a.example&proxy=crawl%2Fp-3")


class _Recorder(Quiet):
    """A forward proxy that keeps each request's credentials: it answers plain requests itself and refuses
    every CONNECT (407; what arrived is what counts)."""

    seen: ClassVar[list[tuple[str, str, Options, str]]] = []  # (method, the request line's target, options, password)
    lock = threading.Lock()

    def _keep(self) -> None:
        user, password = parse_basic(self.headers.get("Proxy-Authorization", "").encode())
        with self.lock:
            self.seen.append((self.command, self.path, parse_username(user), password))

    def do_GET(self) -> None:
        self._keep()
        self.reply(200, b"through the proxy\n")

    def do_CONNECT(self) -> None:
        self._keep()
        self.reply(407, b"")


@pytest.fixture
def recorder():
    _Recorder.seen = []
    with LoopbackServer(_Recorder, "recording-proxy") as server:
        yield server


def test_requests_httpx_and_aiohttp_send_the_gateway_its_credentials_for_http_and_https(recorder):
    gw = Gateway(recorder.url, client="acme", token=TOKEN)
    for url in ("http://origin.example/page", "https://origin.example/page"):
        try:
            requests.get(url, proxies=gw.requests(session="r1"), timeout=10)
        except requests.exceptions.ProxyError:
            assert url.startswith("https")
        with httpx.Client(proxy=gw.httpx(session="h1", region="eu-central-1"), trust_env=False) as client:
            try:
                client.get(url, timeout=10)
            except httpx.ProxyError:
                assert url.startswith("https")

        async def fetch(url: str = url) -> None:
            async with aiohttp.ClientSession(trust_env=False) as session:
                try:
                    async with session.get(url, **gw.aiohttp(session="a1")) as resp:
                        await resp.read()
                except aiohttp.ClientHttpProxyError:
                    assert url.startswith("https")

        asyncio.run(fetch())
    plain, tunnel = "http://origin.example/page", "origin.example:443"
    assert _Recorder.seen == [
        ("GET", plain, Options("acme", session="r1"), TOKEN),
        ("GET", plain, Options("acme", session="h1", region="eu-central-1"), TOKEN),
        ("GET", plain, Options("acme", session="a1"), TOKEN),
        ("CONNECT", tunnel, Options("acme", session="r1"), TOKEN),
        ("CONNECT", tunnel, Options("acme", session="h1", region="eu-central-1"), TOKEN),
        ("CONNECT", tunnel, Options("acme", session="a1"), TOKEN),
    ]
