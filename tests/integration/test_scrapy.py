"""A real Scrapy crawl (`scrapy runspider` in a subprocess) through `fleet_crawler.scrapy`: real Squids
of the local provider with distinct egress addresses (`egressRange`), a real `fleet api` process and
redis-server, and two local origins — 127.0.0.1, which bans the first egress address it sees with 429
after a few pages, and 127.0.0.2, which bans nobody. Every page is fetched; the banned proxy cools down
for the banning origin only; no request leaves through it once its ban is known; every lease is
released when the spider closes."""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar, NamedTuple

import pytest

from fleet.store import keys
from fleet.testing.api import TOKEN, ApiProc
from fleet.testing.http import LoopbackServer, Quiet
from fleet.testing.tls import https_server
from tests.integration.test_gateway import TOKEN as GATEWAY_TOKEN
from tests.integration.test_gateway import Lab
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

PAGES = 30
BAN_AFTER = 3  # the banning origin serves this many pages to an address before banning it
CONCURRENCY = 4

SPIDER = '''
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    start_urls = {urls!r}

    def parse(self, response):
        yield {{"url": response.url, "status": response.status, "proxy": response.meta.get("fleet_proxy")}}
'''


class _Origin(Quiet):
    protocol_version = "HTTP/1.1"
    bans: ClassVar[bool] = False
    seen: ClassVar[list[tuple[str, str, int]]] = []  # (client address, path, status) in arrival order
    banned: ClassVar[dict[str, str]] = {}  # server → the address it bans
    served: ClassVar[dict[tuple[str, str], int]] = {}
    lock = threading.Lock()

    def do_GET(self) -> None:
        me, addr = self.server.server_address[0], self.client_address[0]
        with self.lock:
            status = 200
            if self.server.bans:  # type: ignore[attr-defined]
                target = self.banned.setdefault(me, addr)
                n = self.served.get((me, addr), 0)
                if addr == target and n >= BAN_AFTER:
                    status = 429
                self.served[(me, addr)] = n + 1
            self.seen.append((f"{me}>{addr}", self.path, status))
        self.reply(status, b"banned\n" if status == 429 else f"page {self.path} for {addr}\n".encode())


