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
