"""`fleet.gc.sweep.Sweeper` with its state on fakeredis (the Lua scripts
included), a clock the test moves, sends recorded instead of published, and
the live UIDs from a function the test controls."""

from __future__ import annotations

import json

import fakeredis
import pytest

from fleet.celery import routing
from fleet.gc import metrics
from fleet.gc.decide import DEFAULT_MAX_DELETES
from fleet.gc.live import Unavailable, from_documents
from fleet.gc.metrics import GcCounters, LastSuccessCollector
from fleet.gc.sweep import Policy, Sweeper
from fleet.serving import GC_DELETED, GC_LAST_SUCCESS, GC_SKIPPED, registry_of
from fleet.store import Store

T0 = 1_700_000_000.0
OURS = "prod"


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat()


def listed(id_, uid, age=3600.0, installation=OURS, now=T0):
    return {"id": id_, "state": "Running", "ip": "127.0.0.1", "uid": uid, "createdAt": iso(now - age) if age is not None else None,
            "installation": installation}


def ok(provider, result):
    return {"ok": True, "provider": provider, "op": "list", "attempt": 1, "result": result}


class World:
    def __init__(self, providers=("a", "b", "c"), workers=("a", "b"), live=("uid-live",), no_source=False):
        self.store = Store(fakeredis.FakeRedis())
        self.now = T0
        self.uids = set(live)
        self.live_error: Exception | None = None
        self.workers = set(workers)
        self.sent: list[tuple[str, dict, str, dict]] = []
        self.timers: list[tuple[float, object]] = []
        self.counters = GcCounters(providers)
        self.sweeper = Sweeper(
            self.store.gc, providers, None if no_source else self.read_live, "no Proxies source: test",
            lambda: self.workers, lambda *m: self.sent.append(m),
            Policy(installation=OURS, min_age=600.0, call_timeout=60.0, interval=600.0), self.counters,
            clock=lambda: self.now, timer=lambda delay, fn: self.timers.append((delay, fn)))

    def read_live(self):
        if self.live_error:
            raise self.live_error
        return frozenset(self.uids)

    def lists(self):
        return [(m[1]["provider"], m[3]["sweep"]) for m in self.sent if m[0] == routing.LIST_INSTANCES]

    def deletes(self):
        return [(m[1]["provider"], m[1]["provider_id"]) for m in self.sent if m[0] == routing.DELETE_INSTANCE]

    def sample(self, name, **labels):
        reg = registry_of([*self.counters.collectors(), LastSuccessCollector(self.counters.providers, self.store.gc.last)])
        return reg.get_sample_value(name, labels)


def test_a_sweep_lists_every_provider_with_a_worker_and_deletes_only_orphans(spans):
    w = World()
    assert w.sweeper.start().startswith("started")
    assert [p for p, _ in w.lists()] == ["a", "b"]
    (m, *_) = [m for m in w.sent if m[1]["provider"] == "a"]
    assert m[1] == {"provider": "a", "timeout": 60.0} and m[2] == routing.RECORD_GC_LIST
    assert w.sample(GC_SKIPPED, provider="c", reason=metrics.NO_WORKER) == 1
    sweep = w.lists()[0][1]

    w.now += 5
    answer = [listed("a/orphan", "uid-gone"), listed("a/live", "uid-live"), listed("a/young", "uid-young", age=60),
              listed("a/nouid", ""), listed("a/theirs", "uid-x", installation="staging"), listed("a/unmarked", "uid-y", installation=""),
              listed("a/unknown-age", "uid-z", age=None), "garbage"]
    assert w.sweeper.record_list(ok("a", answer), "a", sweep) == "swept: 2 to delete, 5 kept"
    assert w.deletes() == [("a", "a/orphan"), ("a", "a/unknown-age")]
    delete = next(m for m in w.sent if m[0] == routing.DELETE_INSTANCE)
    assert delete[1] == {"provider": "a", "provider_id": "a/orphan", "timeout": 60.0}
    assert delete[2:] == (routing.RECORD_GC_DELETE, {"provider": "a", "sweep": sweep, "provider_id": "a/orphan"})
    assert w.sample(GC_LAST_SUCCESS, provider="a") == T0 + 5
    assert w.sample(GC_LAST_SUCCESS, provider="b") is None

    (s,) = [s for s in spans.get_finished_spans() if s.name == "gc.sweep"]
    assert dict(s.attributes) == {"provider.name": "a", "gc.sweep": sweep, "gc.listed": 8, "gc.malformed": 1, "gc.live": 1,
                                  "gc.deleted": 2, "gc.kept": 5}

    # deletions count when the provider answers them
    assert w.sample(GC_DELETED, provider="a") == 0
    assert w.sweeper.record_delete({"ok": True, "provider": "a", "op": "delete", "result": None}, "a", sweep, "a/orphan") == "deleted"
    assert w.sweeper.record_delete({"ok": False, "provider": "a", "op": "delete", "message": "x"}, "a", sweep, "a/unknown-age") == "failed"
    assert w.sample(GC_DELETED, provider="a") == 1
    assert w.sample(GC_SKIPPED, provider="a", reason=metrics.DELETE_FAILED) == 1


