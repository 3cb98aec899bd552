"""TLS interception through a real `fleet gateway`: its CA made by `fleet ca`, real Squids of the local provider with
distinct egress addresses, a real redis-server, and two HTTPS origins whose certificate (for 127.0.0.1 and 127.0.0.2)
the gateway trusts through --gateway-origin-ca-file. The origin on 127.0.0.1 bans one exit with 429 and another with
a 200 captcha page; the one on 127.0.0.2 bans nobody.

Real clients: a Scrapy crawl (HTTPS proxy from the environment, no fleet code) and a headless Chromium that trusts
fleet's CA through its NSS database (no `ignore_https_errors`) get every page with 200, none from a banned exit after
its ban, and the cooldowns are for the banning host only. A client without `intercept: true` gets a plain tunnel
(the origin's own certificate, by fingerprint); an origin the gateway cannot verify is a 502 with the reason; a CA key
others may read stops the gateway at start; a handshake that never comes is cut at the header timeout."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from fleet.store import keys
from fleet.testing.http import Quiet
from fleet.testing.tls import https_server, self_signed
from tests.integration.test_gateway import TOKEN, Lab, auth, exits_lab, read_head, wait_for
from tests.integration.test_scrapy import CONCURRENCY, crawl
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
SPY_TOKEN = "spy-token-0123456789abcdef"
BANNING, CALM = "127.0.0.1", "127.0.0.2"


class _Origin(Quiet):
    """A page per path; on BANNING, the exit in `bans` gets its ban (429, or a 200 captcha page). Records (server,
    exit, path, what it served) in arrival order."""

    protocol_version = "HTTP/1.1"
    bans: ClassVar[dict[str, str]] = {}  # exit address → "429" or "captcha"
    seen: ClassVar[list[tuple[str, str, str, str]]] = []
    connections: ClassVar[list[tuple[str, int]]] = []  # (path, the client's port): which connection carried it
    lock = threading.Lock()

    def do_GET(self) -> None:
        me, addr = self.server.server_address[0], self.client_address[0]
        ban = self.bans.get(addr, "") if me == BANNING else ""
        with self.lock:
            self.seen.append((me, addr, self.path, ban or "page"))
            self.connections.append((self.path, self.client_address[1]))
        if self.path.startswith("/hang-up"):  # closes the connection after answering, without saying so
            self.close_connection = True
        if ban == "429":
            self.reply(429, b"slow down\n", {"Retry-After": "60"})
        elif ban == "captcha":
            self.reply(200, b"<html><body>please solve this CAPTCHA</body></html>", {"Content-Type": "text/html"})
        else:
            self.reply(200, f"<html><body>page {self.path}</body></html>".encode(), {"Content-Type": "text/html"})
        if self.path.startswith("/hang-up-late"):  # the next request is on its way when the connection closes
            time.sleep(0.5)
            self.close_connection = True


class Site:
    def __init__(self, lab: Lab, egress: dict[str, str], ca: Path, origin_cert: Path, urls: dict[str, str]) -> None:
        self.lab, self.egress, self.ca, self.origin_cert, self.urls = lab, egress, ca, origin_cert, urls

    def gateway(self, name: str = "gw", **env: str):
        env = {"FLEET_GATEWAY_CA_DIR": str(self.ca), "FLEET_GATEWAY_ORIGIN_CA_FILE": str(self.origin_cert),
               "FLEET_GATEWAY_BAN_PATTERN": "(?i)captcha", "FLEET_MAX_LEASES_PER_PROXY": "16", **env}
        return self.lab.gateway(name, **env)

    def after_ban(self, host: str) -> dict[str, list[str]]:
        """Per banned exit: what `host` served it after it served that exit its first ban."""
        with _Origin.lock:
            seen = list(_Origin.seen)
        out: dict[str, list[str]] = {}
        for addr in _Origin.bans:
            first = next((i for i, (me, a, _, what) in enumerate(seen) if a == addr and what != "page"), None)
            if first is not None:
                out[addr] = [what for me, a, _, what in seen[first + 1:] if me == host and a == addr]
        return out

    def cooling(self) -> set[str]:
        return {m.decode() for m in self.lab.r.zrange(keys.LEASE_COOL_TARGET, 0, -1)}


@pytest.fixture
def site(tmp_path, redis_server, make_provider, port_window):  # noqa: F811
    lab = exits_lab(tmp_path, redis_server, make_provider, port_window, "crawl/a", "crawl/b", "crawl/c")
    egress = lab.egress()
    doc = json.loads(lab.clients.read_text())
    doc["clients"]["spy"] = {"token": SPY_TOKEN, "ports": "*", "intercept": True}
    lab.clients.write_text(json.dumps(doc))
    made = subprocess.run([sys.executable, "-m", "fleet.cli", "ca", "--gateway-ca-dir", str(tmp_path / "ca")],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and made.stdout.startswith("-----BEGIN CERTIFICATE-----"), made.stderr
    assert "PRIVATE KEY" not in made.stdout + made.stderr
    assert (tmp_path / "ca" / "ca.crt").read_text() == made.stdout
    origin_dir = tmp_path / "origin"
    origin_dir.mkdir()
    cert = self_signed(origin_dir, BANNING, CALM)
    _Origin.bans = {egress["crawl/a"]: "429", egress["crawl/b"]: "captcha"}
    _Origin.seen, _Origin.connections = [], []
    with contextlib.ExitStack() as stack:
        urls = {host: stack.enter_context(https_server(_Origin, origin_dir, f"origin-{host}", host, cert)).url
                for host in (BANNING, CALM)}
        yield Site(lab, egress, tmp_path / "ca", cert[0], urls)
        for gw in lab.gateways:
            gw.stop()
        for gw in lab.gateways:
            assert "Traceback" not in gw.log(), gw.log()[-3000:]
            assert "PRIVATE KEY" not in gw.log()


SPIDER = '''
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    start_urls = {urls!r}

    def parse(self, response):
        yield {{"url": response.url, "status": response.status, "body": response.text,
                "proxy": response.headers.get("X-Fleet-Proxy", b"").decode()}}
'''


def test_an_intercepted_scrapy_crawl_gets_every_page_and_no_banned_exit_is_used_after_its_ban(site, tmp_path,
                                                                                              monkeypatch):
    gw = site.gateway()
    urls = [f"{site.urls[BANNING]}/a/{n}" for n in range(20)] + [f"{site.urls[CALM]}/b/{n}" for n in range(20)]
    # Scrapy's own HttpProxyMiddleware, the proxy from the environment: no fleet code in the crawler
    for var in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("https_proxy", f"http://spy:{SPY_TOKEN}@127.0.0.1:{gw.port}")
    _, items = crawl(tmp_path, SPIDER.format(urls=urls), "FleetMiddleware", DOWNLOADER_MIDDLEWARES="{}")
    assert sorted(i["url"] for i in items) == sorted(urls)
    assert all(i["status"] == 200 and "page /" in i["body"] for i in items), [i for i in items if i["status"] != 200]
    banned = {site.egress["crawl/a"], site.egress["crawl/b"]}
    # both bans were met (the gateway retried elsewhere), and after its ban the banning host saw no page leave by
    # it: at most the requests already in flight then, each banned again (and retried elsewhere)
    after = site.after_ban(BANNING)
    assert set(after) == banned, _Origin.seen
    assert all(len(seen) < CONCURRENCY and "page" not in seen for seen in after.values()), after
    # the cooldowns are for the banning host only: the calm one still served pages to the banned exits
    assert {a for me, a, _, _ in _Origin.seen if me == CALM} & banned, _Origin.seen
    assert site.cooling() == {f"crawl/a|{BANNING}", f"crawl/b|{BANNING}"}
    assert {i["proxy"] for i in items if BANNING in i["url"]} == {"crawl/c"}
    metrics = gw.metrics()
    assert 'kind="https",outcome="ok"' in metrics and 'kind="connect",outcome="intercepted"' in metrics


async def _chromium(home: Path, gateway_port: int, urls: list[str]) -> list[tuple[int, str]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, env={**os.environ, "HOME": str(home)},
                                           args=["--proxy-bypass-list=<-loopback>"])
        try:
            context = await browser.new_context(proxy={"server": f"http://127.0.0.1:{gateway_port}",
                                                       "username": "spy-session-tab", "password": SPY_TOKEN,
                                                       "bypass": "<-loopback>"})
            pages = [await context.new_page() for _ in urls]
            answers = await asyncio.gather(*(p.goto(u, wait_until="load", timeout=60_000)
                                             for p, u in zip(pages, urls, strict=True)))
            return [(a.status, await p.content()) for a, p in zip(answers, pages, strict=True)]
        finally:
            await browser.close()


def test_chromium_trusting_fleets_ca_gets_every_page_with_200_and_no_banned_exit_after_its_ban(site, tmp_path):
    if not shutil.which(CHROMIUM) or not shutil.which("certutil"):
        pytest.fail("chromium and certutil are not installed: run `make test`, which installs chromium and "
                    "libnss3-tools")
    gw = site.gateway(FLEET_GATEWAY_SESSION_TTL="1s")
    home = tmp_path / "home"
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    # how a user makes Chromium on Linux trust fleet's CA (docs/gateway.md, "Bans and HTTPS")
    subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, timeout=30)
    subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "fleet", "-i",
                    str(site.ca / "ca.crt")], check=True, timeout=30)
    urls = [f"{site.urls[BANNING]}/tab/{n}" for n in range(6)] + [f"{site.urls[CALM]}/tab/{n}" for n in range(3)]
    got = asyncio.run(_chromium(home, gw.port, urls))
    assert [status for status, _ in got] == [200] * len(urls)
    assert all("page /tab/" in html and "CAPTCHA" not in html for _, html in got), got
    after = site.after_ban(BANNING)  # at most the tabs' requests in flight at the ban, each banned again
    assert all(len(seen) < len(urls) and "page" not in seen for seen in after.values()), after
    assert site.cooling() <= {f"crawl/a|{BANNING}", f"crawl/b|{BANNING}"}


def _peer_certificate(gw_port: int, user: str, token: str, target: str, cafile: Path | None = None) -> bytes:
    """The DER certificate a client is shown inside `CONNECT target` (verified against `cafile` when given)."""
    sock = socket.create_connection(("127.0.0.1", gw_port), 20)
    with contextlib.closing(sock):
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth(user, token)}"
                     f"\r\n\r\n".encode())
        status, _, _ = read_head(sock)
        assert status == 200
        ctx = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        if cafile is None:  # the plain tunnel: the origin's self-signed certificate, read, not trusted
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with ctx.wrap_socket(sock, server_hostname=target.rsplit(":", 1)[0]) as tls:
            der = tls.getpeercert(binary_form=True)
            assert tls.selected_alpn_protocol() in (None, "http/1.1")
            return der or b""


def test_only_a_client_that_asked_is_intercepted_and_the_origin_is_verified(site, tmp_path):
    gw = site.gateway()
    target = site.urls[BANNING].removeprefix("https://")
    origin_der = ssl.PEM_cert_to_DER_cert(site.origin_cert.read_text())
    # acme never asked: a plain tunnel, the origin's own certificate end to end
    plain = _peer_certificate(gw.port, "acme", TOKEN, target)
    assert hashlib.sha256(plain).hexdigest() == hashlib.sha256(origin_der).hexdigest()
    # spy asked: a leaf of fleet's CA for that host, which verifies against the CA alone
    leaf = _peer_certificate(gw.port, "spy", SPY_TOKEN, target, cafile=site.ca / "ca.crt")
    assert leaf != plain

    # curl, trusting fleet's CA, through the intercepting gateway
    run = subprocess.run(["curl", "-sS", "--cacert", str(site.ca / "ca.crt"), "-x", f"http://127.0.0.1:{gw.port}",
                          "-U", f"spy:{SPY_TOKEN}", "-D", "-", f"{site.urls[CALM]}/curl"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "page /curl" in run.stdout and "x-fleet-proxy: crawl/" in run.stdout.lower(), run

    # a gateway that does not trust the origin's (self-signed) certificate: 502 with the reason, no proxy blamed
    strict = site.gateway("strict", FLEET_GATEWAY_ORIGIN_CA_FILE="")
    run = subprocess.run(["curl", "-sS", "--cacert", str(site.ca / "ca.crt"), "-x", f"http://127.0.0.1:{strict.port}",
                          "-U", f"spy:{SPY_TOKEN}", "-D", "-", f"{site.urls[CALM]}/strict"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "\nHTTP/1.1 502 Bad Gateway" in run.stdout, run  # after the CONNECT's 200
    assert "x-fleet-reason: untrusted-origin" in run.stdout.lower() and "certificate" in run.stdout, run.stdout
    assert not any(p == "/strict" for _, _, p, _ in _Origin.seen)  # no request reached it
    assert site.cooling() == set()


def test_hostile_handshakes_and_a_loose_ca_key(site, tmp_path):
    gw = site.gateway(FLEET_GATEWAY_HEADER_TIMEOUT="1s")
    target = site.urls[CALM].removeprefix("https://")

    def connected(user: str = "spy", token: str = SPY_TOKEN) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", gw.port), 20)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth(user, token)}\r\n\r\n".encode())
        status, _, rest = read_head(sock)
        assert status == 200 and rest == b""
        return sock

    # a handshake that never comes: cut at the header timeout
    silent = connected()
    started = time.monotonic()
    assert silent.recv(100) == b""
    assert time.monotonic() - started < 5
    silent.close()
    # a client that does not trust fleet's CA, and one whose hello names another host: refused, nothing served
    for name, ctx in ((CALM, ssl.create_default_context()),
                      ("other.example", ssl.create_default_context(cafile=str(site.ca / "ca.crt")))):
        sock = connected()
        with pytest.raises(ssl.SSLError), contextlib.closing(sock):
            ctx.wrap_socket(sock, server_hostname=name).close()
    # the gateway serves on
    assert _peer_certificate(gw.port, "spy", SPY_TOKEN, target, cafile=site.ca / "ca.crt")
    assert 'outcome="tls_handshake"' in gw.metrics()

    # a CA key others may read: the gateway does not start
    (site.ca / "ca.key").chmod(0o644)
    run = subprocess.run([sys.executable, "-m", "fleet.cli", "gateway"], env=gw.env, capture_output=True, text=True,
                         timeout=60)  # refused before it would listen (on gw's port, which is taken)
    assert run.returncode == 2 and "readable by others (mode 0644)" in run.stderr, run.stderr
    assert "PRIVATE KEY" not in run.stderr


def test_an_intercepted_connection_keeps_its_upstream_until_the_origin_closes_it(site):
    import requests

    gw = site.gateway(FLEET_GATEWAY_IDLE_TIMEOUT="2s")
    proxies = {"https": f"http://spy:{SPY_TOKEN}@127.0.0.1:{gw.port}"}
    ca = str(site.ca / "ca.crt")  # per request: requests lets REQUESTS_CA_BUNDLE win over a Session's verify
    with requests.Session() as http:
        got = [http.get(f"{site.urls[CALM]}/keep/{n}", proxies=proxies, verify=ca, timeout=20) for n in range(5)]
        assert [r.status_code for r in got] == [200] * 5 and len({r.headers["X-Fleet-Proxy"] for r in got}) == 1
        # the origin saw one connection for all five: one lease, one tunnel, one TLS handshake upstream
        assert len({port for path, port in _Origin.connections if path.startswith("/keep/")}) == 1
        # the origin hangs up after a request without saying so: the next request finds a fresh upstream, and
        # no proxy is blamed for the closed one
        assert http.get(f"{site.urls[CALM]}/hang-up", proxies=proxies, verify=ca, timeout=20).status_code == 200
        time.sleep(0.2)
        assert http.get(f"{site.urls[CALM]}/after", proxies=proxies, verify=ca, timeout=20).status_code == 200
        # and when it hangs up as the next request arrives, that request is sent again on a fresh upstream
        assert http.get(f"{site.urls[CALM]}/hang-up-late", proxies=proxies, verify=ca, timeout=20).status_code == 200
        assert http.get(f"{site.urls[CALM]}/last", proxies=proxies, verify=ca, timeout=20).status_code == 200
    ports = dict(_Origin.connections)
    assert ports["/after"] != ports["/hang-up"] and ports["/last"] != ports["/hang-up-late"]
    assert site.lab.r.hlen(keys.LEASE_ERRORS) == 0 and site.cooling() == set()
    # the kept lease ends with the crawler's connection (here closed by the gateway's idle timeout: requests keeps
    # its pooled connection open)
    wait_for(lambda: site.lab.loads() and max(site.lab.loads().values()) == 0, 10, "the kept lease released")
