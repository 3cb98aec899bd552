"""The gateway's TLS listener (`--gateway-tls-bind-address`) on real processes: a real `fleet gateway`, a real
Squid of the local provider, a real redis-server, a plain-HTTP and an HTTPS origin on loopback, and a certificate
for 127.0.0.1 signed by a CA made here.

Real clients with an https:// proxy URL and the CA as their proxy CA — curl (`--proxy-cacert`), requests (urllib3's
`proxy_ssl_context`), httpx (`httpx.Proxy(ssl_context=...)`), headless Chromium trusting the CA through its NSS
database — get a plain-HTTP page and an HTTPS page through a tunnel, and an intercepting client's TLS inside the
proxy's TLS. A client that speaks no TLS is cut at the header timeout while others are served; new certificate files
serve new connections (by fingerprint) while an open tunnel keeps working, and a broken new pair is logged once and
the last good one kept; a key others may read, a missing one and a certificate of another key stop it at start."""

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
import time
from pathlib import Path

import pytest

from fleet.testing.http import Quiet
from fleet.testing.procs import wait_for
from fleet.testing.tls import https_server, issue, make_ca, self_signed
from tests.integration.test_gateway import TOKEN, auth, lab, origin, read_head  # noqa: F401
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
SPY_TOKEN = "spy-token-0123456789abcdef"


class _Page(Quiet):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.reply(200, f"<html><body>secure page {self.path}</body></html>".encode(), {"Content-Type": "text/html"})


class Tls:
    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "tls"
        self.dir.mkdir()
        self.ca = make_ca(self.dir)
        self.ca_file = self.ca[0]
        self.cert, self.key = self.dir / "tls.crt", self.dir / "tls.key"
        self.fingerprint = issue(self.ca, self.cert, self.key)
        self.port = 0

    def env(self, port: int) -> dict[str, str]:
        return {"FLEET_GATEWAY_TLS_BIND_ADDRESS": f"127.0.0.1:{port}", "FLEET_GATEWAY_TLS_CERT_FILE": str(self.cert),
                "FLEET_GATEWAY_TLS_KEY_FILE": str(self.key)}


@pytest.fixture
def tls(tmp_path, lab):  # noqa: F811
    lab.squid("crawl/a")
    return Tls(tmp_path)


@pytest.fixture
def secure_origin(tmp_path):
    directory = tmp_path / "origin"
    directory.mkdir()
    cert = self_signed(directory)
    with https_server(_Page, directory, certificate=cert) as server:
        server.cert = cert[0]
        yield server


def gateway(lab, tls: Tls, **env: str):  # noqa: F811
    from fleet.testing.procs import free_port

    tls.port = free_port()
    gw = lab.gateway(**tls.env(tls.port), **env)
    wait_for(lambda: _listens(tls.port), 20, "the TLS listener")
    return gw


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


def curl(tls: Tls, *args: str, user: str = "acme", token: str = TOKEN) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "-m", "30", "--proxy", f"https://{user}:{token}@127.0.0.1:{tls.port}",
                           "--proxy-cacert", str(tls.ca_file), *args], capture_output=True, text=True, timeout=40)


def tunnel(tls: Tls, target: str) -> ssl.SSLSocket:
    """A CONNECT tunnel to `target` over the TLS listener, verified against the CA."""
    ctx = ssl.create_default_context(cafile=str(tls.ca_file))
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls.port), 20), server_hostname="127.0.0.1")
    assert sock.selected_alpn_protocol() in (None, "http/1.1")
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth()}\r\n\r\n".encode())
    status, _, rest = read_head(sock)
    assert status == 200 and rest == b""
    return sock


def get_plain(sock: ssl.SSLSocket, host: str, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    status, headers, rest = read_head(sock)
    assert status == 200
    n = int(headers["content-length"])
    while len(rest) < n:
        rest += sock.recv(65536)
    return rest


def served_fingerprint(tls: Tls) -> str:
    ctx = ssl.create_default_context(cafile=str(tls.ca_file))
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls.port), 20), server_hostname="127.0.0.1") as s:
        return hashlib.sha256(s.getpeercert(binary_form=True) or b"").hexdigest()


