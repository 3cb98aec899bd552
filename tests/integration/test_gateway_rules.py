"""The rules per domain through a real `fleet gateway`: real Squids of the local provider with distinct egress
addresses (some in ProxyPools), a real redis-server, and plain HTTP origins on 127.0.0.1 and 127.0.0.2 that each
record the exit and the time of every request and answer by path: `/ban` a 429 to the exits in `bans`, `/soft` a
200 with a `cf-mitigated: challenge` header to them, `/slow` after a delay, anything else a page.

Each site's rule applies to it alone: its cooldown's length, its retries, its ban conditions, its waterfall of
pools, its pace (requests per second per exit, measured at the origin) and its concurrency per client (a 429 with
Retry-After past it); an edited rules file is followed, a broken one logged and the last good one kept."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from typing import ClassVar

import pytest

from fleet.store import keys
from fleet.testing.http import LoopbackServer, Quiet
from tests.integration.test_gateway import Lab, exits_lab, plain, wait_for
from tests.providers.local.conftest import make_provider, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

A, B = "127.0.0.1", "127.0.0.2"


class _Site(Quiet):
    protocol_version = "HTTP/1.1"
    bans: ClassVar[set[str]] = set()  # exit addresses this origin bans
    seen: ClassVar[list[tuple[str, str, str, float]]] = []  # (server, exit, path, time)
    lock = threading.Lock()

    def do_GET(self) -> None:
        me, addr = self.server.server_address[0], self.client_address[0]
        with self.lock:
            self.seen.append((me, addr, self.path, time.monotonic()))
        banned = addr in self.bans
        if self.path.startswith("/ban") and banned:
            self.reply(429, b"slow down\n")
        elif self.path.startswith("/soft") and banned:
            self.reply(200, b"checking your browser\n", {"cf-mitigated": "challenge"})
        elif self.path.startswith("/slow"):
            time.sleep(1.0)
            self.reply(200, addr.encode())
        else:
            self.reply(200, addr.encode())


@pytest.fixture
def sites():
    _Site.bans, _Site.seen = set(), []
    with LoopbackServer(_Site, "site-a", A) as a, LoopbackServer(_Site, "site-b", B) as b:
        yield {A: a.url, B: b.url}


@pytest.fixture
def lab(tmp_path, redis_server, make_provider, port_window):  # noqa: F811
    lab = exits_lab(tmp_path, redis_server, make_provider, port_window)
    yield lab
    for gw in lab.gateways:
        gw.stop()
    for gw in lab.gateways:
        assert "Traceback" not in gw.log(), gw.log()[-3000:]


def _cooling(lab: Lab) -> dict[str, float]:
    """'<proxy>|<host>' → seconds of cooldown left."""
    now = time.time()
    return {m.decode(): s - now for m, s in lab.r.zrange(keys.LEASE_COOL_TARGET, 0, -1, withscores=True)}


def test_each_site_has_its_own_ban_conditions_cooldown_and_retries(lab, sites, tmp_path):
    for key in ("crawl/a", "crawl/b", "crawl/c"):
        lab.squid(key)
    egress = lab.egress()
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"""
rules:
  - name: strict
    domains: ["{A}"]
    bans: {{statuses: [429], header: {{name: cf-mitigated, pattern: challenge}}, slowerThan: 500ms}}
    actions: {{cooldown: 30s, retries: 0}}
  - name: lenient
    domains: ["*"]
    actions: {{cooldown: 5m}}
""")
    gw = lab.gateway(FLEET_GATEWAY_RULES_FILE=str(rules))
    _Site.bans = {egress["crawl/a"], egress["crawl/b"], egress["crawl/c"]}

    # strict: retries 0, so the crawler gets the ban from the first proxy; that proxy cools for 30 s, here only
    status, headers, _ = plain(gw, f"{sites[A]}/ban")
    assert status == 429
    first = headers["x-fleet-proxy"]
    # a ban header at 200 is a ban there too, and a slow first byte is one
    status, headers, _ = plain(gw, f"{sites[A]}/soft")
    assert status == 200 and headers["x-fleet-proxy"] != first
    second = headers["x-fleet-proxy"]
    _Site.bans = set()
    status, headers, _ = plain(gw, f"{sites[A]}/slow")
    third = headers["x-fleet-proxy"]
    assert status == 200 and third not in (first, second)
    cooling = _cooling(lab)
    assert {k for k in cooling if k.endswith(f"|{A}")} == {f"{p}|{A}" for p in (first, second, third)}
    assert all(20 < cooling[f"{p}|{A}"] <= 30 for p in (first, second, third)), cooling

    # lenient (the catch-all): the same ban status is retried on another proxy (the flags' 2 retries) and the
    # banned proxy cools for 5 minutes at this host only
    _Site.bans = {egress["crawl/a"], egress["crawl/b"]}
    got = [plain(gw, f"{sites[B]}/ban/{n}") for n in range(8)]  # the first pick is a or b at least once
    assert all(status == 200 and headers["x-fleet-proxy"] == "crawl/c" for status, headers, _ in got)
    at_b = {k: v for k, v in _cooling(lab).items() if k.endswith(f"|{B}")}
    assert at_b and set(at_b) <= {f"crawl/a|{B}", f"crawl/b|{B}"} and all(280 < v <= 300 for v in at_b.values())


def test_a_waterfall_goes_to_the_next_pool_when_the_first_is_banned_or_has_no_proxy(lab, sites, tmp_path):
    lab.squid("crawl/dc1", pool="datacenter")
    lab.squid("crawl/res1", pool="residential")
    egress = lab.egress()
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"""
rules:
  - domains: ["{A}"]
    actions: {{pools: [datacenter, residential], retries: 0}}