def test_a_reloaded_config_changes_whom_the_next_sweep_asks():
    w = World(providers=("a", "b"), workers=("a", "b", "late"))
    w.sweeper.start()
    old = w.lists()[0][1]
    w.sweeper.reconfigure(["a", "late"])  # b removed, late added
    assert w.sweeper.record_list(ok("b", [listed("b/orphan", "uid-gone")]), "b", old) == "dropped: unconfigured provider"
    assert w.sample(GC_SKIPPED, provider="late", reason=metrics.NO_WORKER) == 0  # its series from the reload on
    w.now += 3600
    w.sent.clear()
    w.sweeper.lapse(old)
    assert w.sweeper.start().startswith("started")
    assert [p for p, _ in w.lists()] == ["a", "late"]
    assert w.deletes() == []


def test_last_success_follows_the_providers_configured_at_each_scrape():
    store = Store(fakeredis.FakeRedis())
    names = ["a"]
    store.gc.set_last("a", T0)
    store.gc.set_last("late", T0 + 1)
    reg = registry_of([LastSuccessCollector(lambda: names, store.gc.last)])
    assert reg.get_sample_value(GC_LAST_SUCCESS, {"provider": "late"}) is None
    names.append("late")  # a reload added it
    assert reg.get_sample_value(GC_LAST_SUCCESS, {"provider": "late"}) == T0 + 1
    names.remove("a")
    assert reg.get_sample_value(GC_LAST_SUCCESS, {"provider": "a"}) is None


def test_a_provider_whose_list_fails_is_skipped_while_the_others_are_swept():
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    failed = {"ok": False, "provider": "a", "op": "list", "attempt": 1, "error_class": "transient", "message": "refused"}
    assert w.sweeper.record_list(failed, "a", sweep) == "skipped: list-failed"
    assert w.sweeper.record_list(ok("b", [listed("b/orphan", "uid-gone")]), "b", sweep).startswith("swept: 1")
    assert w.deletes() == [("b", "b/orphan")]
    assert w.sample(GC_SKIPPED, provider="a", reason=metrics.LIST_FAILED) == 1
    assert w.sample(GC_LAST_SUCCESS, provider="a") is None and w.sample(GC_LAST_SUCCESS, provider="b") == T0
    assert w.store.gc.current()["p:a"] == metrics.LIST_FAILED and w.store.gc.current()["p:b"] == "swept"


def test_an_answer_is_taken_once_and_only_for_the_current_sweep():
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    answer = ok("a", [listed("a/orphan", "uid-gone")])
    assert w.sweeper.record_list(answer, "a", "an-older-sweep") == "dropped: not awaited"
    assert w.sweeper.record_list(answer, "a", sweep).startswith("swept")
    assert w.sweeper.record_list(answer, "a", sweep) == "dropped: not awaited"  # a redelivery
    assert w.sweeper.record_list(ok("zz", []), "zz", sweep) == "dropped: unconfigured provider"
    assert w.deletes() == [("a", "a/orphan")]


def test_the_live_uids_are_read_when_the_answer_comes():
    """A Proxy created after the sweep began (its instance listed) is live."""
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    w.uids.add("uid-new")
    assert w.sweeper.record_list(ok("a", [listed("a/new", "uid-new")]), "a", sweep).startswith("swept: 0")
    assert w.deletes() == []


