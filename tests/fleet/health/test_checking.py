"""run_check: a checker that breaks its contract is a verdict, not a crash;
at most one check thread per provider, an abandoned one included."""

import socket
import threading

import pytest

from fleet.health import checking
from fleet.health.checking import STILL_RUNNING, CheckSlots, run_check
from providers import base
from providers.fake import FakeConfig, FakeTarget, new
from tests.leaks import open_sockets, threads_named


@pytest.fixture(autouse=True)
def slots(monkeypatch):
    """A fresh slot registry per test, so one test's stuck checker never
    blocks the next one's provider."""
    s = CheckSlots()
    monkeypatch.setattr(checking, "SLOTS", s)
    return s


@pytest.fixture
def release():
    """Set at teardown: frees the test's stuck checkers."""
    ev = threading.Event()
    yield ev
    ev.set()


class Raising:
    def check(self, deadline):
        raise RuntimeError("bug")


class Stuck:
    """Never returns on its own (until `release`), holding a socket to a
    listener that never answers, as a checker stuck on a dead backend."""

    def __init__(self, release, address=None):
        self.release = release
        self.address = address
        self.calls = 0

    def check(self, deadline):
        self.calls += 1
        if self.address is None:
            self.release.wait()
            return []
        with socket.create_connection(self.address):
            self.release.wait()
        return []


def test_ready_result_carries_schedule_and_worker():
    r = run_check("p", "fake", lambda: new("p", FakeConfig(targets=[FakeTarget(name="a")])), 5, 123.0, "p@h")
    assert (r.provider, r.type, r.supported, r.scheduled_at, r.worker) == ("p", "fake", True, 123.0, "p@h")
    assert r.all_ready and r.checked_at > 0


def test_no_checker_is_unsupported():
    r = run_check("p", "fake", lambda: new("p", FakeConfig(checks=False)), 5)
    assert (r.supported, r.targets) == (False, ())


def test_raising_checker_is_a_checker_error_verdict():
    r = run_check("p", "x", Raising, 5)
    (t,) = r.targets
    assert (t.ready, t.reason) == (False, base.REASON_CHECKER_ERROR)
    assert "RuntimeError: bug" in t.message


def test_overrunning_checker_is_abandoned(monkeypatch, release):
    monkeypatch.setattr(checking, "GRACE", 0.1)
    r = run_check("p", "x", lambda: Stuck(release), 0.1)
    (t,) = r.targets
    assert (t.name, t.reason) == ("checker", base.REASON_CHECKER_ERROR)
    assert "did not return within 0.2s" in t.message


def test_failing_constructor_is_a_verdict():
    def boom():
        raise ValueError("no credentials")

    r = run_check("p", "x", boom, 1)
    assert r.targets[0].reason == base.REASON_CHECKER_ERROR
    assert "no credentials" in r.targets[0].message


def test_a_round_while_the_abandoned_check_runs_is_timeout_and_starts_nothing(monkeypatch, release, slots):
    monkeypatch.setattr(checking, "GRACE", 0.05)
    stuck = Stuck(release)
    builds = []

    def build():
        builds.append(1)
        return stuck

    assert run_check("p", "x", build, 0.05).targets[0].reason == base.REASON_CHECKER_ERROR
    r = run_check("p", "x", build, 5)  # returns at once, not after 5 s
    assert r.supported
    assert [(t.name, t.ready, t.reason, t.message) for t in r.targets] == [
        ("checker", False, base.REASON_TIMEOUT, STILL_RUNNING)
    ]
    assert (stuck.calls, len(builds)) == (1, 1)
    # another provider is not held up
    assert run_check("q", "fake", lambda: new("q", FakeConfig(targets=[FakeTarget(name="a")])), 5).all_ready

    (abandoned,) = [t for t in threading.enumerate() if t.name == "check-p"]
    release.set()
    abandoned.join(5)
    assert not slots.busy("p")
    assert run_check("p", "x", build, 5).targets == ()  # the slot is free again: a real check ran
    assert stuck.calls == 2


def test_a_never_returning_checker_over_20_rounds_leaks_no_thread_or_socket(monkeypatch, release):
    monkeypatch.setattr(checking, "GRACE", 0.05)
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts (backlog), never answers
        stuck = Stuck(release, listener.getsockname())
        sockets_before = open_sockets()
        reasons = []
        for _ in range(20):
            reasons.append(run_check("dead", "x", lambda: stuck, 0.05).targets[0].reason)
            assert threads_named("check-dead") <= 1
            # the stuck checker's one socket (plus its queued peer in the backlog)
            assert open_sockets() - sockets_before <= 2
        assert reasons == [base.REASON_CHECKER_ERROR] + [base.REASON_TIMEOUT] * 19
        assert stuck.calls == 1


def test_slots_hold_one_thread_per_name_until_it_ends():
    s = CheckSlots()
    go = threading.Event()
    t = s.start("a", go.wait)
    assert t is not None and t.name == "check-a"
    assert s.busy("a")
    assert s.start("a", lambda: None) is None  # nothing started
    other = s.start("b", lambda: None)
    assert other is not None
    other.join(5)
    assert not s.busy("b")
    go.set()
    t.join(5)
    assert not s.busy("a")
    again = s.start("a", lambda: None)
    assert again is not None
    again.join(5)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_slot_frees_when_the_check_raises():
    s = CheckSlots()

    def boom():
        raise RuntimeError("x")

    t = s.start("a", boom)
    t.join(5)
    assert not s.busy("a")
