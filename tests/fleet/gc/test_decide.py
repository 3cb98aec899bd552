"""The orphan matrix (`fleet.gc.decide`), one case per row of its table,
with an injected clock; and the boundary validation of a list answer
(`fleet.gc.answers`)."""

from __future__ import annotations

import pytest

from fleet.gc import answers
from fleet.gc.decide import DELETE, KEEP, Listed, decide, decide_all, parse_created, short_duration

NOW = 1_700_000_000.0
OURS = "prod"
MIN_AGE = 600.0
LIVE = frozenset({"uid-live"})


def inst(uid: str = "uid-gone", installation: str = OURS, age: float | None = 3600.0, id_: str = "zones/z/instances/i",
         namespace: str = "crawl") -> Listed:
    return Listed(id=id_, uid=uid, state="Running", ip="10.0.0.1", created_at=None if age is None else NOW - age,
                  installation=installation, namespace=namespace)


ALL = ("*",)
SCOPED = ("crawl", "team-b")  # --proxy-namespaces crawl,team-b: the live set covers these only


@pytest.mark.parametrize(("case", "instance", "scope", "verdict", "why"), [
    ("1 empty UID, old and unmarked", inst(uid="", installation=""), ALL, KEEP, "no UID: never collected"),
    ("1 empty UID even when ours and old", inst(uid=""), ALL, KEEP, "no UID: never collected"),
    ("2 no installation mark (before marks, or by hand)", inst(installation=""), ALL, KEEP,
     "no installation mark: never collected"),
    ("3 another installation's", inst(installation="staging"), ALL, KEEP, "another installation's (staging)"),
    ("3 another installation's, even with a live-looking UID", inst(uid="uid-live", installation="staging"), ALL, KEEP,
     "another installation's (staging)"),
    ("4 a namespace outside the scope (narrowed since: its Proxy is not in the live set)", inst(namespace="team-c"),
     SCOPED, KEEP, "namespace team-c not in --proxy-namespaces"),
    ("4 no namespace mark (made before it existed), scoped", inst(namespace=""), SCOPED, KEEP,
     "no namespace mark: outside --proxy-namespaces, never collected"),
    ("4 outside the scope and age unknown", inst(namespace="team-c", age=None), SCOPED, KEEP,
     "namespace team-c not in --proxy-namespaces"),
    ("4 in the scope: decided on", inst(namespace="team-b"), SCOPED, DELETE, "orphan: no Proxy has its UID, older than 10m"),
    ("4 every namespace ('*'): no guard, even unmarked", inst(namespace=""), ALL, DELETE,
     "orphan: no Proxy has its UID, older than 10m"),
    ("5 its Proxy exists", inst(uid="uid-live"), ALL, KEEP, "its Proxy exists"),
    ("5 its Proxy exists, age unknown", inst(uid="uid-live", age=None), ALL, KEEP, "its Proxy exists"),
    ("6 younger than the min age", inst(age=599.0), ALL, KEEP, "younger than 10m"),
    ("6 created in the future (a skewed clock) is young", inst(age=-120.0), ALL, KEEP, "younger than 10m"),
    ("8 age unknown counts as very old", inst(age=None), ALL, DELETE, "orphan, age unknown (counts as very old)"),
    ("9 exactly the min age", inst(age=600.0), ALL, DELETE, "orphan: no Proxy has its UID, older than 10m"),
    ("9 an orphan", inst(age=86400.0), ALL, DELETE, "orphan: no Proxy has its UID, older than 10m"),
    ("9 an orphan in the scope", inst(age=86400.0), SCOPED, DELETE, "orphan: no Proxy has its UID, older than 10m"),
])
def test_the_orphan_matrix(case, instance, scope, verdict, why):
    v = decide(instance, LIVE, OURS, MIN_AGE, NOW, scope)
    assert (v.verdict, v.why) == (verdict, why), case
    assert v.age == (None if instance.created_at is None else NOW - instance.created_at)


def test_the_namespace_guard_applies_through_decide_all():
    got = decide_all([inst(namespace="team-c", id_="a"), inst(namespace="crawl", id_="b")], LIVE, OURS, MIN_AGE, NOW,
                     namespaces=SCOPED)
    assert [v.verdict for v in got] == [KEEP, DELETE]


