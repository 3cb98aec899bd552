"""A real headless Chromium (Playwright driving Debian's `chromium`) crawling through a real `fleet gateway` with
its default settings: real Squids of the local provider with distinct egress addresses (`egressRange`), a real
redis-server, and two local origins that record the address each request came from — HTTPS (a self-signed
certificate the browser is told to accept) and plain HTTP.

Three sessions (`acme-session-b1`, b2, b3), each a browser context with its own proxy credentials, open four
HTTPS pages and one plain page in parallel tabs, each page with images the browser fetches over several
connections at once. Each session's requests all leave from one exit (its connections share its proxy, as one
lease), and the sessions spread over the exits. A ban report from the page's context (Playwright's request
API, through the context's proxy) names that session's proxy, which then cools down for the host. Before
sessions shared their proxy, each of a browser's parallel connections was a lease of its own: with one lease
per proxy, a session's pages left from two exits (or, with every proxy taken, failed)."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import threading
import time
from typing import ClassVar

import pytest

from fleet.store import keys
from fleet.testing.http import LoopbackServer, Quiet
from fleet.testing.tls import https_server
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


@pytest.fixture
def origins(tmp_path):
    _Origin.seen = []
    with LoopbackServer(_Origin, "origin-http") as plain, https_server(_TlsOrigin, tmp_path) as secure:
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


async def _browse(gateway_port: int, http_url: str, https_url: str) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """The three sessions browse at once; then (what the origins saw, each session's reported proxy)."""
    from playwright.async_api import BrowserContext, async_playwright

    async with async_playwright() as pw:
        # <-loopback>: Chromium sends loopback addresses around any proxy unless told not to.
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--proxy-bypass-list=<-loopback>"])
        try:
            async def session(name: str) -> BrowserContext:
                context = await browser.new_context(
                    ignore_https_errors=True,
                    proxy={"server": f"http://127.0.0.1:{gateway_port}", "username": f"acme-session-{name}",
                           "password": TOKEN, "bypass": "<-loopback>"})
                urls = [f"{https_url}/{name}/page/{n}" for n in range(PAGES)] + [f"{http_url}/{name}/page/{PAGES}"]
                pages = [await context.new_page() for _ in urls]
                answers = await asyncio.gather(*(p.goto(u, wait_until="load", timeout=60_000)
                                                 for p, u in zip(pages, urls, strict=True)))
                assert [a.status for a in answers] == [200] * len(urls), urls
                return context

            contexts = await asyncio.gather(*(session(s) for s in SESSIONS))
            with _Origin.lock:
                seen = list(_Origin.seen)
            reported = {}
            for name, context in zip(SESSIONS, contexts, strict=True):
                # a ban seen by the page, reported as docs/gateway.md shows: the context's own proxy and session
                report = await context.request.post("http://fleet.gateway/v1/bans?host=127.0.0.1")
                assert report.status == 200, await report.text()
                reported[name] = (await report.json())["proxy"]
                await context.close()
            return seen, reported
        finally:
            await browser.close()


def test_a_browsers_parallel_connections_keep_each_session_on_one_exit(lab, origins):
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is not installed: run `make test`, which installs Debian's chromium")
    for key in ("crawl/a", "crawl/b", "crawl/c", "crawl/d"):
        lab.squid(key)
    gw = lab.gateway()  # default settings: one lease per proxy
    http_url, https_url = origins
    seen, reported = asyncio.run(_browse(gw.port, http_url, https_url))

    exits: dict[str, set[str]] = {}
    for scheme in ("https", "http"):
        for s in SESSIONS:
            n = sum(1 for sc, sess, _ in seen if sc == scheme and sess == s)
            assert n == (PAGES if scheme == "https" else 1) * (1 + IMAGES), (scheme, s, n)
    for _, sess, addr in seen:
        exits.setdefault(sess, set()).add(addr)
    assert all(addr.startswith("127.0.1.") for e in exits.values() for addr in e), exits  # through the Squids
    assert all(len(e) == 1 for e in exits.values()), exits  # each session from one exit, HTTPS and plain alike
    assert len(set().union(*exits.values())) == len(SESSIONS), exits  # the sessions spread over the exits
    assert lab.loads() and max(lab.loads().values()) <= 1  # every lease released, never two holders per proxy
    # each session's ban report named its own exit's proxy, which now cools for that host
    egress = {key: lab.provider.store.read(pid.split("/", 1)[1]).egressAddress for key, (pid, _) in lab.squids.items()}
    assert {s: egress[p] for s, p in reported.items()} == {s: next(iter(e)) for s, e in exits.items()}
    cooling = {k.decode() for k in lab.r.zrange(keys.LEASE_COOL_TARGET, 0, -1)}
    assert cooling == {f"{p}|127.0.0.1" for p in reported.values()}
