"""Probe outcomes in a row → verdicts, written only on transitions (pure)."""

from __future__ import annotations

import json

import pytest

from fleet.prober.decide import MAX_MESSAGE, Outcome, State, Thresholds, Verdict, bounded, judge, mismatch, restored

OK = Outcome(True, "CONNECT 200 in 3 ms")
FAIL = Outcome(False, "connect to 10.0.0.1:3128: connection refused")
KEY, UID, IP = "crawl/a", "uid-1", "10.0.0.1"


DEFAULT = Thresholds(3, 1)


def run(outcomes, state=None, thresholds=DEFAULT, ip=IP):
    """The verdicts (healthy, egress) a sequence of outcomes writes, with the probe index."""
    state = state or State(UID)
    out = []
    for i, o in enumerate(outcomes):
        state, v = judge(state, o, KEY, ip, 1000.0 + i, thresholds)
        if v is not None:
            out.append((i, v.healthy, v.egress_ip))
    return out, state


EGRESS = Outcome(True, "GET 200 in 4 ms", "203.0.113.9")


@pytest.mark.parametrize(("name", "outcomes", "thresholds", "want"), [
    ("first good probe: healthy at once", [OK, OK, OK], (3, 1), [(0, True, "")]),
    ("first failed probe: unhealthy at once", [FAIL, FAIL], (3, 1), [(0, False, "")]),
    ("N failures in a row turn it unhealthy", [OK, FAIL, FAIL, FAIL, FAIL], (3, 1), [(0, True, ""), (3, False, "")]),
    ("a good probe resets the failures", [OK, FAIL, FAIL, OK, FAIL, FAIL], (3, 1), [(0, True, "")]),
    ("one success brings it back", [FAIL, OK, OK], (3, 1), [(0, False, ""), (1, True, "")]),
    ("M successes bring it back", [FAIL, OK, FAIL, OK, OK, OK], (3, 3), [(0, False, ""), (5, True, "")]),
    ("threshold 1 flips at once", [OK, FAIL, OK], (1, 1), [(0, True, ""), (1, False, ""), (2, True, "")]),
    ("the first egress is a transition", [OK, EGRESS, EGRESS], (3, 1), [(0, True, ""), (1, True, "203.0.113.9")]),
    ("a failure keeps the egress address", [EGRESS, FAIL, FAIL, FAIL, EGRESS], (3, 1),
     [(0, True, "203.0.113.9"), (3, False, "203.0.113.9"), (4, True, "203.0.113.9")]),
    ("an egress change is a transition", [EGRESS, Outcome(True, "ok", "203.0.113.10")], (3, 1),
     [(0, True, "203.0.113.9"), (1, True, "203.0.113.10")]),
    ("a good probe without an egress keeps it", [EGRESS, OK], (3, 1), [(0, True, "203.0.113.9")]),
])
def test_transitions(name, outcomes, thresholds, want):
    got, _ = run(outcomes, thresholds=Thresholds(*thresholds))
    assert got == want, name


def test_the_verdict_document():
    state, v = judge(State(UID), Outcome(True, "GET 200 in 4 ms", "203.0.113.9"), KEY, IP, 1234.5678, Thresholds())
    assert isinstance(v, Verdict)
    assert json.loads(v.encode()) == {"uid": UID, "healthy": True, "since": 1234.568, "message": "first probe: GET 200 in 4 ms",
                                      "egressIP": "203.0.113.9", "egressMismatch": True}
    state, v = judge(state, FAIL, KEY, IP, 1240.0, Thresholds(1, 1))
    assert v is not None and v.doc()["since"] == 1240.0 and not v.healthy
    assert v.message == "1 probes failed in a row; last: connect to 10.0.0.1:3128: connection refused"
    assert state.since == 1240.0 and state.failures == 1


def test_since_stays_on_an_egress_only_transition():
    state, _ = judge(State(UID), OK, KEY, IP, 100.0, Thresholds())
    state, v = judge(state, EGRESS, KEY, IP, 105.0, Thresholds())
    assert v is not None and v.since == 100.0 and v.message.startswith("egress address 203.0.113.9 (not the instance address)")


def test_the_mismatch_flag_follows_the_endpoint_address():
    same = Outcome(True, "ok", IP)
    state, v = judge(State(UID), same, KEY, IP, 1.0, Thresholds())
    assert v is not None and not v.egress_mismatch
    state, v = judge(state, same, KEY, "10.9.9.9", 2.0, Thresholds())  # the instance reports another address now
    assert v is not None and v.egress_mismatch


@pytest.mark.parametrize(("egress", "ip", "flag"), [("", IP, False), (IP, IP, False), ("203.0.113.1", IP, True)])
def test_mismatch(egress, ip, flag):
    assert mismatch(egress, ip) is flag


def test_messages_are_bounded_and_printable():
    long = Outcome(False, "x" * 2000 + "\n\x00")
    _, v = judge(State(UID), long, KEY, IP, 1.0, Thresholds())
    assert v is not None and len(v.message) == MAX_MESSAGE and v.message.endswith("…")
    assert bounded("a\nb") == "a b"


@pytest.mark.parametrize(("raw", "want"), [
    (None, State(UID)),
    (b"not json", State(UID)),
    (b"[]", State(UID)),
    (json.dumps({"uid": "other", "healthy": True, "since": 5}), State(UID)),
    (json.dumps({"uid": UID, "healthy": "yes"}), State(UID)),
    (json.dumps({"uid": UID, "healthy": False, "since": 5, "message": "m", "egressIP": "203.0.113.9", "egressMismatch": True}),
     State(UID, healthy=False, since=5.0, egress_ip="203.0.113.9", egress_mismatch=True)),
    (json.dumps({"uid": UID, "healthy": True, "since": "x"}), State(UID, healthy=True)),
])
def test_restored(raw, want):
    assert restored(UID, raw) == want


def test_a_restored_verdict_is_not_announced_again():
    state = restored(UID, json.dumps({"uid": UID, "healthy": True, "since": 5.0, "egressIP": "", "egressMismatch": False}))
    got, _ = run([OK, OK, FAIL, FAIL, FAIL], state=state)
    assert got == [(4, False, "")]
    state = restored(UID, json.dumps({"uid": UID, "healthy": False, "since": 5.0}))
    got, _ = run([FAIL, OK], state=state)
    assert got == [(1, True, "")]


def test_a_steady_proxy_keeps_its_state_object_and_long_runs_decide_as_short_ones():
    state, v = judge(State(UID), OK, KEY, IP, 1.0, DEFAULT)
    assert v is not None
    steady, _ = judge(state, OK, KEY, IP, 2.0, DEFAULT)  # the count reaches its threshold (1)
    for i in range(1000):  # a thousand good probes: the same State back, nothing allocated per probe
        again, v = judge(steady, OK, KEY, IP, 3.0 + i, DEFAULT)
        assert again is steady and v is None
    got, state = run([FAIL, FAIL, FAIL], state=steady)
    assert got == [(2, False, "")] and state.failures == 3  # still three failures in a row, not 1,003
    down = state
    for _ in range(1000):
        down, v = judge(down, FAIL, KEY, IP, 9.0, DEFAULT)
        assert v is None and down.failures == 3
    half, v = judge(down, OK, KEY, IP, 10.0, Thresholds(3, 2))
    assert v is None  # one of two good probes after a thousand failures
    _, v = judge(half, OK, KEY, IP, 11.0, Thresholds(3, 2))
    assert v is not None and v.healthy and v.message.startswith("2 good probes in a row")