def test_curl_requests_and_httpx_with_an_https_proxy_url_get_plain_and_tunnelled_pages(lab, tls, origin,  # noqa: F811
                                                                                       secure_origin, tmp_path):
    import httpx
    import requests
    import requests.adapters

    # spy asks for interception: its TLS to the "origin" is ended by the gateway inside the TLS to the gateway
    fleet_ca = tmp_path / "fleet-ca"
    made = subprocess.run([sys.executable, "-m", "fleet.cli", "ca", "--gateway-ca-dir", str(fleet_ca)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    doc = json.loads(lab.clients.read_text())
    doc["clients"]["spy"] = {"token": SPY_TOKEN, "ports": "*", "intercept": True}
    lab.clients.write_text(json.dumps(doc))
    gw = gateway(lab, tls, FLEET_GATEWAY_CA_DIR=str(fleet_ca), FLEET_GATEWAY_ORIGIN_CA_FILE=str(secure_origin.cert),
                 FLEET_MAX_LEASES_PER_PROXY="16")  # the clients keep their connections (and tunnels) open

    run = curl(tls, "-D", "-", f"{origin.url}/curl-plain")
    assert run.returncode == 0 and "x-fleet-proxy: crawl/a" in run.stdout.lower(), run
    run = curl(tls, "--cacert", str(secure_origin.cert), f"{secure_origin.url}/curl-tunnel")
    assert run.returncode == 0 and "secure page /curl-tunnel" in run.stdout, run
    run = curl(tls, "--cacert", str(fleet_ca / "ca.crt"), "-D", "-", f"{secure_origin.url}/curl-intercepted",
               user="spy", token=SPY_TOKEN)
    assert run.returncode == 0 and "secure page /curl-intercepted" in run.stdout, run
    assert "x-fleet-proxy: crawl/a" in run.stdout.lower(), run.stdout  # the gateway's answer inside: intercepted
    # without the proxy's CA, curl refuses the proxy: the token is never sent to an unverified gateway
    bare = subprocess.run(["curl", "-sS", "-m", "20", "--proxy", f"https://acme:{TOKEN}@127.0.0.1:{tls.port}",
                           f"{origin.url}/unverified"], capture_output=True, text=True, timeout=30)
    assert bare.returncode != 0 and "certificate" in bare.stderr.lower(), bare

    class ProxyCA(requests.adapters.HTTPAdapter):
        """urllib3's proxy_ssl_context: the CA the HTTPS proxy's certificate is verified against."""

        def proxy_manager_for(self, proxy, **kwargs):
            return super().proxy_manager_for(proxy, proxy_ssl_context=ssl.create_default_context(
                cafile=str(tls.ca_file)), **kwargs)

    proxy_url = f"https://acme:{TOKEN}@127.0.0.1:{tls.port}"
    with requests.Session() as http:
        http.mount("http://", ProxyCA())
        http.mount("https://", ProxyCA())
        http.trust_env = False
        proxies = {"http": proxy_url, "https": proxy_url}
        got = http.get(f"{origin.url}/requests-plain", proxies=proxies, timeout=20)
        assert got.status_code == 200 and got.headers["X-Fleet-Proxy"] == "crawl/a"
        got = http.get(f"{secure_origin.url}/requests-tunnel", proxies=proxies, verify=str(secure_origin.cert),
                       timeout=20)
        assert got.status_code == 200 and "secure page /requests-tunnel" in got.text

    proxy = httpx.Proxy(f"https://127.0.0.1:{tls.port}", auth=("acme", TOKEN),
                        ssl_context=ssl.create_default_context(cafile=str(tls.ca_file)))
    with httpx.Client(proxy=proxy, verify=ssl.create_default_context(cafile=str(secure_origin.cert)),
                      trust_env=False) as client:
        got = client.get(f"{origin.url}/httpx-plain", timeout=20)
        assert got.status_code == 200 and got.headers["X-Fleet-Proxy"] == "crawl/a"
        got = client.get(f"{secure_origin.url}/httpx-tunnel", timeout=20)
        assert got.status_code == 200 and "secure page /httpx-tunnel" in got.text
    metrics = gw.metrics()
    assert 'kind="connect",outcome="intercepted"' in metrics and 'kind="http",outcome="ok"' in metrics
    assert TOKEN not in gw.log() and "PRIVATE KEY" not in gw.log()


def test_a_client_that_speaks_no_tls_is_cut_at_the_header_timeout_and_others_are_served(lab, tls, origin):  # noqa: F811
    gw = gateway(lab, tls, FLEET_GATEWAY_HEADER_TIMEOUT="1s")
    silent = [socket.create_connection(("127.0.0.1", tls.port), 10) for _ in range(20)]
    talker = socket.create_connection(("127.0.0.1", tls.port), 10)
    talker.sendall(f"GET {origin.url}/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization: {auth()}\r\n\r\n".encode())
    started = time.monotonic()
    run = curl(tls, f"{origin.url}/meanwhile")  # served while 21 connections hold no handshake
    assert run.returncode == 0 and time.monotonic() - started < 2, run
    for sock in [talker, *silent]:
        with contextlib.closing(sock):
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                data = b""
            assert b"HTTP/" not in data  # never a plain answer, and nothing of the request relayed
    assert time.monotonic() - started < 5
    assert "Traceback" not in gw.log()


def test_new_certificate_files_serve_new_connections_while_an_open_tunnel_keeps_working(lab, tls, origin):  # noqa: F811
    gw = gateway(lab, tls)
    host = origin.url.removeprefix("http://")
    assert served_fingerprint(tls) == tls.fingerprint
    held = tunnel(tls, host)
    assert b"/before" in get_plain(held, host, "/before")

    new = issue(tls.ca, tls.cert, tls.key)
    wait_for(lambda: served_fingerprint(tls) == new, 15, "the new certificate served")
    assert b"/after" in get_plain(held, host, "/after")  # the open tunnel, on the old certificate, carries on
    run = curl(tls, f"{origin.url}/with-the-new-one")
    assert run.returncode == 0, run

    # a broken pair (a certificate of another key): logged once, the last good pair stays
    other = tls.dir / "other"
    other.mkdir()
    issue(tls.ca, tls.cert, other / "k")
    for _ in range(4):
        time.sleep(0.8)
        assert served_fingerprint(tls) == new
    wait_for(lambda: "TLS certificate file is not usable" in gw.log(), 10, "the refusal logged")
    assert gw.log().count("TLS certificate file is not usable") == 1, gw.log()
    assert "is not the certificate of --gateway-tls-key-file" in gw.log()
    assert b"/last" in get_plain(held, host, "/last")
    held.close()
    assert "PRIVATE KEY" not in gw.log()


def test_a_key_others_may_read_a_missing_one_or_another_keys_certificate_stop_the_gateway(lab, tls, tmp_path):  # noqa: F811
    from tests.integration.test_gateway import GatewayProc

    env = GatewayProc(tmp_path, lab.redis_server.url, lab.clients).env

    def start(**over: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleet.cli", "gateway"], env={**env, **tls.env(1), **over},
                              capture_output=True, text=True, timeout=60)

    tls.key.chmod(0o644)
    run = start()
    assert run.returncode == 2 and "readable by others (mode 0644)" in run.stderr, run.stderr
    tls.key.chmod(0o600)
    run = start(FLEET_GATEWAY_TLS_KEY_FILE=str(tmp_path / "missing.key"))
    assert run.returncode == 2 and "missing.key" in run.stderr, run.stderr
    _, other_key = self_signed(tmp_path)
    run = start(FLEET_GATEWAY_TLS_KEY_FILE=str(other_key))
    assert run.returncode == 2 and "is not the certificate of" in run.stderr, run.stderr
    run = start(FLEET_GATEWAY_TLS_CERT_FILE="")
    assert run.returncode == 2 and "needs --gateway-tls-cert-file" in run.stderr, run.stderr
    assert "PRIVATE KEY" not in run.stderr


async def _chromium(home: Path, port: int, urls: list[str]) -> list[tuple[int, str]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, env={**os.environ, "HOME": str(home)},
                                           args=["--proxy-bypass-list=<-loopback>"])
        try:
            context = await browser.new_context(proxy={"server": f"https://127.0.0.1:{port}", "username": "acme",
                                                       "password": TOKEN, "bypass": "<-loopback>"})
            page = await context.new_page()
            out = []
            for url in urls:
                answer = await page.goto(url, wait_until="load", timeout=30_000)
                out.append((answer.status if answer else 0, await page.content()))
            return out
        finally:
            await browser.close()


def test_chromium_with_an_https_proxy_trusting_its_ca_gets_pages(lab, tls, origin, secure_origin, tmp_path):  # noqa: F811
    if not shutil.which(CHROMIUM) or not shutil.which("certutil"):
        pytest.fail("chromium and certutil are not installed: run `make test`, which installs chromium and "
                    "libnss3-tools")
    # a browser's own requests may overlap (a favicon while the next page's CONNECT goes out): one proxy must take
    # more than one lease, or the CONNECT finds it busy now and then (ERR_TUNNEL_CONNECTION_FAILED)
    gateway(lab, tls, FLEET_MAX_LEASES_PER_PROXY="16")
    home = tmp_path / "home"
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, timeout=30)
    for name, cert in (("gateway-ca", tls.ca_file), ("origin", secure_origin.cert)):
        subprocess.run(["certutil", "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", name, "-i", str(cert)],
                       check=True, timeout=30)
    got = asyncio.run(_chromium(home, tls.port, [f"{origin.url}/chromium-plain", f"{secure_origin.url}/chromium-tls"]))
    assert [status for status, _ in got] == [200, 200], got
    assert "secure page /chromium-tls" in got[1][1]
