"""`decide.resync_diff` and `decide.list_retry`: one row per case (the steady state of issue 24)."""

from __future__ import annotations

import pytest

from fleet.proxies.decide import RunningProxy, list_retry, resync_diff, spread
from providers.base import Instance, State

A = RunningProxy("ns/a", "uid-a", "fake/a", "10.0.0.1", since=100.0)
B = RunningProxy("ns/b", "uid-b", "fake/b", "10.0.0.2", since=100.0)


def inst(pid: str = "fake/a", state: State = State.RUNNING, ip: str = "10.0.0.1", uid: str = "uid-a") -> Instance:
    return Instance(pid, state, ip, uid)


@pytest.mark.parametrize("running, listed, asked_at, due", [
    pytest.param([A], [inst()], None, [], id="listed as it is: nothing to say, costs nothing"),
    pytest.param([A], [], None, ["ns/a"], id="missing from the list: due"),
    pytest.param([A], [inst(pid="fake/other")], None, ["ns/a"], id="only another instance listed: due"),
    pytest.param([A], [inst(state=State.STOPPED)], None, ["ns/a"], id="stopped: due"),
    pytest.param([A], [inst(state=State.TERMINATED)], None, ["ns/a"], id="terminated: due"),
    pytest.param([A], [inst(state=State.PROVISIONING, ip="")], None, ["ns/a"], id="provisioning again: due"),
    pytest.param([A], [inst(uid="uid-other")], None, ["ns/a"], id="another UID on the id: due"),
    pytest.param([A], [inst(ip="10.9.9.9")], None, ["ns/a"], id="another address: due"),
    pytest.param([A, B], [inst()], None, ["ns/b"], id="only the one not vouched for"),
    pytest.param([A, B], [inst(pid="fake/b", ip="10.0.0.2", uid="uid-b"), inst()], None, [], id="both vouched for"),
    pytest.param([], [inst()], None, [], id="an instance no Proxy runs on (GC's business): nothing"),
    pytest.param([A], [], 99.0, [], id="Running since after the list was asked: the list cannot know it"),
    pytest.param([A], [], 100.0, ["ns/a"], id="Running since the moment it was asked: due"),
    pytest.param([RunningProxy("ns/a", "uid-a", "fake/a", "10.0.0.1")], [], 50.0, ["ns/a"],
                 id="since unknown (0): judged"),
    pytest.param([B, A], [], None, ["ns/a", "ns/b"], id="sorted keys"),
])
def test_resync_diff(running, listed, asked_at, due):
    assert resync_diff(running, listed, asked_at) == due


@pytest.mark.parametrize("failures, interval, after", [
    (1, 60.0, 1.0), (2, 60.0, 2.0), (3, 60.0, 4.0), (6, 60.0, 32.0), (7, 60.0, 60.0), (30, 60.0, 60.0),
    (0, 60.0, 1.0), (3, 2.0, 2.0),
])
def test_list_retry_backs_off_up_to_the_interval(failures, interval, after):
    assert list_retry(failures, interval) == after


@pytest.mark.parametrize("keys, start, span, want", [
    ([], 100.0, 60.0, {}),
    (["a"], 100.0, 60.0, {"a": 100.0}),
    (["c", "a", "b"], 100.0, 60.0, {"a": 100.0, "b": 120.0, "c": 140.0}),  # in key order, the last before start + span
    (["a", "b"], 100.0, 0.0, {"a": 100.0, "b": 100.0}),
])
def test_spread_paces_due_times_over_the_span(keys, start, span, want):
    assert spread(keys, start, span) == want
