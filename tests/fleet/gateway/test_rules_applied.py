"""A host's rule as the core applies it to one request's attempts, at the seams (fake lease store and dialer):
its attempts, its waterfall of pools, its pace per proxy (a proxy whose turn is too far is released and another
asked; all of them too far is `Paced`), a connect failure reported as a ban, and the cooldown its reports carry.
The same through a real gateway: tests/integration/test_gateway_rules.py."""

from __future__ import annotations

import asyncio
import time

from fleet.gateway import decide
from fleet.gateway.config import GatewayConfig
from fleet.gateway.core import Attempt, Paced, UpstreamFailed
from fleet.gateway.decide import Options, Target
from fleet.gateway.rules import parse_rules
from tests.fleet.gateway.harness import FakeLeases
from tests.fleet.gateway.test_core import ACME, THREE, FakeDialer, core_of

SHOP = Target("shop.example", 443, "")


def _core(rules: str, leases: FakeLeases, dialer: FakeDialer | None = None):
    core = core_of(leases, dialer or FakeDialer())
    core.rules = parse_rules(rules, defaults=GatewayConfig())
    return core


ACME_OPTIONS = Options("acme")


def _go(core, target: Target = SHOP):
    async def run():
        attempts = core.attempts(ACME, ACME_OPTIONS, target, tunnel=True)
        got = await attempts.next()
        return got, attempts
    return asyncio.run(run())


def test_a_rules_retries_bound_the_attempts_and_its_cooldown_rides_on_its_reports():
    leases = FakeLeases(dict(THREE))
    dialer = FakeDialer(fail={p: decide.REFUSED for p in THREE})
    core = _core('rules: [{domains: ["shop.example"], actions: {retries: 1, cooldown: 45s}, '
                 'bans: {connectFailure: true}}]', leases, dialer)
    got, attempts = _go(core)
    assert got is None and len(dialer.dials) == 2  # retries 1: two proxies
    assert [o for _, _, o in leases.reports] == ["blocked", "blocked"]  # connectFailure: a ban for this host
    assert leases.cooldowns == [45.0, 45.0]
    assert attempts.outcome() == UpstreamFailed((decide.REFUSED, decide.REFUSED))
    # another host: the flags' attempts (3), errors, the flags' cooldown
    leases, dialer = FakeLeases(dict(THREE)), FakeDialer(fail={p: decide.REFUSED for p in THREE})
    core = _core('rules: [{domains: ["shop.example"], actions: {retries: 1}}]', leases, dialer)
    _go(core, Target("news.example", 443, ""))
    assert len(dialer.dials) == 3 and {o for _, _, o in leases.reports} == {"error"}
    assert set(leases.cooldowns) == {GatewayConfig().cooldown_blocked}


def test_a_waterfall_asks_the_next_pool_when_one_has_no_proxy_or_its_tries_are_spent():
    leases = FakeLeases(dict(THREE), pools={"crawl/a": "dc", "crawl/b": "dc", "crawl/c": "resi"})
    dialer = FakeDialer(fail={"crawl/a": decide.REFUSED, "crawl/b": decide.REFUSED})
    core = _core('rules: [{domains: ["*"], actions: {pools: [dc, resi], retries: 1}}]', leases, dialer)
    got, _ = _go(core)
    assert isinstance(got, Attempt) and got.upstream.proxy == "crawl/c"
    assert [c.pool for c in leases.leased] == ["dc", "dc", "resi"]
    assert core.series.retries[decide.WATERFALL] == 1
    # a first pool with nothing at all: straight to the next
    leases = FakeLeases({"crawl/c": THREE["crawl/c"]}, pools={"crawl/c": "resi"})
    core = _core('rules: [{domains: ["*"], actions: {pools: [dc, resi]}}]', leases)
    got, _ = _go(core)
    assert got.upstream.proxy == "crawl/c" and [c.pool for c in leases.leased] == ["dc", "resi"]


def test_a_proxy_whose_turn_is_too_far_is_released_for_another_and_all_too_far_is_paced():
    leases = FakeLeases(dict(THREE), waits={"crawl/a": 30.0, "crawl/b": 0.2})
    core = _core('rules: [{domains: ["shop.example"], politeness: {perProxyPerSecond: 1, queueFor: 1s}}]', leases)
    started = time.monotonic()
    got, _ = _go(core)
    assert got.upstream.proxy == "crawl/b" and time.monotonic() - started >= 0.2  # waited for its turn
    assert leases.paced == ["crawl/a", "crawl/b"] and len(leases.released) == 1  # a's lease given back
    leases = FakeLeases(dict(THREE), waits={p: 2.5 for p in THREE})
    core = _core('rules: [{domains: ["shop.example"], politeness: {perProxyPerSecond: 1, queueFor: 1s}}]', leases)
    got, attempts = _go(core)
    assert got is None and attempts.outcome() == Paced(3) and len(leases.released) == 3
