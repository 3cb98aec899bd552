"""Beat as real processes against a real redis-server: the lock (one active
beat of two, a standby taking over within the lock's TTL after the active
one is SIGKILLed), the last-round stamp that stops when no beat runs, and no
message for a provider that no worker consumes."""

from __future__ import annotations

import base64
import itertools
import json
import signal
import time

import pytest

from fleet.celery import beat, presence, routing
from fleet.cli import commands
from fleet.health.stored import StoredResults
from fleet.store import Store, keys
from fleet.testing.procs import wait_for

pytestmark = pytest.mark.integration

INTERVAL = 10.0  # the shortest allowed


def queued_ticks(r, queue: str) -> list[float]:
    """The tick time (`scheduled_at`) of every check waiting in `queue`, oldest first."""
    out = []
    for raw in reversed(r.lrange(queue, 0, -1)):  # kombu LPUSHes, consumers pop from the right
        msg = json.loads(raw)
        _args, kwargs, _embed = json.loads(base64.b64decode(msg["body"]))
        out.append(kwargs["scheduled_at"])
    return out


def holder_pid(r) -> int | None:
    owner = beat.holder(Store(r))
    return int(owner.split(":")[1]) if owner else None


def role_of(stack, pid: int) -> str:
    return next(role for role, p in stack.procs.items() if p.pid == pid)


def stays(value_fn, until: float, what: str):
    """Poll `value_fn` until the monotonic time `until`; fail as soon as it changes."""
    first = value_fn()
    while time.monotonic() < until:
        now = value_fn()
        assert now == first, f"{what} changed: {first!r} → {now!r}"
        time.sleep(0.2)
    return first


@pytest.fixture
def fake_worker(redis_server):
    """A heartbeat for provider `p` without a worker: beat sends its checks,
    nobody takes them, so the queue counts them."""
    stop = presence.start(redis_server.url, ["p"], "fake@test", period=1.0)
    wait_for(lambda: presence.live_workers(Store(redis_server.client())).get("p"), 5, "the fake heartbeat")
    yield
    stop.set()


def test_the_lock_is_held_by_one_owner_extended_only_by_it_and_released_only_by_it(redis_server):
    r = redis_server.client()
    assert beat.hold(Store(r), "a", ttl=30)
    assert not beat.hold(Store(r), "b", ttl=30), "held by a"
    assert beat.hold(Store(r), "a", ttl=60) and r.pttl(keys.BEAT_LOCK) > 30_000, "the holder extends it"
    assert not beat.release(Store(r), "b") and beat.holder(Store(r)) == "a", "only the holder releases"
    assert beat.release(Store(r), "a") and beat.holder(Store(r)) is None
    assert beat.hold(Store(r), "b", ttl=0.3)
    wait_for(lambda: beat.hold(Store(r), "a", ttl=30), 5, "the lapsed lock to be taken by another")
    assert beat.holder(Store(r)) == "a"


def test_two_beats_send_one_round_per_interval(redis_server, make_stack, fake_worker):
    stack = make_stack(redis_server.url, [{"name": "p", "type": "fake"}], FLEET_INSTALLATION="twobeats")
    r = redis_server.client()
    stack.start("beat-1", commands.beat_argv())
    stack.start("beat-2", commands.beat_argv())
    queue = routing.provider_queue("p")
    first = wait_for(lambda: queued_ticks(r, queue), 30, "the first round")[0]

    # ~3 intervals after the first round: 4 rounds, not 8
    deadline = first + 3 * INTERVAL + 3.0
    wait_for(lambda: time.time() > deadline, 3 * INTERVAL + 10, "three intervals", interval=0.2)
    ticks = queued_ticks(r, queue)
    assert len(ticks) == 4, ticks
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert all(INTERVAL - 0.5 < g < INTERVAL + 1.5 for g in gaps), gaps
    assert r.llen(routing.CONTROLLER_QUEUE) == 0, "beat sends no overdue sweep: the controller runs it on its own clock"
    assert beat.last_round(Store(r)) == ticks[-1]

    both = stack.log("beat-1") + stack.log("beat-2")
    assert both.count("beat is active") == 1 and both.count("beat is standby") == 1, both[-3000:]
    sched = beat.published_schedule(Store(r))
    assert (sched["interval"], sched["timeout"], sched["overdue_after"], sched["installation"]) == (10.0, 5.0, 25.0, "twobeats")
    assert sched["providers"] == ["p"] and sched["beat"] == beat.holder(Store(r))

    # a clean stop (a rolling update) releases the lock: the standby takes it at its next tick, not at expiry
    active = role_of(stack, holder_pid(r))
    standby = ({"beat-1", "beat-2"} - {active}).pop()
    stack.kill(active, signal.SIGTERM)
    assert "beat released the lock" in stack.log(active)
    wait_for(lambda: holder_pid(r) == stack.procs[standby].pid, beat.STANDBY_EVERY + 2, "the standby to take the released lock")


