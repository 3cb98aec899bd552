"""`decide.decide`: what the writer patches into a ProviderHealth, pure
(the stale check on lastCheckTime with its "from the future" guard, and the
merge patch from the status read to the one wanted)."""

import pytest

from fleet.health import decide
from fleet.health.results import rfc3339
from fleet.kube import UNCHANGED, Patch, Skip

T0 = 1_789_225_200.0
NOW = T0 + 10


def obj(**st):
    return {"metadata": {"name": "kvm-home", "resourceVersion": "7"}, **({"status": st} if st else {})}


def checked(at):
    return lambda prev: {**prev, "lastCheckTime": rfc3339(at), "type": "fake"}


@pytest.mark.parametrize("current, want, checked_at, decision", [
    # a new object: the whole status
    (obj(), checked(T0), T0, Patch({"lastCheckTime": rfc3339(T0), "type": "fake"})),
    # a newer check: only what changed
    (obj(lastCheckTime=rfc3339(T0), type="fake"), checked(T0 + 5), T0 + 5, Patch({"lastCheckTime": rfc3339(T0 + 5)})),
    # the object holds a newer check (another replica won): stale
    (obj(lastCheckTime=rfc3339(T0 + 5), type="fake"), checked(T0), T0, Skip(decide.STALE)),
    # ... up to now + the clock skew
    (obj(lastCheckTime=rfc3339(NOW + 30), type="fake"), checked(T0), T0, Skip(decide.STALE)),
    # a lastCheckTime from the future (written before validation) does not block newer writes
    (obj(lastCheckTime=rfc3339(NOW + 31), type="fake"), checked(T0), T0, Patch({"lastCheckTime": rfc3339(T0)})),
    (obj(lastCheckTime="5024-06-01T00:00:00Z"), checked(T0), T0, Patch({"lastCheckTime": rfc3339(T0), "type": "fake"})),
    # the same check again: nothing to write
    (obj(lastCheckTime=rfc3339(T0), type="fake"), checked(T0), T0, Skip(UNCHANGED)),
    # the overdue sweep (no check time) is never stale
    (obj(lastCheckTime=rfc3339(T0 + 5), type="fake"), lambda prev: {**prev, "type": "kvm"}, None, Patch({"type": "kvm"})),
    (obj(lastCheckTime=rfc3339(T0 + 5)), lambda prev: prev, None, Skip(UNCHANGED)),
    # a key dropped from the status becomes null in the merge patch
    (obj(lastCheckTime=rfc3339(T0), type="fake", targets=[{"name": "a"}]),
     lambda prev: {"type": "fake", "lastCheckTime": rfc3339(T0 + 1)}, T0 + 1,
     Patch({"targets": None, "lastCheckTime": rfc3339(T0 + 1)})),
])
def test_decide(current, want, checked_at, decision):
    before = repr(current)
    assert decide.decide(current, want, checked_at, NOW) == decision
    assert repr(current) == before  # the object read is left untouched


def test_decide_with_build_status_patches_the_seed_status():
    from tests.fleet.health.test_recording import res

    got = decide.decide(obj(), lambda prev: decide.build_status(prev, res(at=T0)), T0, NOW)
    assert got == Patch(decide.build_status(None, res(at=T0)))


HB = 300.0  # --status-heartbeat's default


def status(at=T0, ready=True, reason="Reachable", latency=100, message="", cond="True", **extra):
    target = {"name": "nas1", "ready": ready, "reason": reason, "lastTransitionTime": rfc3339(T0)}
    if latency:
        target["latencyMillis"] = latency
    if message:
        target["message"] = message
    return {"type": "kvm", "targetsReady": "1/1" if ready else "0/1", "lastCheckTime": rfc3339(at),
            "conditions": [{"type": "Ready", "status": cond, "reason": "AllTargetsReady", "message": "1 of 1 targets ready",
                            "lastTransitionTime": rfc3339(T0)}],
            "targets": [target], **extra}


