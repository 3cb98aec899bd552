"""The controller's pure decisions; the seed's status_test.go ported."""

import logging

import pytest

from fleet.health import decide
from fleet.health.results import CheckResult, rfc3339
from providers import base
from providers.base import TargetStatus

T0 = 1_789_225_200.0  # 2026-09-11T15:00:00Z
T1 = T0 + 60


def up(name):
    return TargetStatus(name, name + ":22", True, base.REASON_REACHABLE)


def down(name, reason):
    return TargetStatus(name, name + ":22", False, reason, name + " is down")


def ready_at(name, at):
    return {"name": name, "ready": True, "reason": "Reachable", "lastTransitionTime": rfc3339(at)}


def result(*targets, type_="kvm", supported=True, at=T1):
    return CheckResult("kvm-home", type_, supported, at, tuple(targets))


CASES = [
    ("all ready", None, result(up("nas1"), up("nas2")), "True", "AllTargetsReady", "2 of 2 targets ready", "2/2", [T1, T1]),
    (
        "one target down", None, result(up("nas1"), down("nas2", "Unreachable")),
        "False", "TargetsNotReady", "nas2: Unreachable", "1/2", [T1, T1],
    ),
    (
        "only a flip moves a target's transition time",
        {"targets": [ready_at("nas1", T0), ready_at("nas2", T0)]},
        result(up("nas1"), down("nas2", "Timeout")),
        "False", "TargetsNotReady", "nas2: Timeout", "1/2", [T0, T1],
    ),
    (
        "no checker", None, result(type_="gcp", supported=False),
        "Unknown", "ChecksNotImplemented", "gcp providers have no health check", None, [],
    ),
    ("nothing to check", None, result(), "Unknown", "NoTargets", "the provider has nothing to check", "0/0", []),
]


@pytest.mark.parametrize(("name", "prev", "res", "st", "reason", "message", "targets_ready", "transitions"), CASES)
def test_build_status(name, prev, res, st, reason, message, targets_ready, transitions):
    got = decide.build_status(prev, res)
    cond = decide.ready_of(got)
    assert (cond["status"], cond["reason"], cond["message"]) == (st, reason, message)
    assert got.get("targetsReady") == targets_ready
    assert got["type"] == res.type
    assert got["lastCheckTime"] == rfc3339(T1)
    assert [t["lastTransitionTime"] for t in got.get("targets", [])] == [rfc3339(t) for t in transitions]


def test_condition_keeps_transition_while_unchanged():
    first = decide.build_status(None, result(up("nas1"), at=T0))
    snapshot = repr(first)
    second = decide.build_status(first, result(up("nas1"), at=T1))
    assert decide.ready_of(second)["lastTransitionTime"] == rfc3339(T0)
    assert repr(first) == snapshot, "build_status modified the previous status"
    third = decide.build_status(second, result(down("nas1", "Timeout"), at=T1 + 60))
    assert decide.ready_of(third)["lastTransitionTime"] == rfc3339(T1 + 60)


def test_truncates_long_messages():
    got = decide.build_status(None, result(TargetStatus("nas1", "", False, "Unreachable", "é" * 3000)))
    msg = got["targets"][0]["message"]
    assert len(msg) == decide.MAX_MESSAGE and msg.endswith("…")


def test_condition_message_truncated_too():
    many = [down(f"host-{i:03d}-with-a-long-name", "Unreachable") for i in range(100)]
    cond = decide.ready_of(decide.build_status(None, result(*many)))
    assert len(cond["message"]) == decide.MAX_MESSAGE


def test_target_fields_follow_the_crd_omitempty():
    t = TargetStatus("nas1", "", True, "Reachable", "", 0.084, {"pool": "default"})
    got = decide.build_status(None, result(t))["targets"][0]
    assert got == {"name": "nas1", "ready": True, "reason": "Reachable", "latencyMillis": 84,
                   "lastTransitionTime": rfc3339(T1), "details": {"pool": "default"}}


def test_dropped_target_disappears():
    prev = decide.build_status(None, result(up("a"), up("b")))
    got = decide.build_status(prev, result(up("a")))
    assert [t["name"] for t in got["targets"]] == ["a"]