def test_a_min_age_of_zero_collects_at_once():
    assert decide(inst(age=0.0), LIVE, OURS, 0.0, NOW).verdict == DELETE


def test_rule_7_caps_the_deletes_of_one_sweep_and_duplicates_are_decided_once():
    many = [inst(uid=f"u{i}", id_=f"i{i}") for i in range(5)] + [inst(uid="u0", id_="i0")]
    got = decide_all(many, LIVE, OURS, MIN_AGE, NOW, max_deletes=3)
    assert [v.verdict for v in got] == [DELETE, DELETE, DELETE, KEEP, KEEP]
    assert got[3].why == "delete limit of one sweep reached (3)"


@pytest.mark.parametrize(("text", "want"), [
    ("2023-11-14T22:13:20+00:00", NOW),
    ("2023-11-14T22:13:20Z", NOW),
    ("2023-11-14T22:13:20", None),  # no time zone: unknown
    ("yesterday", None),
    ("", None),
])
def test_creation_times(text, want):
    assert parse_created(text) == want


@pytest.mark.parametrize(("seconds", "text"), [(600, "10m"), (5400, "1h30m"), (45, "45s"), (0, "0s"), (-5, "0s")])
def test_short_duration(seconds, text):
    assert short_duration(seconds) == text


# --- the list answer at the boundary -------------------------------------------------------------

GOOD = {"id": "local/proxy-a", "state": "Running", "ip": "127.0.0.1", "uid": "u1", "createdAt": "2023-11-14T22:13:20+00:00",
        "installation": OURS, "namespace": "crawl"}


def outcome(result, provider="lab", **kw):
    return {"ok": True, "provider": provider, "op": "list", "attempt": 1, "result": result, **kw}


def test_a_good_answer():
    a = answers.parse(outcome([GOOD, {**GOOD, "id": "local/b", "createdAt": None}]), "lab")
    assert a.usable and a.malformed == 0
    assert a.instances == (Listed("local/proxy-a", "u1", "Running", "127.0.0.1", NOW, OURS, "crawl"),
                           Listed("local/b", "u1", "Running", "127.0.0.1", None, OURS, "crawl"))


def test_an_answer_without_installation_marks_reads_as_unmarked():
    old = {k: v for k, v in GOOD.items() if k not in ("installation", "namespace")}
    (i,) = answers.parse(outcome([old]), "lab").instances
    assert (i.installation, i.namespace) == ("", "")


@pytest.mark.parametrize("bad", [
    "not a dict", {**GOOD, "id": ""}, {**GOOD, "id": 7}, {**GOOD, "id": "x" * 1025}, {**GOOD, "uid": None},
    {**GOOD, "uid": ["u"]}, {**GOOD, "createdAt": 1700000000}, {**GOOD, "createdAt": "x" * 65},
    {**GOOD, "installation": None}, {**GOOD, "installation": "x" * 64}, {**GOOD, "state": {}}, {**GOOD, "ip": 1},
    {**GOOD, "namespace": 7}, {**GOOD, "namespace": "x" * 64},
])
def test_malformed_entries_are_left_out_and_counted(bad):
    a = answers.parse(outcome([GOOD, bad]), "lab")
    assert a.usable and len(a.instances) == 1 and a.malformed == 1


def test_an_unparsable_creation_time_is_unknown_not_malformed():
    (i,) = answers.parse(outcome([{**GOOD, "createdAt": "last week"}]), "lab").instances
    assert i.created_at is None


@pytest.mark.parametrize(("raw", "why"), [
    ("text", "not a provider-call outcome"),
    (outcome([], provider="other"), "another provider"),
    ({**outcome([]), "op": "get"}, "not a list's"),
    ({**outcome([]), "ok": "yes"}, "`ok` must be true or false"),
    (outcome({"id": "x"}), "`result` must be a list"),
    (outcome([GOOD] * 11), "11 instances, at most 10"),
])
def test_answers_that_are_refused_whole(raw, why):
    a = answers.parse(raw, "lab", max_instances=10)
    assert not a.usable and why in a.invalid and a.instances == ()


def test_a_failed_list():
    a = answers.parse({"ok": False, "provider": "lab", "op": "list", "error_class": "transient", "message": "boom " * 200}, "lab")
    assert not a.usable and a.failed.startswith("transient: boom") and len(a.failed) <= answers.MAX_TEXT + 1
