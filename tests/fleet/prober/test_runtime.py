"""The prober's scheduler, verdicts and membership on fakeredis, probing
real local listeners (tests/fleet/prober/fakeproxy.py) on short intervals."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time

import fakeredis
import pytest
import redis
from prometheus_client import generate_latest

from fleet import serving
from fleet.prober import process
from fleet.prober.decide import Outcome, Thresholds
from fleet.prober.process import Config, Prober
from fleet.prober.share import Endpoint
from fleet.prober.target import Target
from fleet.serving import HEALTHCHECK_DURATION, HEALTHCHECK_FAILURES, PROBER_PROXIES
from fleet.store import Store, keys
from tests.fleet.prober.fakeproxy import FakeProxy

TARGET = Target("origin.example", 443)
INTERVAL = 0.1


def config(**kw) -> Config:
    base = {"target": TARGET, "interval": INTERVAL, "time_limit": 0.5, "thresholds": Thresholds(3, 1)}
    return Config(**{**base, **kw})


def endpoint(uid: str, port: int, ip: str = "127.0.0.1") -> str:
    return json.dumps({"uid": uid, "ip": ip, "port": port})


def verdict(r, key: str) -> dict | None:
    raw = r.hget(keys.PROBE_VERDICTS, key)
    return json.loads(raw) if raw else None


async def until(cond, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Running:
    """A Prober run on the test's loop until the block ends."""

    def __init__(self, prober: Prober) -> None:
        self.prober, self.stop = prober, asyncio.Event()

    async def __aenter__(self) -> Prober:
        self.task = asyncio.create_task(self.prober.run(self.stop))
        return self.prober

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 5)


@pytest.fixture
def r():
    client = fakeredis.FakeRedis()
    yield client
    client.close()


def test_the_loop_is_uvloops_when_installed_and_asyncios_without(monkeypatch):
    import uvloop

    assert process.loop_factory() is uvloop.new_event_loop
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a))
    assert process.loop_factory() is None


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_dead_proxy_turns_unhealthy_after_the_threshold_and_back(r, loop):
    async def main():
        assert process.loop_name() == loop  # the scenario runs on the loop it names
        async with FakeProxy("ok") as proxy:
            port = proxy.port
            r.hset(keys.PX_ENDPOINTS, "crawl/a", endpoint("u1", port))
            async with Running(Prober(Store(r), config(), member="m1")) as p:
                first = await until(lambda: verdict(r, "crawl/a"), what="the first verdict")
                assert first["healthy"] is True and first["uid"] == "u1" and first["message"].startswith("first probe: CONNECT 200")
                assert r.zscore(keys.PX_DUE, "crawl/a") is not None  # put_verdict made it due for the controller
                await proxy.close()  # the proxy dies: connections are refused
                probes_before = p.probes
                down = await until(lambda: (v := verdict(r, "crawl/a")) and v["healthy"] is False and v, what="unhealthy")
                assert down["message"].startswith("3 probes failed in a row; last: connect to 127.0.0.1:")
                assert "connection refused" in down["message"]
                assert p.probes - probes_before >= 3
                async with FakeProxy("ok", port=port):  # restarted on its port
                    up = await until(lambda: (v := verdict(r, "crawl/a")) and v["healthy"] is True and v, what="healthy again")
                    assert up["message"].startswith("1 good probe in a row")
                    await until(lambda: p.verdicts == 3, what="three verdicts counted")  # counted once its write returns

    with asyncio.Runner(loop_factory=process.loop_factory() if loop == "uvloop" else None) as runner:
        runner.run(main())


def test_every_probe_is_observed_and_series_go_with_the_proxy(r):
    async def main():
        async with FakeProxy("ok") as ok, FakeProxy("forbidden") as bad:
            r.hset(keys.PX_ENDPOINTS, mapping={"crawl/ok": endpoint("u1", ok.port), "crawl/bad": endpoint("u2", bad.port)})
            prober = Prober(Store(r), config(), member="m1")
            registry = serving.registry_of(prober.series.collectors())
            async with Running(prober) as p:
                await until(lambda: p.probes >= 10, what="ten probes")
                text = generate_latest(registry).decode()
                assert f'{PROBER_PROXIES} 2.0' in text
                assert f'{HEALTHCHECK_FAILURES}{{proxy="crawl/ok"}} 0.0' in text
                fails = registry.get_sample_value(HEALTHCHECK_FAILURES, {"proxy": "crawl/bad"})
                count = sum(registry.get_sample_value(f"{HEALTHCHECK_DURATION}_count", {"proxy": k}) for k in ("crawl/ok", "crawl/bad"))
                assert fails >= 4 and count >= 10
                r.hdel(keys.PX_ENDPOINTS, "crawl/bad")  # no longer Running: no longer probed
                await until(lambda: "crawl/bad" not in p.owned, what="crawl/bad dropped")
                text = generate_latest(registry).decode()
                assert "crawl/bad" not in text and 'proxy="crawl/ok"' in text and f"{PROBER_PROXIES} 1.0" in text
                seen = bad.connections
                await asyncio.sleep(3 * INTERVAL)
                assert bad.connections == seen

    asyncio.run(main())


