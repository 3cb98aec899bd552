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


# --- the trust rule: a stored result is validated once, when stored (issue 24) ---

from fleet.health import stored as stored_mod  # noqa: E402
from fleet.health.messages import Rejection  # noqa: E402
from fleet.health.stored import SCHEMA_KEY, STORED_VERSION, decode, encode, trust  # noqa: E402


def tagged(**over):
    return {**json.loads(encode(res(NOW))), **over}


def target(**over):
    return {"name": "t", "address": "t:1", "ready": True, "reason": "Reachable", "message": "", "latencyMillis": 3,
            "details": {}, **over}


def test_encode_tags_and_round_trips():
    r = CheckResult("p", "fake", True, NOW, (TargetStatus("t", "t:1", False, "Refused", "no", 0.012, {"k": "v"}),),
                    NOW - 1, "w@h", NOW)
    doc = json.loads(encode(r))
    assert doc[SCHEMA_KEY] == STORED_VERSION
    assert decode(encode(r), NOW, "p") == r


@pytest.mark.parametrize("doc, reason, field", [
    # content rules are not re-checked for a tagged document: it was rebuilt from a validated message
    (tagged(targets=[target(name="bad\x00name")]), None, None),
    (tagged(targets=[target(message="x" * 5000)]), None, None),
    # ... but they are for an untagged one (stored before the tag): validated in full
    ({k: v for k, v in tagged(targets=[target(name="bad\x00name")]).items() if k != SCHEMA_KEY}, "invalid", "targets[0].name"),
    ({k: v for k, v in tagged().items() if k != SCHEMA_KEY}, None, None),
    # an unknown tag (a newer controller's, after a rollback) is refused, whatever the rest says
    (tagged(**{SCHEMA_KEY: 2}), "invalid", SCHEMA_KEY),
    (tagged(**{SCHEMA_KEY: "1"}), "invalid", SCHEMA_KEY),
    (tagged(**{SCHEMA_KEY: True}), "invalid", SCHEMA_KEY),
    (tagged(**{SCHEMA_KEY: None}), "invalid", SCHEMA_KEY),
    # the shape check of a tagged document
    (tagged(checkedAt=NOW + LIMITS.clock_skew + 1), "future", "checkedAt"),
    (tagged(checkedAt=NOW + LIMITS.clock_skew - 1), None, None),
    (tagged(checkedAt=LIMITS.earliest - 1), "invalid", "checkedAt"),
    (tagged(checkedAt="soon"), "invalid", "checkedAt"),
    (tagged(checkedAt=True), "invalid", "checkedAt"),
    (tagged(checkedAt=10**400), "invalid", "checkedAt"),
    (tagged(provider=""), "invalid", "provider"),
    (tagged(provider="q"), "invalid", "provider"),  # not the key it was read from
    (tagged(supported="yes"), "invalid", "supported"),
    (tagged(type=3), "invalid", "type"),
    (tagged(worker=None), "invalid", "worker"),
    (tagged(scheduledAt="x"), "invalid", "scheduledAt"),
    (tagged(recordedAt=None), None, None),
    (tagged(targets={"t": 1}), "invalid", "targets"),
    (tagged(targets=[target()] * (LIMITS.max_targets + 1)), "invalid", "targets"),
    (tagged(targets=["t"]), "invalid", "targets[0]"),
    (tagged(targets=[target(name=None)]), "invalid", "targets[0].name"),
    (tagged(targets=[target(ready="true")]), "invalid", "targets[0].ready"),
    (tagged(targets=[target(reason=1)]), "invalid", "targets[0].reason"),
    (tagged(targets=[target(latencyMillis="3")]), "invalid", "targets[0].latencyMillis"),
    (tagged(targets=[target(latencyMillis=float("inf"))]), "invalid", "targets[0].latencyMillis"),
    (tagged(targets=[target(details={"k": 1})]), "invalid", "targets[0].details"),
    (tagged(targets=[target(details=[])]), None, None),  # empty: as none
    (tagged(targets=[target(details="x")]), "invalid", "targets[0].details"),
    ([1, 2], "invalid", ""),
    ("p", "invalid", ""),
])
def test_trust_table(doc, reason, field):
    got = trust(doc, NOW, "p")
    if reason is None:
        assert isinstance(got, CheckResult), got
    else:
        assert isinstance(got, Rejection) and (got.reason, got.field) == (reason, field), got


@pytest.mark.parametrize("raw_value, reason", [
    (None, None),  # absent
    ("not json", "invalid"),
    ('{"a": ' * 10_000 + "1" + "}" * 10_000, "invalid"),  # deeper than the JSON decoder goes
    ("x" * (LIMITS.max_message_bytes + 1), "too_large"),
    ('{"schemaVersion": 1, "provider": "p", "checkedAt": 1e400}', "invalid"),  # Infinity once decoded
    ('{"schemaVersion": 1, "provider": "p", "checkedAt": NaN}', "invalid"),
])
def test_decode_never_raises(raw_value, reason):
    got = decode(raw_value, NOW, "p")
    assert (got is None) if reason is None else (isinstance(got, Rejection) and got.reason == reason)


def test_a_tagged_previous_result_is_not_validated_again(r, monkeypatch):
    results = StoredResults(Store(r))
    results.save_if_newer(res(NOW - 60, ready=False), now=NOW)
    monkeypatch.setattr(stored_mod, "validate_message", lambda *a, **kw: pytest.fail("validated a tagged stored result"))
    stored, prev = results.save_if_newer(res(NOW), now=NOW)
    assert stored and prev == res(NOW - 60, ready=False)
    assert results.latest("p", now=NOW) == res(NOW)
    assert list(results.iter_latest(["p", "absent"])) == [res(NOW)]
    assert results.all(now=NOW) == {"p": res(NOW)}


def test_an_unknown_tag_reads_as_absent_is_replaced_and_logged_once(r, caplog):
    r.set(keys.result("p"), json.dumps(tagged(**{SCHEMA_KEY: 99}, checkedAt=NOW + 10)))
    results = StoredResults(Store(r))
    with caplog.at_level("DEBUG", logger="fleet.store"):
        assert results.latest("p", now=NOW) is None
        assert results.latest("p", now=NOW) is None
        assert results.all(now=NOW) == {}
        stored, prev = results.save_if_newer(res(NOW), now=NOW)  # its checkedAt is newer, the value unusable: replaced
    assert stored and prev is None
    assert json.loads(r.get(keys.result("p")))[SCHEMA_KEY] == STORED_VERSION
    warned = [rec for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warned) == 1, [rec.getMessage() for rec in caplog.records]
    assert "unusable stored result" in warned[0].getMessage()
    assert warned[0].fields["field"] == SCHEMA_KEY and "99" in warned[0].fields["detail"]


def test_a_document_under_another_providers_key_is_not_read(r):
    r.set(keys.result("p"), encode(res(NOW)).replace('"provider":"p"', '"provider":"q"'))
    assert StoredResults(Store(r)).latest("p", now=NOW) is None
    assert StoredResults(Store(r)).all(now=NOW) == {}
