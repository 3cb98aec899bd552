"""The steady state applied (issue 24): the reconciler with resync lists, the
store on fakeredis (its Lua scripts included), a clock the test moves, and a
scripted worker running each sent call (lists included) through
`fleet.celery.calls.call` on fake providers whose instance table is a
`stateFile`, so a test deletes or stops an instance behind fleet's back by
editing the backend, not fleet."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import fakeredis
import pytest

from fleet.celery import calls, compression
from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies.reconciler import Reconciler, Timing
from fleet.proxies.standalone import Standalone
from fleet.store import Store
from providers import base
from providers.fake import FakeConfig, FakeProvider
from tests.fleet.proxies.test_reconciler import Clock, run_op, staged_cloud_init

PROXY = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: {provider}
  cloudInit: {{inline: "#cloud-config {name}"}}
"""
PROVIDERS = ("edge", "core")
RESYNC = 60.0


class Worker:
    """Runs sent calls, lists included, on the fake providers; `ops` counts every call run, by (provider, op)."""

    def __init__(self, providers: dict[str, FakeProvider], store: Store) -> None:
        self.providers, self.store = providers, store
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.fail: dict[str, type[base.ProviderError]] = {}  # op → the error every such call raises
        self.ops: Counter[tuple[str, str]] = Counter()

    def send(self, task: str, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
        self.sent.append((task, dict(kwargs), link))

    def send_list(self, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
        self.sent.append(("fleet.list_instances", dict(kwargs), link))

    def run(self, rec: Reconciler) -> int:
        ran = 0
        while self.sent:
            task, kw, link = self.sent.pop(0)
            op = task.removeprefix("fleet.").removesuffix("_instance").removesuffix("_instances")
            name = kw["provider"]
            self.ops[(name, op)] += 1
            ran += 1

            def fn(p: FakeProvider, deadline: base.Deadline, op: str = op, kw: dict[str, Any] = kw, name: str = name) -> Any:
                if op in self.fail:
                    raise base.wrap(self.fail[op], op, name, kw.get("provider_id", ""), "injected")
                return run_op(p, op, kw, deadline, lambda ref: staged_cloud_init(self.store, ref))

            out = calls.call(name, op, fn, timeout=5, attempt=kw.get("attempt", 1), build=lambda _, name=name: self.providers[name],
                             recorder=calls.CallMetrics())
            if op == "list":
                rec.record_list(link["provider"], link["list_id"], out)
            else:
                rec.record(link["key"], link["call_id"], link["provider"], out)
        return ran


@pytest.fixture
def world(tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    store = Store(fakeredis.FakeRedis())
    clock = Clock()
    cfgs = {n: FakeConfig(stateFile=str(tmp_path / f"{n}.json")) for n in PROVIDERS}
    config = ProvidersConfig(tuple(ProviderConfig(n, "fake", cfgs[n]) for n in PROVIDERS))
    worker = Worker({n: FakeProvider(n, cfgs[n]) for n in PROVIDERS}, store)
    objects = Standalone(store.proxies, str(manifests), "test", clock=clock)
    rec = Reconciler(store.proxies, objects, config, worker.send, Timing(poll=10, resync=RESYNC, call_timeout=5, max_calls=60),
                     clock=clock, send_list=worker.send_list)

    class World:
        pass

    w = World()
    w.__dict__.update(store=store, clock=clock, worker=worker, objects=objects, rec=rec, tmp=tmp_path)

    def declare(name: str, provider: str) -> None:
        (manifests / f"{name}.yaml").write_text(PROXY.format(name=name, provider=provider))

    def step(seconds: float = 0.0) -> None:
        """Move the clock, sync the manifests, send the lists due, reconcile what is due, run the calls."""
        clock.t += seconds
        for key in objects.sync():
            store.proxies.schedule(key, clock.t)
        rec.resync_lists()
        for _ in range(20):
            rec.run_once()
            if not worker.run(rec):
                break

    def phases() -> Counter[str]:
        return Counter(p.status.phase for p in objects.all())

    def backend(provider: str) -> dict[str, Any]:
        return json.loads((tmp_path / f"{provider}.json").read_text())

    def edit_backend(provider: str, table: dict[str, Any]) -> None:
        (tmp_path / f"{provider}.json").write_text(json.dumps(table))

    w.declare, w.step, w.phases, w.backend, w.edit_backend = declare, step, phases, backend, edit_backend
    return w


def fifty_running(world) -> None:
    for i in range(50):
        world.declare(f"p{i:02d}", PROVIDERS[i % 2])
    world.step()
    world.step(10)  # the poll's Get: Running
    assert world.phases() == Counter({"Running": 50})
    assert {len(world.backend(n)) for n in PROVIDERS} == {25}


def steady(world, seconds: int) -> Counter[tuple[str, str]]:
    world.worker.ops.clear()
    for _ in range(seconds):
        world.step(1)
    return Counter(world.worker.ops)


def test_a_steady_minute_costs_one_list_per_provider_and_no_get(world):
    fifty_running(world)
    steady(world, 61)  # past the lists sent while they came up
    ops = steady(world, 60)
    assert ops == Counter({("edge", "list"): 1, ("core", "list"): 1}), ops
    assert world.phases() == Counter({"Running": 50})
    assert world.store.proxies.next_due() == float("inf")  # parked: nothing is due until a list or an event says


def test_an_instance_deleted_behind_fleets_back_is_replaced_within_one_interval(world):
    fifty_running(world)
    steady(world, 61)
    victim = world.objects.get("crawl/p07")
    table = world.backend("core")
    del table[victim.status.provider_id]
    world.edit_backend("core", table)
    ops = steady(world, int(RESYNC))
    assert ops[("core", "get")] >= 1 and ops[("core", "create")] == 1, ops
    assert ops[("edge", "get")] == 0 and ops[("edge", "create")] == 0, ops
    assert ops[("core", "get")] <= 2, ops  # the vanished one's, and its new instance's poll: no one else's
    assert world.objects.get("crawl/p07").status.phase == "Running"
    assert world.phases() == Counter({"Running": 50})
    assert victim.status.provider_id in world.backend("core")  # the same name again (from the UID)


def test_a_stopped_instance_is_replaced(world):
    fifty_running(world)
    steady(world, 61)
    victim = world.objects.get("crawl/p10")
    table = world.backend("edge")
    table[victim.status.provider_id]["state"] = "Stopped"
    world.edit_backend("edge", table)
    ops = steady(world, int(RESYNC))
    assert ops[("edge", "delete")] == 1, ops  # seen, and taken down, within one interval
    ops += steady(world, 25)  # Replacing's poll (NotFound), the create, its poll
    assert ops[("edge", "create")] == 1 and ops[("core", "get")] == 0, ops
    assert world.objects.get("crawl/p10").status.phase == "Running"
    assert world.backend("edge")[victim.status.provider_id]["state"] == "Running"


def test_a_failing_list_backs_off_without_a_get_storm(world):
    fifty_running(world)
    steady(world, 61)
    world.worker.fail["list"] = base.Transient
    ops = steady(world, 2 * int(RESYNC))
    assert ops[("edge", "get")] == 0 and ops[("core", "get")] == 0, ops
    # asked again after 1, 2, 4, … s (capped at the interval), not every second and not once an interval
    assert 5 <= ops[("edge", "list")] <= 9, ops
    assert world.phases() == Counter({"Running": 50})  # not in doubt: the answer is
    del world.worker.fail["list"]
    ops = steady(world, int(RESYNC))
    assert ops[("edge", "list")] == 1 and ops[("edge", "get")] == 0, ops
    assert world.store.proxies.list_failed("edge") == 1  # the run of failures ended with the success


def test_a_late_or_repeated_list_answer_is_dropped(world):
    fifty_running(world)
    steady(world, 61)
    world.worker.run(world.rec)
    world.clock.t += RESYNC
    world.rec.resync_lists()
    _task, _kw, link = next(s for s in world.worker.sent if s[1]["provider"] == "edge")
    empty = calls.succeeded("edge", "list", 1, [])  # a list that would make every edge Proxy due
    assert world.rec.record_list("edge", "not-the-current-list", empty) == "stale"
    assert world.rec.record_list("edge", link["list_id"], calls.succeeded("edge", "list", 1, [
        calls.instance_dict(i) for i in world.worker.providers["edge"].list_by_tag(base.Deadline.after(5))])) == "listed: 0 due"
    assert world.rec.record_list("edge", link["list_id"], empty) == "stale"  # a redelivery
    assert world.store.proxies.due(world.clock.t) == []


def test_manifests_are_read_again_only_when_a_file_changed(world, monkeypatch):
    """`Standalone.run`: no YAML parse while nothing changed (only the sync stamp
    GC trusts moves), a re-read on an edit, and on a Redis that lost its data."""
    import threading
    import time

    from fleet.proxies import standalone

    world.declare("a", "edge")
    syncs = []
    real = world.objects.sync

    def counted():
        got = real()
        syncs.append(1)  # once applied
        return got

    monkeypatch.setattr(world.objects, "sync", counted)
    loads = []
    real_load = standalone.load_all
    monkeypatch.setattr(standalone, "load_all", lambda path: loads.append(path) or real_load(path))
    stop = threading.Event()
    t = threading.Thread(target=world.objects.run, args=(stop, lambda keys: None),
                         kwargs={"every": 0.01, "full_every": 0.05}, daemon=True)

    def wait_for(cond, timeout=5.0):
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            time.sleep(0.01)
        return cond()

    stamps = []
    real_mark = world.store.proxies.mark_synced
    monkeypatch.setattr(world.store.proxies, "mark_synced", lambda now: stamps.append(now) or real_mark(now))
    t.start()
    try:
        assert wait_for(lambda: len(syncs) == 1)
        world.store.proxies._redis.delete("fleet:px:synced")
        assert wait_for(lambda: len(syncs) == 2)  # the lost stamp (as a Redis that lost its data): read again
        n = len(stamps)
        assert wait_for(lambda: len(stamps) >= n + 3)  # stamped every period, GC's freshness
        assert len(syncs) == 2  # without reading the manifests
        time.sleep(0.3)  # six periods with nothing changed
        assert len(syncs) == 2 and len(loads) == 2
        world.declare("b", "core")
        # read again at the edit; a read that met the file half-written (created, not yet written) is read once
        # more, its size having moved since the fingerprint taken before the read
        assert wait_for(lambda: world.objects.get("crawl/b") is not None)
        assert wait_for(lambda: len(syncs) >= 3)  # counted once `sync` returns, a moment after it applied b
        assert len(syncs) in (3, 4), len(syncs)
    finally:
        stop.set()
        t.join(5)


def crowd(world, provider: str, n: int) -> None:
    """`n` instances of another installation on the provider's backend: listed, never any Proxy's."""
    table = world.backend(provider)
    for i in range(n):
        table[f"fake/other-{i}"] = {"id": f"fake/other-{i}", "state": "Running", "ip": "127.0.0.9",
                                    "uid": str(uuid.uuid4()), "createdAt": None, "installation": "other", "namespace": ""}
    world.edit_backend(provider, table)


def test_a_list_too_large_for_one_answer_gets_each_running_proxy_a_get_spread_over_the_interval(world, monkeypatch):
    """Past what one answer may take (`MAX_WIRE`, here made small), the worker's
    list is `ListTooLarge`: each of that provider's Running Proxies then gets its
    own Get once an interval, paced, not at once; a vanished instance is still
    found within the interval; the other provider's list goes on; and once the
    list fits again, the Gets stop."""
    fifty_running(world)
    steady(world, 61)
    monkeypatch.setattr(compression, "MAX_WIRE", 5000)  # 25 instances fit, 325 do not
    crowd(world, "edge", 300)
    steady(world, 61)  # the first too-large answer, and the first Gets
    per_second: list[Counter[tuple[str, str]]] = [steady(world, 1) for _ in range(int(RESYNC))]
    ops = sum(per_second, Counter())
    assert ops[("edge", "list")] == 1 and ops[("core", "list")] == 1, ops
    assert 23 <= ops[("edge", "get")] <= 27, ops  # each of the 25 once an interval
    assert max(s[("edge", "get")] for s in per_second) <= 2, per_second  # paced over the interval, no burst
    assert ops[("core", "get")] == 0 and ops[("edge", "create")] == 0, ops
    assert world.phases() == Counter({"Running": 50})
    assert world.store.proxies.list_failed("edge") == 1  # a too-large answer is not an outage backed off from

    victim = world.objects.get("crawl/p04")
    table = world.backend("edge")
    del table[victim.status.provider_id]
    world.edit_backend("edge", table)
    ops = steady(world, int(RESYNC) + 12)
    assert ops[("edge", "create")] == 1, ops  # found by its own Get within the interval (and polled Running)
    assert world.objects.get("crawl/p04").status.phase == "Running"

    monkeypatch.setattr(compression, "MAX_WIRE", 1 << 20)  # fits again
    steady(world, 2 * int(RESYNC))  # the next list vouches; the Gets already paced drain
    ops = steady(world, int(RESYNC))
    assert ops == Counter({("edge", "list"): 1, ("core", "list"): 1}), ops
    assert world.phases() == Counter({"Running": 50})