def test_probes_are_spread_over_the_interval_and_start_on_time(r):
    async def main():
        async with FakeProxy("ok") as proxy:
            r.hset(keys.PX_ENDPOINTS, mapping={f"crawl/p{i}": endpoint(f"u{i}", proxy.port) for i in range(100)})
            starts: list[float] = []
            async with Running(Prober(Store(r), config(interval=0.5), member="m1")) as p:
                original = p.delays.add
                p.delays.add = lambda d: (starts.append(time.monotonic()), original(d))[1]
                await until(lambda: len(starts) >= 200, what="200 probes")
            spread = [int((s % 0.5) * 10) for s in starts[:100]]
            assert len(set(spread)) >= 3  # not all at one instant (a loaded machine bunches them, never into one)
            delays = sorted(p.delays.drain())
            assert delays[len(delays) // 2] < 0.05

    asyncio.run(main())


def test_a_restarted_prober_does_not_announce_an_unchanged_verdict(r):
    async def main():
        async with FakeProxy("ok") as proxy:
            stored = json.dumps({"uid": "u1", "healthy": True, "since": 5.0, "message": "m", "egressIP": "", "egressMismatch": False})
            r.hset(keys.PX_ENDPOINTS, mapping={"crawl/a": endpoint("u1", proxy.port), "crawl/b": endpoint("u2", proxy.port)})
            r.hset(keys.PROBE_VERDICTS, mapping={"crawl/a": stored,
                                                 "crawl/b": json.dumps({"uid": "old-uid", "healthy": True, "since": 1.0})})
            async with Running(Prober(Store(r), config(), member="m1")) as p:
                await until(lambda: p.probes >= 8, what="probes")
            assert r.hget(keys.PROBE_VERDICTS, "crawl/a").decode() == stored
            assert verdict(r, "crawl/b")["uid"] == "u2"  # a verdict for another uid does not count
            assert p.verdicts == 1

    asyncio.run(main())


def test_a_probe_of_a_replaced_or_vanished_proxy_gives_no_verdict(r):
    async def main():
        prober = Prober(Store(r), config(), member="m1")
        r.hset(keys.PX_ENDPOINTS, "crawl/a", endpoint("u1", 1111))
        await prober.beat()
        await prober.refresh()
        old = Endpoint("u1", "127.0.0.1", 1111)
        assert prober.owned == {"crawl/a": old}
        r.hset(keys.PX_ENDPOINTS, "crawl/a", endpoint("u2", 1111))  # replaced while the probe ran
        await prober.refresh()
        assert await prober.record("crawl/a", old, Outcome(False, "refused")) is None
        r.hdel(keys.PX_ENDPOINTS, "crawl/a")  # gone while the probe ran
        await prober.refresh()
        assert await prober.record("crawl/a", Endpoint("u2", "127.0.0.1", 1111), Outcome(True, "ok")) is None
        assert r.hgetall(keys.PROBE_VERDICTS) == {}
        await prober.shutdown()

    asyncio.run(main())


def test_a_failed_verdict_write_is_tried_again_by_the_next_probe(r):
    async def main():
        store = Store(r)
        prober = Prober(store, config(), member="m1")
        r.hset(keys.PX_ENDPOINTS, "crawl/a", endpoint("u1", 1111))
        await prober.beat()
        await prober.refresh()
        ep = prober.owned["crawl/a"]
        real = store.proxies.put_verdicts

        def broken(*a):
            raise redis.ConnectionError("down")

        store.proxies.put_verdicts = broken
        assert await prober.record("crawl/a", ep, Outcome(True, "ok")) is None
        store.proxies.put_verdicts = real
        v = await prober.record("crawl/a", ep, Outcome(True, "ok"))
        assert v is not None and v.healthy and verdict(r, "crawl/a")["healthy"] is True
        await prober.shutdown()

    asyncio.run(main())


def test_verdicts_due_together_share_writes_and_a_failed_write_fails_each_of_its_verdicts(r):
    async def main():
        store = Store(r)
        prober = Prober(store, config(thresholds=Thresholds(1, 1)), member="m1")
        r.hset(keys.PX_ENDPOINTS, mapping={f"crawl/p{i}": endpoint(f"u{i}", 1000 + i) for i in range(200)})
        await prober.beat()
        await prober.refresh()
        for h in prober._timers.values():  # no probes of its own: the records below are the only verdicts
            h.cancel()
        real, writes = store.proxies.put_verdicts, []

        def counted(verdicts):
            writes.append(len(verdicts))
            real(verdicts)

        store.proxies.put_verdicts = counted
        owned = dict(prober.owned)
        got = await asyncio.gather(*(prober.record(k, ep, Outcome(True, "ok")) for k, ep in owned.items()))
        assert all(v is not None and v.healthy for v in got)  # every first verdict, each record told it was written
        assert sum(writes) == 200 and len(writes) <= 3, writes  # the first alone, the rest gathered while it ran
        assert r.hlen(keys.PROBE_VERDICTS) == 200 and r.zcard(keys.PX_DUE) == 200

        def broken(verdicts):
            writes.append(len(verdicts))
            raise redis.ConnectionError("down")

        store.proxies.put_verdicts = broken
        del writes[:]
        got = await asyncio.gather(*(prober.record(k, ep, Outcome(False, "refused")) for k, ep in owned.items()))
        assert sum(writes) == 200 and len(writes) <= 3, writes  # each one due (threshold 1), each write failed
        assert got == [None] * 200  # not written: no verdict, and each state keeps its written health
        assert all(prober.states[k].healthy is True for k in owned)
        assert all(verdict(r, k)["healthy"] is True for k in owned)
        await prober.shutdown()

    asyncio.run(main())


def test_replicas_split_the_proxies_and_a_dead_ones_share_moves_within_two_intervals(r):
    async def main():
        async with FakeProxy("ok") as proxy:
            r.hset(keys.PX_ENDPOINTS, mapping={f"crawl/p{i}": endpoint(f"u{i}", proxy.port) for i in range(60)})
            a, b = Prober(Store(r), config(), member="a"), Prober(Store(r), config(), member="b")

            async def die() -> None:  # SIGKILL: no leave, the membership lapses by itself
                for h in b._timers.values():
                    h.cancel()
                b._timers.clear()

            b.shutdown = die
            rb = Running(b)
            async with Running(a), rb:
                await until(lambda: len(a.owned) + len(b.owned) == 60 and a.owned and b.owned, what="a split")
                assert not set(a.owned) & set(b.owned)
                rb.stop.set()
                await rb.task
                died = time.monotonic()
                await until(lambda: len(a.owned) == 60, timeout=3, what="a takes everything")
                took = time.monotonic() - died
                assert took <= 2 * INTERVAL + 0.1, took
                assert r.zscore(keys.PROBER_MEMBERS, "b") is not None  # never left: it lapsed
            assert r.zscore(keys.PROBER_MEMBERS, "a") is None  # a stopped cleanly: it left

    asyncio.run(main())


def test_a_stopping_replica_leaves_at_once(r):
    async def main():
        async with FakeProxy("ok") as proxy:
            r.hset(keys.PX_ENDPOINTS, mapping={f"crawl/p{i}": endpoint(f"u{i}", proxy.port) for i in range(30)})
            a, b = Prober(Store(r), config(interval=1.0), member="a"), Prober(Store(r), config(interval=1.0), member="b")
            rb = Running(b)
            async with Running(a), rb:
                await until(lambda: len(a.owned) + len(b.owned) == 30 and b.owned, what="a split")
                rb.stop.set()
                await rb.task
                assert r.zscore(keys.PROBER_MEMBERS, "b") is None
                await until(lambda: len(a.owned) == 30, timeout=0.6, what="a takes everything within a quarter interval")

    asyncio.run(main())


def test_without_a_target_the_prober_idles(r, caplog):
    async def main():
        async with Running(Prober(Store(r), config(target=None), member="m1")):
            await asyncio.sleep(0.05)

    caplog.set_level("INFO", "fleet.prober")
    asyncio.run(main())
    assert [rec.getMessage() for rec in caplog.records] == ["prober off: no --probe-target configured; idling"]
    assert r.zcard(keys.PROBER_MEMBERS) == 0