def test_live_uids_unavailable_at_an_answer_skips_that_provider():
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    w.live_error = Unavailable("listing Proxies: 503")
    assert w.sweeper.record_list(ok("a", [listed("a/orphan", "uid-gone")]), "a", sweep) == "skipped: live-uids-unavailable"
    w.live_error = None
    assert w.sweeper.record_list(ok("b", [listed("b/orphan", "uid-gone")]), "b", sweep).startswith("swept: 1")
    assert w.deletes() == [("b", "b/orphan")]
    assert w.sample(GC_SKIPPED, provider="a", reason=metrics.LIVE_UNAVAILABLE) == 1


@pytest.mark.parametrize(("no_source", "error", "reason"), [
    (True, None, metrics.NO_SOURCE),
    (False, Unavailable("Redis: down"), metrics.LIVE_UNAVAILABLE),
])
def test_the_whole_sweep_is_skipped_when_the_live_uids_cannot_be_vouched_for(no_source, error, reason):
    w = World(no_source=no_source)
    w.live_error = error
    assert w.sweeper.start() == f"skipped: {reason}"
    assert w.sent == [] and w.store.gc.current() == {}
    assert w.sample(GC_SKIPPED, provider="*", reason=reason) == 1


def test_a_provider_that_never_answers_lapses_once_and_the_lock_frees():
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    w.sweeper.record_list(ok("b", []), "b", sweep)
    w.now += 30
    assert w.sweeper.start() == "skipped: in-progress"  # "a" still pending before the deadline
    assert w.sample(GC_SKIPPED, provider="*", reason=metrics.IN_PROGRESS) == 1
    ((delay, fire),) = w.timers
    assert delay == pytest.approx(90.5)  # call timeout + grace (30 s) + 0.5
    assert w.sweeper.lapse(sweep) == []  # not yet
    w.now = T0 + 91
    assert fire() == ["a"] and w.sweeper.lapse(sweep) == []  # once
    assert w.sample(GC_SKIPPED, provider="a", reason=metrics.NO_ANSWER) == 1
    assert w.sweeper.record_list(ok("a", [listed("a/orphan", "uid-gone")]), "a", sweep) == "dropped: not awaited"
    assert w.sweeper.start().startswith("started")


def test_the_next_sweep_skips_the_providers_a_dead_controller_never_heard_from():
    w = World()
    w.sweeper.start()  # its timer never fires (the process died)
    w.now += 600
    assert w.sweeper.start().startswith("started")
    assert w.sample(GC_SKIPPED, provider="a", reason=metrics.NO_ANSWER) == 1
    assert w.sample(GC_SKIPPED, provider="b", reason=metrics.NO_ANSWER) == 1


def test_deletes_are_capped_per_sweep():
    w = World()
    w.sweeper.start()
    sweep = w.lists()[0][1]
    many = [listed(f"a/{i}", f"uid-{i}") for i in range(DEFAULT_MAX_DELETES + 5)]
    w.sweeper.record_list(ok("a", many), "a", sweep)
    assert len(w.deletes()) == DEFAULT_MAX_DELETES


def test_every_series_exists_from_the_start():
    w = World()
    for p in ("a", "b", "c"):
        assert w.sample(GC_DELETED, provider=p) == 0
        for reason in metrics.SKIP_REASONS:
            assert w.sample(GC_SKIPPED, provider=p, reason=reason) == 0
    for reason in metrics.SWEEP_REASONS:
        assert w.sample(GC_SKIPPED, provider="*", reason=reason) == 0
    with pytest.raises(ValueError):
        w.counters.skip("a", "whatever")


def test_standalone_uids_from_the_stored_objects():
    docs = [json.dumps({"metadata": {"name": "a", "uid": "u1"}}), json.dumps({"metadata": {"name": "b", "uid": "u2"}}).encode()]
    assert from_documents(docs) == {"u1", "u2"}
    for bad in ("{", json.dumps({"metadata": {"name": "c"}}), json.dumps([1])):
        with pytest.raises(Unavailable):
            from_documents([*docs, bad])