@pytest.mark.parametrize("written, new, heartbeat, write", [
    # nothing written yet: write
    ({}, status(), HB, True),
    # the same status: nothing to write
    (status(), status(), HB, False),
    # only lastCheckTime moved, within the heartbeat: no write
    (status(), status(at=T0 + 60), HB, False),
    # ... the heartbeat is due (more than HB later): write
    (status(), status(at=T0 + HB + 1), HB, True),
    (status(), status(at=T0 + HB), HB, False),
    # a verdict changed: write at once
    (status(), status(at=T0 + 60, ready=False), HB, True),
    # a reason changed (still not ready): write
    (status(ready=False, reason="Timeout"), status(at=T0 + 60, ready=False, reason="Unreachable"), HB, True),
    # a message changed: write
    (status(ready=False, message="a"), status(at=T0 + 60, ready=False, message="b"), HB, True),
    # a detail changed (KVM's pool space, GCP's managed instances): write
    (status(), {**status(at=T0 + 60), "targets": [{**status()["targets"][0], "details": {"poolAvailable": "9GiB"}}]},
     HB, True),
    # a condition changed (CheckOverdue, the sweep: same lastCheckTime): write
    (status(), status(cond="Unknown"), HB, True),
    # a target added or removed: write
    (status(), {**status(at=T0 + 60), "targets": []}, HB, True),
    # latency jitter under max(10 ms, 20%): no write
    (status(latency=100), status(at=T0 + 60, latency=119), HB, False),
    (status(latency=100), status(at=T0 + 60, latency=81), HB, False),
    (status(latency=20), status(at=T0 + 60, latency=29), HB, False),  # 10 ms floor
    (status(latency=0), status(at=T0 + 60, latency=9), HB, False),  # 0 is written as no latencyMillis
    # ... at least max(10 ms, 20%): write
    (status(latency=100), status(at=T0 + 60, latency=120), HB, True),
    (status(latency=100), status(at=T0 + 60, latency=80), HB, True),
    (status(latency=20), status(at=T0 + 60, latency=30), HB, True),
    # heartbeat 0: every change is written (the seed's one write per round)
    (status(), status(at=T0 + 60), 0.0, True),
    (status(), status(), 0.0, False),
    # an unreadable written lastCheckTime: write
    ({**status(), "lastCheckTime": "garbage"}, status(at=T0 + 60), HB, True),
    ({k: v for k, v in status().items() if k != "lastCheckTime"}, status(at=T0 + 60), HB, True),
    # a written lastCheckTime from the future (decide lets it through past now + the skew): write
    (status(at=T0 + 86_400), status(at=T0 + 60), HB, True),
])
def test_should_write(written, new, heartbeat, write):
    before = repr(written), repr(new)
    assert decide.should_write(written, new, heartbeat) is write
    assert (repr(written), repr(new)) == before


def test_decide_defers_a_steady_round_until_the_heartbeat():
    written = {"metadata": {"name": "kvm-home", "resourceVersion": "7"}, "status": status()}
    steady = lambda prev: status(at=T0 + 60, latency=105)  # noqa: E731
    assert decide.decide(written, steady, T0 + 60, T0 + 61, HB) == Skip(decide.NOT_DUE)
    due = lambda prev: status(at=T0 + HB + 1, latency=105)  # noqa: E731
    assert decide.decide(written, due, T0 + HB + 1, T0 + HB + 2, HB) == Patch(
        {"lastCheckTime": rfc3339(T0 + HB + 1), "targets": [{**status()["targets"][0], "latencyMillis": 105}]})
    # the merge patch of a change carries the latency too, from the written status
    down = lambda prev: status(at=T0 + 60, latency=105, ready=False)  # noqa: E731
    got = decide.decide(written, down, T0 + 60, T0 + 61, HB)
    assert isinstance(got, Patch) and got.status["targets"][0]["latencyMillis"] == 105
    # a steady round over a lastCheckTime from the future is written, not deferred forever
    future = {"metadata": {"name": "kvm-home", "resourceVersion": "7"}, "status": status(at=T0 + 100)}
    got = decide.decide(future, steady, T0 + 60, T0 + 61, HB)  # T0 + 100 is past now + the 30 s skew
    assert isinstance(got, Patch) and got.status["lastCheckTime"] == rfc3339(T0 + 60)