""")
    gw = lab.gateway(FLEET_GATEWAY_RULES_FILE=str(rules))
    status, headers, body = plain(gw, f"{sites[A]}/page")
    assert status == 200 and headers["x-fleet-proxy"] == "crawl/dc1"  # the first pool first
    _Site.bans = {egress["crawl/dc1"]}
    status, headers, body = plain(gw, f"{sites[A]}/ban")  # banned in the first pool: the next one, no retry left there
    assert status == 200 and headers["x-fleet-proxy"] == "crawl/res1" and body.decode() == egress["crawl/res1"]
    status, headers, _ = plain(gw, f"{sites[A]}/page")  # the first pool has no proxy for this host now (cooling)
    assert status == 200 and headers["x-fleet-proxy"] == "crawl/res1"
    assert 'reason="waterfall"' in gw.metrics()


def test_politeness_paces_each_exit_at_a_site_and_bounds_a_clients_concurrency(lab, sites, tmp_path):
    for key in ("crawl/a", "crawl/b"):
        lab.squid(key)
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"""
rules:
  - domains: ["{A}"]
    politeness: {{perProxyPerSecond: 2, queueFor: 10s}}
  - domains: ["{B}"]
    politeness: {{concurrentPerClient: 1, queueFor: 300ms}}
""")
    gw = lab.gateway(FLEET_GATEWAY_RULES_FILE=str(rules), FLEET_MAX_LEASES_PER_PROXY="16")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda n: plain(gw, f"{sites[A]}/p/{n}")[0], range(16)))
    assert got == [200] * 16
    per_exit: dict[str, list[float]] = {}
    for me, addr, _, at in _Site.seen:
        if me == A:
            per_exit.setdefault(addr, []).append(at)
    assert len(per_exit) == 2 and sum(map(len, per_exit.values())) == 16
    for times in per_exit.values():  # at the origin: 2 per second from each exit (the way there jitters a little)
        times.sort()
        assert (len(times) - 1) / (times[-1] - times[0]) <= 2 * 1.02, times
        assert all(b - a >= 0.4 for a, b in itertools.pairwise(times)), times

    # one request at a time per client at B: a second one waits 300 ms, then 429 with Retry-After
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(plain, gw, f"{sites[B]}/slow")
        time.sleep(0.2)
        status, headers, body = plain(gw, f"{sites[B]}/page")
        assert status == 429 and headers["x-fleet-reason"] == "politeness" and headers["retry-after"] == "1", body
        assert slow.result()[0] == 200
    assert plain(gw, f"{sites[B]}/page")[0] == 200  # its turn is free again
    assert 'outcome="paced"' in gw.metrics()


def test_an_edited_rules_file_is_followed_and_a_broken_one_is_logged_and_the_last_good_kept(lab, sites, tmp_path):
    lab.squid("crawl/a")
    lab.squid("crawl/b")
    egress = lab.egress()
    rules = tmp_path / "rules.yaml"
    rules.write_text(f'rules:\n  - domains: ["{A}"]\n    bans: {{statuses: [418]}}\n')
    gw = lab.gateway(FLEET_GATEWAY_RULES_FILE=str(rules))
    _Site.bans = set(egress.values())
    assert plain(gw, f"{sites[A]}/ban")[0] == 429  # 429 is no ban at A now: relayed, no retry, no cooldown
    assert _cooling(lab) == {}
    rules.write_text(f'rules:\n  - domains: ["{A}"]\n    actions: {{cooldown: 45s, retries: 0}}\n')
    wait_for(lambda: plain(gw, f"{sites[A]}/ban")[0] == 429 and bool(_cooling(lab)), 10, "the edited rules")
    assert all(35 < left <= 45 for left in _cooling(lab).values())
    rules.write_text(f'rules:\n  - domains: ["{A}"]\n    actions:\n      cooldown: soon\n')
    wait_for(lambda: plain(gw, f"{sites[A]}/page")[0] == 200 and "rules.yaml:4" in gw.log(), 10,
             "the broken file logged (the file is looked at as requests use it)")
    assert "actions.cooldown" in gw.log() and gw.log().count("rules.yaml:4") == 1
    lab.r.delete(keys.LEASE_COOL_TARGET)
    assert plain(gw, f"{sites[A]}/ban")[0] == 429 and all(35 < v <= 45 for v in _cooling(lab).values())
