"""Issue 18, items 1 and 3, through the applied path: the real reconciler,
the store on fakeredis (its Lua scripts included), standalone manifests and
calls run through `fleet.celery.calls.call` on a fake provider, on a clock the test
moves. Each test lives the sequence a user would: failures in a row (with a
controller restart in the middle), a spec change, a latch that lifts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.celery import calls
from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies.reconciler import Reconciler
from fleet.proxies.standalone import Standalone
from fleet.store import keys
from providers import base
from providers.fake import FakeConfig
from tests.fleet.proxies.test_reconciler import PROXY, world  # noqa: F401  (the fixture)

KEY = "crawl/a"


def due_in(w: Any) -> float:
    """Seconds from now until the Proxy is due (the requeue the reconciler chose)."""
    score = w.store._redis.zscore(keys.PX_DUE, KEY)
    assert score is not None, "the Proxy is not due at all"
    return round(score - w.clock.t, 3)


def failing_run(w: Any, op: str, n: int, restart_after: int | None = None) -> list[tuple[float, list[str]]]:
    """`n` due retries of a call that keeps failing: (the delay chosen, the calls the retry sent)."""
    seen = []
    for i in range(n):
        delay = due_in(w)
        seen.append((delay, w.step(delay)))
        if restart_after is not None and i + 1 == restart_after:
            restart(w)
    return seen


def restart(w: Any) -> None:
    """A new controller process: nothing kept but Redis (and the manifests)."""
    w.objects = Standalone(w.store.proxies, str(w.dir), "test", clock=w.clock)
    w.rec = Reconciler(w.store.proxies, w.objects, w.rec.config, w.worker.send, w.rec.timing, clock=w.clock)


def running(w: Any) -> None:
    w.declare("a")
    w.step()
    w.step(10)
    assert w.proxy("a").status.phase == "Running"


def test_transient_create_failures_back_off_1_2_4_8_16_32_across_a_restart(world):  # noqa: F811
    world.worker.fail["create"] = base.Transient
    world.declare("a")
    assert world.step() == ["create"]
    seen = failing_run(world, "create", 9, restart_after=3)
    assert [d for d, _ in seen] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert all(ran == ["create"] for _, ran in seen)  # one call per retry, nothing in between
    assert due_in(world) == 300  # capped at 5 m
    assert world.proxy("a").status.condition("Provisioned").reason == "ProviderError"
    del world.worker.fail["create"]
    assert world.step(300) == ["create"]
    assert world.proxy("a").status.phase == "Provisioning"
    assert world.store.proxies.failures(KEY) == 0 and world.store._redis.hget(keys.PX_FAILURES, KEY) is None


def test_the_attempt_sent_to_the_worker_counts_the_failures(world):  # noqa: F811
    world.worker.fail["create"] = base.Transient
    world.declare("a")
    world.step()
    attempts = []
    orig = world.worker.send

    def send(task: str, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
        attempts.append(kwargs["attempt"])
        orig(task, kwargs, link)

    world.rec.send = send
    failing_run(world, "create", 4)
    assert attempts == [2, 3, 4, 5]


def test_a_failing_resync_get_backs_off_and_keeps_running(world):  # noqa: F811
    running(world)
    world.worker.fail["get"] = base.Transient
    assert world.step(60) == ["get"]
    seen = failing_run(world, "get", 6)
    assert [d for d, _ in seen] == [1, 2, 4, 8, 16, 32] and all(r == ["get"] for _, r in seen)
    p = world.proxy("a")
    assert p.status.phase == "Running" and p.status.condition("Ready").status == "True"
    del world.worker.fail["get"]
    world.step(due_in(world))
    assert due_in(world) == 60 and world.store.proxies.failures(KEY) == 0


def test_a_failing_delete_backs_off_with_deletes_only(world):  # noqa: F811
    running(world)
    world.worker.fail["delete"] = base.Transient
    (world.dir / "a.yaml").unlink()
    assert world.step(1) == ["delete"]
    seen = failing_run(world, "delete", 6)
    assert [d for d, _ in seen] == [1, 2, 4, 8, 16, 32]
    assert all(r == ["delete"] for _, r in seen)  # not a Get between (a success that would reset the count)
    del world.worker.fail["delete"]
    assert world.step(due_in(world)) == ["delete"]
    assert world.step(10) == ["get"]
    assert world.proxy("a") is None


def test_a_failing_delete_while_replacing_backs_off(world):  # noqa: F811
    running(world)
    world.worker.fail["delete"] = base.Transient
    world.declare("a", port=3130)
    assert world.step(1) == ["delete"]
    seen = failing_run(world, "delete", 6)
    assert [d for d, _ in seen] == [1, 2, 4, 8, 16, 32] and all(r == ["delete"] for _, r in seen)
    assert world.proxy("a").status.phase == "Replacing"
    del world.worker.fail["delete"]
    world.step(due_in(world))
    assert world.step(10) == ["get", "create"]


def test_a_spec_change_ends_the_run_of_failures(world):  # noqa: F811
    world.worker.fail["create"] = base.Transient
    world.declare("a")
    world.step()
    assert [d for d, _ in failing_run(world, "create", 4)] == [1, 2, 4, 8]
    assert due_in(world) == 16
    world.declare("a", port=3130)  # the user fixes the spec: a fresh start, not the 17th second
    assert world.step(1) == ["create"]
    assert due_in(world) == 1


def test_quota_waits_do_not_count_as_failures(world):  # noqa: F811
    world.worker.fail["create"] = base.Transient
    world.declare("a")
    world.step()
    failing_run(world, "create", 2)  # 1, 2: the next would be 4
    world.worker.fail["create"] = base.QuotaExceeded
    world.step(due_in(world))
    assert due_in(world) == 300
    world.worker.fail["create"] = base.Transient
    world.step(300)
    assert due_in(world) == 8  # the fourth transient failure in a row; the quota wait was not one


def test_a_permanent_resync_answer_does_not_latch_a_running_proxy(world):  # noqa: F811
    running(world)
    world.worker.fail["get"] = base.Permanent  # a 401 while credentials roll out
    assert world.step(60) == ["get"]
    p = world.proxy("a")
    prov = p.status.condition("Provisioned")
    assert p.status.phase == "Running" and p.status.ip == "127.0.0.1" and p.status.provider_id
    assert (prov.status, prov.reason) == ("False", "PermanentError") and "injected" in prov.message
    assert [d for d, _ in failing_run(world, "get", 3)] == [1, 2, 4]
    assert world.store.proxies.endpoints()  # still leasable and probed: the instance is not in doubt
    del world.worker.fail["get"]
    world.step(due_in(world))
    p = world.proxy("a")
    assert p.status.condition("Provisioned").status == "True" and p.status.message == ""


def test_a_permanent_resync_answer_survives_a_probe_verdict(world):  # noqa: F811
    running(world)
    world.worker.fail["get"] = base.Permanent
    world.step(60)
    p = world.proxy("a")
    world.store.proxies.put_verdict(KEY, json.dumps({"uid": p.uid, "healthy": True, "message": ""}), world.clock.t)
    world.step(0.5)
    p = world.proxy("a")
    assert p.status.condition("Healthy").status == "True"
    assert p.status.condition("Provisioned").reason == "PermanentError"  # the verdict does not paper over it


class Refusing:
    """A worker whose providers file lacks `edge` (a config rollout half done): it refuses every call."""

    def __init__(self, w: Any) -> None:
        self.w, self.on = w, True
        self.inner = w.worker.run

    def run(self, rec: Reconciler, store: Any) -> list[str]:
        if not self.on:
            return self.inner(rec, store)
        ran = []
        while self.w.worker.sent:
            task, _, link = self.w.worker.sent.pop(0)
            op = task.removeprefix("fleet.").removesuffix("_instance")
            ran.append(op)
            out = calls.refused("edge", op, "provider 'edge' is not configured on this worker", base.ErrorClass.NOT_CONFIGURED)
            rec.record(link["key"], link["call_id"], link["provider"], out)
        return ran


def test_a_worker_without_the_provider_is_not_configured_and_retried_not_latched(world, monkeypatch):  # noqa: F811
    refusing = Refusing(world)
    monkeypatch.setattr(world.worker, "run", refusing.run)
    world.declare("a")
    assert world.step() == ["create"]
    p = world.proxy("a")
    assert p.status.phase == "Pending" and p.status.condition("Provisioned").reason == "ProviderNotConfigured"
    assert [d for d, _ in failing_run(world, "create", 3)] == [1, 2, 4]
    refusing.on = False  # the worker got the new config
    assert world.step(due_in(world)) == ["create"]
    assert world.proxy("a").status.phase == "Provisioning"


@pytest.mark.parametrize("lift", ["spec", "provider"])
def test_lifting_a_latch_rewrites_phase_conditions_and_message_together(world, lift):  # noqa: F811
    if lift == "spec":
        world.worker.fail["create"] = base.Permanent
        world.declare("a")
        world.step()
        assert world.proxy("a").status.phase == "Failed"
        del world.worker.fail["create"]
        world.declare("a", port=3130)
    else:
        world.declare("a", provider="late")
        world.step()
        assert world.proxy("a").status.condition("Provisioned").reason == "ProviderNotConfigured"
        world.rec.config = ProvidersConfig((*world.rec.config.providers, ProviderConfig("late", "fake", FakeConfig())))
    world.store.proxies.schedule(KEY, world.clock.t)
    world.worker.run = lambda rec, store: []  # look at the status the create is sent with
    world.step(1)
    p = world.proxy("a")
    assert p.status.phase == "Pending" and p.status.message == ""
    for cond in p.status.conditions:
        assert cond.reason not in ("PermanentError", "ProviderNotConfigured"), cond
        assert cond.message == "", cond
        assert cond.observed_generation == p.generation