def test_overdue_status_never_keeps_ready_true():
    prev = decide.build_status(None, result(up("nas1"), at=T0))
    v = decide.overdue_verdict(T0, "provider.kvm-home", 135)
    got = decide.overdue_status(prev, "kvm", v, T0 + 200)
    cond = decide.ready_of(got)
    assert (cond["status"], cond["reason"]) == ("Unknown", "CheckOverdue")
    assert "provider.kvm-home" in cond["message"] and rfc3339(T0) in cond["message"]
    assert cond["lastTransitionTime"] == rfc3339(T0 + 200)
    assert got["targets"] == prev["targets"]
    # applied again later: same status, so no write
    assert decide.overdue_status(got, "kvm", v, T0 + 400) == got


@pytest.mark.parametrize(
    ("last", "seen", "now", "want"),
    [(None, None, 1000, False), (900, None, 1000, False), (800, None, 1000, True), (None, 800, 1000, True),
     (None, 900, 1000, False), (950, 100, 1000, False)],
)
def test_is_overdue(last, seen, now, want):
    assert decide.is_overdue(last, seen, now, 135) is want


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}, {"a": {"y": None}}),
        ({"l": [1, 2]}, {"l": [1]}, {"l": [1]}),
        ({}, {"n": {"x": 1}}, {"n": {"x": 1}}),
    ],
)
def test_merge_patch(old, new, patch):
    assert decide.merge_patch(old, new) == patch


# The seed's TestMonitor_logsOnlyTransitions, as a table over rounds.
def test_transitions_only_on_change():
    rounds = [
        [up("nas1")],
        [up("nas1")],
        [down("nas1", "Unreachable")],
        [down("nas1", "Unreachable")],
        [down("nas1", "Timeout")],
        [up("nas1")],
    ]
    logged = []
    prev = None
    for i, targets in enumerate(rounds):
        cur = result(*targets, at=T0 + i)
        logged += [(t.level, t.message, t.fields["reason"]) for t in decide.transitions(prev, cur)]
        prev = cur
    assert logged == [
        (logging.DEBUG, "provider target ready", "Reachable"),
        (logging.WARNING, "provider target not ready", "Unreachable"),
        (logging.WARNING, "provider target not ready", "Timeout"),
        (logging.INFO, "provider target ready", "Reachable"),
    ]


def test_down_at_first_sight_warns_with_message():
    (t,) = decide.transitions(None, result(down("nas1", "PoolNotFound")))
    assert t.level == logging.WARNING
    assert t.fields == {"provider": "kvm-home", "target": "nas1", "address": "nas1:22", "reason": "PoolNotFound",
                        "message": "nas1 is down"}


@pytest.mark.parametrize(
    ("has_result", "seen", "now", "enabled", "want"),
    [
        (True, None, T1 + 10, True, "AllTargetsReady"),
        (True, None, T1 + 200, True, "CheckOverdue"),
        (True, None, T1 + 200, False, "AllTargetsReady"),  # checks off: nothing is overdue
        (False, None, T1, True, "NotCheckedYet"),
        (False, T1 - 200, T1, True, "CheckOverdue"),
    ],
)
def test_current_verdict(has_result, seen, now, enabled, want):
    r = result(up("nas1")) if has_result else None
    v = decide.current_verdict(r, seen, now, 135, "provider.kvm-home", enabled)
    assert v.reason == want


@pytest.mark.parametrize(
    ("last_round", "now", "blames"),
    [
        (T1 + 190, T1 + 200, "queue provider.kvm-home"),  # rounds go out: the worker is the suspect
        (T1 - 10, T1 + 200, "is fleet beat running?"),  # rounds stopped before the results did
        (None, T1 + 200, "none on record: is fleet beat running?"),
    ],
)
def test_overdue_says_when_beat_stopped(last_round, now, blames):
    v = decide.current_verdict(result(up("nas1")), None, now, 135, "provider.kvm-home", True, last_round)
    assert v.reason == "CheckOverdue" and blames in v.message


def test_rounds_stopped():
    assert decide.rounds_stopped(None, T1, 135)
    assert decide.rounds_stopped(T1 - 136, T1, 135)
    assert not decide.rounds_stopped(T1 - 135, T1, 135)


def test_beat_stopped_message_is_steady():
    """Stamps, not ages: the same dead beat gives the same message later (no writes)."""
    a = decide.current_verdict(result(up("nas1")), None, T1 + 200, 135, "q", True, T1 - 10)
    b = decide.current_verdict(result(up("nas1")), None, T1 + 900, 135, "q", True, T1 - 10)
    assert a == b