def crawl(tmp: Path, spider: str, middleware: str, **settings: str) -> tuple[subprocess.CompletedProcess[str], list]:
    """`scrapy runspider` in a subprocess with fleet's `middleware`: (the run, the items it wrote)."""
    path, items = tmp / "spider.py", tmp / "items.jsonl"
    path.write_text(spider)
    every = {"DOWNLOADER_MIDDLEWARES": json.dumps({f"fleet_crawler.scrapy.{middleware}": 700}),
             "CONCURRENT_REQUESTS": str(CONCURRENCY), "CONCURRENT_REQUESTS_PER_DOMAIN": str(CONCURRENCY),
             "TELNETCONSOLE_ENABLED": "false", "LOG_LEVEL": "INFO", "RETRY_ENABLED": "false", **settings}
    argv = [sys.executable, "-m", "scrapy", "runspider", str(path), "-o", f"{items}:jsonlines"]
    for k, v in every.items():
        argv += ["-s", f"{k}={v}"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "Traceback" not in run.stderr, run.stderr[-4000:]
    return run, [json.loads(line) for line in items.read_text().splitlines()]


@pytest.fixture
def origins():
    _Origin.seen, _Origin.banned, _Origin.served = [], {}, {}
    with contextlib.ExitStack() as stack:
        urls = []
        for host, bans in (("127.0.0.1", True), ("127.0.0.2", False)):
            server = LoopbackServer(_Origin, f"origin-{host}", host)
            server.httpd.bans = bans  # type: ignore[attr-defined]
            urls.append(stack.enter_context(server).url)
        yield urls


class Exits(NamedTuple):
    lab: Lab
    egress: dict[str, str]  # proxy key → the address its requests leave from


@pytest.fixture
def exits(tmp_path: Path, redis_server, make_provider, port_window) -> Exits:  # noqa: F811
    """Two Squids of the local provider, crawl/a and crawl/b, running (their endpoints in Redis), each with its own
    egress address from `egressRange`."""
    if squid_binary() is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    provider = make_provider(egressRange="127.0.1.0/24")
    lab = Lab(tmp_path, redis_server, provider, itertools.count(port_window[0]))
    for key in ("crawl/a", "crawl/b"):
        lab.squid(key)
    return Exits(lab, {key: provider.store.read(pid.split("/", 1)[1]).egressAddress
                       for key, (pid, _) in lab.squids.items()})


def test_a_scrapy_crawl_fetches_every_page_and_the_banned_proxy_cools_for_that_origin_only(
        tmp_path: Path, redis_server, exits: Exits, origins):
    lab, egress = exits
    assert sorted(egress.values()) == ["127.0.1.1", "127.0.1.2"]
    api = ApiProc(tmp_path, redis_server.url, FLEET_MAX_LEASES_PER_PROXY="4").start()
    try:
        banning, calm = origins
        urls = [f"{o}/page/{i}" for i in range(PAGES) for o in (banning, calm)]
        run, got = crawl(tmp_path, SPIDER.format(urls=urls), "FleetProxyMiddleware", FLEET_API_URL=api.url,
                         FLEET_API_TOKEN=TOKEN, FLEET_LEASE_TTL="60", FLEET_STICKY="true")

        # Every page fetched, each once, with 200.
        assert sorted(i["url"] for i in got) == sorted(urls), run.stderr[-3000:]
        assert {i["status"] for i in got} == {200}

        # The banning origin banned one egress address; once the first 429 went out, the only requests
        # through it are the ones already in flight (at most CONCURRENCY - 1), all 429.
        banned_addr = _Origin.banned["127.0.0.1"]
        (banned_key,) = [k for k, a in egress.items() if a == banned_addr]
        (other_key,) = [k for k in egress if k != banned_key]
        at_banning = [(a.split(">")[1], path, s) for a, path, s in _Origin.seen if a.startswith("127.0.0.1>")]
        first_ban = next(i for i, (_, _, s) in enumerate(at_banning) if s == 429)
        after = [(a, s) for a, _, s in at_banning[first_ban + 1:] if a == banned_addr]
        assert len(after) <= CONCURRENCY - 1 and {s for _, s in after} <= {429}, at_banning
        assert sum(1 for a, _, _ in at_banning if a == banned_addr) <= BAN_AFTER + CONCURRENCY
        assert all(a == egress[other_key] for a, _, _ in at_banning[first_ban + CONCURRENCY:])
        banning_items = [i for i in got if i["url"].startswith(banning)]
        assert sum(1 for i in banning_items if i["proxy"] == banned_key) == BAN_AFTER  # the pages before the ban
        assert "fleet/bans" in run.stderr  # the crawl's stats count them

        # The cooldown: that proxy for that origin only, not globally, not for the calm origin.
        r = lab.r
        cool = {m.decode() for m in r.zrange(keys.LEASE_COOL_TARGET, 0, -1)}
        assert cool == {f"{banned_key}|127.0.0.1"}
        assert r.zscore(keys.LEASE_COOL_GLOBAL, banned_key) is None
        # Every lease released when the spider closed.
        assert all(int(v) == 0 for _, v in r.zrange(keys.LEASE_LOAD, 0, -1, withscores=True)), lab.loads()

        # As the API applies it: for the banning origin, only the other proxy (4 slots, then 409); for the
        # calm one, five leases need both proxies.
        held = [api.lease(target="127.0.0.1", ttl=30) for _ in range(5)]
        assert [s for s, _, _ in held] == [200] * 4 + [409]
        assert {d["proxy"] for s, d, _ in held if s == 200} == {other_key}
        for _, d, _ in held[:4]:
            api.release(d["lease"])
        calm_leases = [api.lease(target="127.0.0.2", ttl=30) for _ in range(5)]
        assert [s for s, _, _ in calm_leases] == [200] * 5
        assert {d["proxy"] for _, d, _ in calm_leases} == {banned_key, other_key}
    finally:
        api.stop()
    assert "Traceback" not in api.log(), api.log()[-3000:]


GATEWAY_SPIDER = '''
import scrapy


class Pages(scrapy.Spider):
    name = "pages"

    async def start(self):
        for url in {urls!r}:
            yield scrapy.Request(url, meta={{"proxy": {proxy!r}}})

    def parse(self, response):
        yield {{"url": response.url, "status": response.status}}
'''


def test_a_scrapy_crawl_through_the_gateway_reports_https_bans_in_band_and_its_session_moves(
        tmp_path: Path, exits: Exits):
    """Gateway mode (HttpProxyMiddleware pointed at `fleet gateway`, a -session- username) against an HTTPS origin
    that bans the first exit it sees: inside the tunnel the gateway sees no 429, so FleetGatewayMiddleware reports
    each one in-band and sends the page again; the session moves off the banned exit, which cools for that host."""
    lab, egress = exits
    gw = lab.gateway()
    _Origin.seen, _Origin.banned, _Origin.served = [], {}, {}
    try:
        with https_server(_Origin, tmp_path) as origin:
            origin.httpd.bans = True  # type: ignore[attr-defined]
            urls = [f"{origin.url}/page/{i}" for i in range(PAGES)]
            run, got = crawl(tmp_path, GATEWAY_SPIDER.format(
                urls=urls, proxy=f"http://acme-session-crawl1:{GATEWAY_TOKEN}@127.0.0.1:{gw.port}"),
                "FleetGatewayMiddleware")
        warnings = "\n".join(ln for ln in run.stderr.splitlines() if "WARNING" in ln)
        assert sorted(i["url"] for i in got) == sorted(urls), warnings[-3000:]
        assert {i["status"] for i in got} == {200}
        # The origin banned one exit; after its first 429 only requests already in flight left through it.
        banned_addr = _Origin.banned["127.0.0.1"]
        (banned_key,) = [k for k, a in egress.items() if a == banned_addr]
        seen = [(a.split(">")[1], s) for a, _, s in _Origin.seen]
        first_ban = next(i for i, (_, s) in enumerate(seen) if s == 429)
        late = [s for a, s in seen[first_ban + 1:] if a == banned_addr]
        assert len(late) <= CONCURRENCY - 1 and set(late) <= {429}, seen
        assert "fleet/bans" in run.stderr
        cool = {m.decode() for m in lab.r.zrange(keys.LEASE_COOL_TARGET, 0, -1)}
        assert cool == {f"{banned_key}|127.0.0.1"}  # that exit, for that host only
        assert 'outcome="ban_reported"' in gw.metrics()
    finally:
        gw.stop()
    assert "Traceback" not in gw.log(), gw.log()[-3000:]