def test_the_standby_takes_over_within_the_lock_ttl_and_rounds_stop_with_no_beat(redis_server, make_stack, fake_worker):
    stack = make_stack(redis_server.url, [{"name": "p", "type": "fake"}])
    r = redis_server.client()
    stack.start("beat-1", commands.beat_argv())
    stack.start("beat-2", commands.beat_argv())
    first_round = wait_for(lambda: beat.last_round(Store(r)), 30, "the first round")
    wait_for(lambda: "beat is standby" in stack.log("beat-1") + stack.log("beat-2"), 10, "the other beat to be standby")
    active = role_of(stack, holder_pid(r))
    standby = ({"beat-1", "beat-2"} - {active}).pop()

    stack.kill(active)  # SIGKILL: no release, the lock must expire
    killed = time.monotonic()
    wait_for(lambda: holder_pid(r) == stack.procs[standby].pid, beat.LOCK_TTL + 5, "the standby to take the lock")
    took = time.monotonic() - killed
    assert took <= beat.LOCK_TTL + beat.STANDBY_EVERY + 1.0, took
    # the lock is taken first, the line logged just after (through a pipe to the stack's log file)
    wait_for(lambda: "beat is active" in stack.log(standby), 5, "the new active beat to say so")

    # the new active beat resumes one interval after the last round, not at once
    nxt = wait_for(lambda: (x := beat.last_round(Store(r))) and x > first_round and x, INTERVAL + beat.LOCK_TTL + 5,
                   "a round from the new active beat")
    assert nxt - first_round >= INTERVAL - 0.5, "a takeover does not double a round"

    # no beat at all: the stamp stops advancing (the alert's input: deploy/prometheus/tests.yaml RoundsStopped)
    stack.kill(standby)
    last = beat.last_round(Store(r))
    assert stays(lambda: beat.last_round(Store(r)), time.monotonic() + INTERVAL + 3, "the last-round stamp") == last
    assert len(queued_ticks(r, routing.provider_queue("p"))) == 2


def test_no_message_for_a_provider_without_a_worker(redis_server, make_stack):
    providers = [{"name": "served", "type": "fake", "fake": {"targets": [{"name": "t"}]}},
                 {"name": "orphan", "type": "fake", "fake": {"targets": [{"name": "t"}]}}]
    stack = make_stack(redis_server.url, providers)
    r = redis_server.client()
    store = StoredResults(Store(r))
    stack.worker("served")
    stack.controller()
    stack.wait_ready("worker:served", "controller")
    wait_for(lambda: presence.live_workers(Store(r)).get("served"), 10, "served's heartbeat")
    stack.beat()

    first = wait_for(lambda: store.latest("served"), 30, "served's first check")
    second = wait_for(lambda: (x := store.latest("served")) and x.scheduled_at > first.scheduled_at and x, INTERVAL + 10,
                      "served's second check")
    assert second.scheduled_at == beat.last_round(Store(r)) or beat.last_round(Store(r)) > second.scheduled_at
    assert r.llen(routing.provider_queue("orphan")) == 0, "no check into a queue nobody consumes"
    assert store.latest("orphan") is None
    assert beat.skipped_checks(Store(r)) == {"orphan": 2}
    log = stack.log("beat")
    assert log.count("no live worker for provider orphan") == 1, "logged once, not every round"

    # a worker comes: its check goes out at once, not an interval later
    came = time.time()
    stack.worker("orphan")
    got = wait_for(lambda: store.latest("orphan"), 30, "orphan's check once its worker is up")
    assert got.scheduled_at > came and got.scheduled_at < (beat.last_round(Store(r)) or 0) + INTERVAL
    assert "a worker of provider orphan is back" in stack.log("beat")
