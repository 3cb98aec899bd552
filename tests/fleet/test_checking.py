"""run_check: a checker that breaks its contract is a verdict, not a crash."""

import time

from fleet.checking import run_check
from providers import base
from providers.fake import FakeConfig, FakeTarget, new


class Raising:
    def check(self, deadline):
        raise RuntimeError("bug")


class Hanging:
    def check(self, deadline):
        time.sleep(30)


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


def test_overrunning_checker_is_abandoned(monkeypatch):
    monkeypatch.setattr("fleet.checking.GRACE", 0.1)
    start = time.monotonic()
    r = run_check("p", "x", Hanging, 0.1)
    assert time.monotonic() - start < 2
    assert r.targets[0].reason == base.REASON_CHECKER_ERROR


def test_failing_constructor_is_a_verdict():
    def boom():
        raise ValueError("no credentials")

    r = run_check("p", "x", boom, 1)
    assert r.targets[0].reason == base.REASON_CHECKER_ERROR
    assert "no credentials" in r.targets[0].message
