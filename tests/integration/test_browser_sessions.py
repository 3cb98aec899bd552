"""A real headless Chromium (Playwright driving Debian's `chromium`) crawling through a real `fleet gateway` with
its default settings: real Squids of the local provider with distinct egress addresses (`egressRange`), a real
redis-server, and two local origins that record the address each request came from — HTTPS (a self-signed
certificate the browser is told to accept) and plain HTTP.

Three sessions (`acme-session-b1`, b2, b3), each a browser context with its own proxy credentials, open four
HTTPS pages and one plain page in parallel tabs, each page with images the browser fetches over several
connections at once. Each session's requests all leave from one exit (its connections share its proxy, as one
lease), and the sessions spread over the exits. Before sessions shared their proxy, each of a browser's
parallel connections was a lease of its own: with one lease per proxy, a session's pages left from two exits."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import itertools
import shutil
import ssl
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from fleet.testing.http import LoopbackServer, Quiet
from tests.integration.test_gateway import TOKEN, Lab
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
SESSIONS = ("b1", "b2", "b3")
PAGES, IMAGES = 4, 8  # HTTPS pages per session (plus one plain page), images per page


class _Origin(Quiet):
    """`/<session>/page/<n>`: a page of IMAGES images; `/<session>/img/<n>`: a small image, a little slow, so
    the browser fetches them over parallel connections. Records (session, client address) per request."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, str, str]]] = []  # (scheme, session, client address)
    lock = threading.Lock()
    scheme = "http"

    def do_GET(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) != 3 or parts[1] not in ("page", "img"):
            self.reply(404, b"no\n")
            return
        session, kind, n = parts
        with self.lock:
            self.seen.append((self.scheme, session, self.client_address[0]))
        if kind == "page":
            imgs = "".join(f'<img src="/{session}/img/{n}-{k}.svg" width="8" height="8">' for k in range(IMAGES))
            self.reply(200, f"<html><body><h1>{session} {n}</h1>{imgs}</body></html>".encode(),
                       {"Content-Type": "text/html", "Cache-Control": "no-store"})
            return
        time.sleep(0.15)
        self.reply(200, b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>',
                   {"Content-Type": "image/svg+xml", "Cache-Control": "no-store"})


class _TlsOrigin(_Origin):
    scheme = "https"


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "origin.crt", tmp / "origin.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def origins(tmp_path):
    _Origin.seen = []
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    tls.set_alpn_protocols(["http/1.1"])
    plain, secure = LoopbackServer(_Origin, "origin-http"), LoopbackServer(_TlsOrigin, "origin-https")
    secure.httpd.socket = tls.wrap_socket(secure.httpd.socket, server_side=True)
    secure.url = secure.url.replace("http://", "https://")
    with plain, secure:
        yield plain.url, secure.url


@pytest.fixture
def lab(tmp_path, redis_server, make_provider, port_window):  # noqa: F811
    if squid_binary() is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    provider = make_provider(egressRange="127.0.1.0/24")
    lab = Lab(tmp_path, redis_server, provider, itertools.count(port_window[0]))
    yield lab
    for gw in lab.gateways:
        gw.stop()


async def _browse(gateway_port: int, http_url: str, https_url: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        # <-loopback>: Chromium sends loopback addresses around any proxy unless told not to.
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--proxy-bypass-list=<-loopback>"])
        try:
            async def session(name: str) -> None:
                context = await browser.new_context(
                    ignore_https_errors=True,
                    proxy={"server": f"http://127.0.0.1:{gateway_port}", "username": f"acme-session-{name}",
                           "password": TOKEN, "bypass": "<-loopback>"})
                urls = [f"{https_url}/{name}/page/{n}" for n in range(PAGES)] + [f"{http_url}/{name}/page/{PAGES}"]
                pages = [await context.new_page() for _ in urls]
                answers = await asyncio.gather(*(p.goto(u, wait_until="load", timeout=60_000)
                                                 for p, u in zip(pages, urls, strict=True)))
                assert [a.status for a in answers] == [200] * len(urls), urls
                await context.close()

            await asyncio.gather(*(session(s) for s in SESSIONS))
        finally:
            await browser.close()


def test_a_browsers_parallel_connections_keep_each_session_on_one_exit(lab, origins):
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is not installed: run `make test`, which installs Debian's chromium")
    for key in ("crawl/a", "crawl/b", "crawl/c", "crawl/d"):
        lab.squid(key)
    gw = lab.gateway()  # default settings: one lease per proxy
    http_url, https_url = origins
    asyncio.run(_browse(gw.port, http_url, https_url))

    exits: dict[str, set[str]] = {}
    for scheme in ("https", "http"):
        for s in SESSIONS:
            n = sum(1 for sc, sess, _ in _Origin.seen if sc == scheme and sess == s)
            assert n == (PAGES if scheme == "https" else 1) * (1 + IMAGES), (scheme, s, n)
    for _, sess, addr in _Origin.seen:
        exits.setdefault(sess, set()).add(addr)
    assert all(addr.startswith("127.0.1.") for e in exits.values() for addr in e), exits  # through the Squids
    assert all(len(e) == 1 for e in exits.values()), exits  # each session from one exit, HTTPS and plain alike
    assert len(set().union(*exits.values())) == len(SESSIONS), exits  # the sessions spread over the exits
    assert lab.loads() and max(lab.loads().values()) <= 1  # every lease released, never two holders per proxy
