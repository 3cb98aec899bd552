"""The compare-and-set on `checkedAt`: one Lua script (`fleet.store.results`)
and its Python side (`fleet.health.stored`), table-tested against fakeredis
(with Lua). A stored value from the future, before 2020 or corrupt counts as
absent; the overdue mark is cleared by the same script."""

import json

import fakeredis
import pytest

from fleet.health.limits import LIMITS
from fleet.health.results import CheckResult
from fleet.health.stored import StoredResults
from fleet.store import Store, keys
from providers.base import TargetStatus

NOW = 1_789_225_200.0


def res(at, ready=True):
    return CheckResult("p", "fake", True, at, (TargetStatus("t", "t:1", ready, "Reachable" if ready else "Refused"),))


def raw(at, **over):
    return json.dumps({**res(at).to_dict(), **over})


@pytest.fixture
def r():
    return fakeredis.FakeRedis()


@pytest.mark.parametrize("stored, new_at, want_stored, want_prev", [
    (None, NOW, True, None),  # nothing stored
    (raw(NOW - 60), NOW, True, NOW - 60),  # newer
    (raw(NOW), NOW - 60, False, NOW),  # older
    (raw(NOW), NOW, False, NOW),  # equal: a redelivery
    (raw(NOW + LIMITS.clock_skew - 1), NOW, False, NOW + LIMITS.clock_skew - 1),  # ahead, within the skew
    (raw(NOW + LIMITS.clock_skew + 1), NOW, True, None),  # from the future: absent
    (raw(1e12), NOW, True, None),  # far future
    (raw(LIMITS.earliest - 1), NOW, True, None),  # before 2020
    ("not json", NOW, True, None),  # corrupt
    ("[1, 2]", NOW, True, None),  # JSON, not a result
    (raw(NOW, checkedAt="soon"), NOW, True, None),  # checkedAt not a number
    (raw(NOW, checkedAt=True), NOW, True, None),
    (raw(NOW + 60, targets=[{"name": "bad name!"}]), NOW, True, None),  # newer checkedAt, invalid rest: replaced
])
def test_compare_and_set_table(r, stored, new_at, want_stored, want_prev):
    if stored is not None:
        r.set(keys.result("p"), stored)
    r.set(keys.overdue("p"), "1")
    got, prev = StoredResults(Store(r)).save_if_newer(res(new_at), now=NOW)
    assert got is want_stored
    assert (prev.checked_at if prev else None) == want_prev
    after = json.loads(r.get(keys.result("p")))
    if want_stored:
        assert after["checkedAt"] == new_at
        assert not r.exists(keys.overdue("p")), "the same script clears the overdue mark"
    else:
        assert r.get(keys.result("p")) == stored.encode()
        assert r.exists(keys.overdue("p")), "a stale result leaves the mark"


def test_the_previous_result_carries_what_transitions_need(r):
    results = StoredResults(Store(r))
    results.save_if_newer(res(NOW - 60, ready=False), now=NOW)
    stored, prev = results.save_if_newer(res(NOW), now=NOW)
    assert stored and prev == res(NOW - 60, ready=False)


def test_one_round_trip_per_result(r, monkeypatch):
    results = StoredResults(Store(r))
    results.save_if_newer(res(NOW - 60), now=NOW)
    calls = []
    real = r.execute_command
    monkeypatch.setattr(r, "execute_command", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    assert results.save_if_newer(res(NOW), now=NOW)[0]
    assert calls == ["EVALSHA"]
