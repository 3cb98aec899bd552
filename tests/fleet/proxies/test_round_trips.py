"""Round trips to Redis per reconcile step (issue 24: a command per fact was
83 commands per Get and 54% of the controller's time in py-spy). The
reconciler of test_steady on a client that counts what it sends: a single
command, a script call or a whole pipeline is one round trip. A step is the
claim with every read (`begin_step`), the answered writes it needs (the
status's compare-and-set, the call's slot with a create's cloud-init) and
the rest with the release (`end_step`); a call's answer is kept in the
round trip that begins the step applying it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import fakeredis
import pytest
import redis

from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies.reconciler import Reconciler, Timing
from fleet.proxies.standalone import Standalone
from fleet.store import Store
from providers.fake import FakeConfig, FakeProvider
from tests.fleet.proxies.test_steady import PROVIDERS, PROXY, Clock, Worker

N = 20


class Counting(fakeredis.FakeRedis):
    """Counts round trips by command (a pipeline's `execute` is one, PIPELINE)."""

    trips: Counter[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0] if isinstance(args[0], str) else args[0].decode()
        try:
            got = super().execute_command(*args, **options)
        except redis.exceptions.NoScriptError:  # a script's first call in this process: loaded, then called again
            raise
        if name != "SCRIPT LOAD":
            self.trips[name] += 1
        return got

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            self.trips["PIPELINE"] += 1
            return execute(raise_on_error)

        pipe.execute = counted
        return pipe


@pytest.fixture
def world(tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    client = Counting()
    client.trips = Counter()
    store = Store(client)
    clock = Clock()
    cfgs = {n: FakeConfig(stateFile=str(tmp_path / f"{n}.json")) for n in PROVIDERS}
    config = ProvidersConfig(tuple(ProviderConfig(n, "fake", cfgs[n]) for n in PROVIDERS))
    worker = Worker({n: FakeProvider(n, cfgs[n]) for n in PROVIDERS}, store)
    objects = Standalone(store.proxies, str(manifests), "test", clock=clock)
    rec = Reconciler(store.proxies, objects, config, worker.send, Timing(poll=10, resync=60, call_timeout=5, max_calls=60),
                     clock=clock, send_list=worker.send_list)
    for i in range(N):
        (manifests / f"p{i:02d}.yaml").write_text(PROXY.format(name=f"p{i:02d}", provider=PROVIDERS[i % 2]))
    return client, store, clock, worker, objects, rec


def trips(client: Counting) -> Counter[str]:
    got = Counter(client.trips)
    client.trips.clear()
    got.pop("GETDEL", None)  # the worker's (it takes the staged cloud-init), not the controller's
    return got


def test_a_proxy_reaches_running_in_a_few_round_trips_per_step(world):
    client, store, clock, worker, objects, rec = world
    store.proxies.schedule_now(objects.sync(), clock.t)
    sync = trips(client)
    assert sum(sync.values()) <= N + 3, sync  # one read of them all, a compare-and-set each, one schedule for all

    rec.run_once()  # each: the claim and its reads, the finalizer, the create's slot (and cloud-init), the end
    create = trips(client)
    assert all(p.finalizers for p in objects.all()) and len(worker.sent) == N
    trips(client)
    assert sum(create.values()) <= 4 * N + 1, create

    worker.run(rec)  # each answer: kept and its step begun (one script), Provisioning, the end
    answered = trips(client)
    assert sum(answered.values()) <= 3 * N, answered

    clock.t += 10
    rec.run_once()  # the poll: reads, the Get's slot, the end (no status moves)
    poll = trips(client)
    assert sum(poll.values()) <= 3 * N + 1, poll

    worker.run(rec)  # the Get's answer: kept and begun, Running, the end
    running = trips(client)
    assert {p.status.phase for p in objects.all()} == {"Running"}
    assert sum(running.values()) <= 3 * N, running

    total = sum((create + answered + poll + running).values()) / N
    assert total <= 13.1, f"{total} round trips per Proxy from declared to Running"  # it was 52 (issue 24)


def test_a_steady_list_costs_a_few_round_trips_whatever_the_proxies(world):
    client, store, clock, worker, objects, rec = world
    for _ in range(3):
        store.proxies.schedule_now(objects.sync(), clock.t)
        rec.run_once()
        worker.run(rec)
        clock.t += 10
    assert {p.status.phase for p in objects.all()} == {"Running"}
    clock.t += 61
    rec.run_once()
    worker.run(rec)
    trips(client)
    rec.resync_lists()
    worker.run(rec)
    got = trips(client)
    assert sum(got.values()) <= 6 * len(PROVIDERS), got  # the gate, the answer's mark, two reads, the success
    assert not got["HGET"] and not got["EVALSHA"] > 2 * len(PROVIDERS), got  # nothing per Proxy
