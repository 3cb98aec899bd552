import time

import pytest

from providers import base
from providers.base import Deadline
from providers.fake import FakeConfig, FakeTarget, new
from tests.providers import conformance
from tests.providers.conformance import ProviderConformance


class TestFakeConformance(ProviderConformance):
    malformed_ids = ("", "fake", "other/x", "fake/a/b")

    @pytest.fixture
    def provider(self):
        return new(self.provider_name, FakeConfig())


def test_check_scripted_verdicts_in_order():
    p = new("f", FakeConfig(targets=[FakeTarget(name="a"), FakeTarget(name="b", ready=False)], targetCount=2))
    got = p.check(Deadline.after(5))
    assert [t.name for t in got] == ["a", "b", "t0000", "t0001"]
    assert [t.ready for t in got] == [True, False, True, True]
    assert got[1].reason == base.REASON_UNREACHABLE


def test_check_honours_the_deadline():
    p = new("f", FakeConfig(targets=[FakeTarget(name="a")], latencyMs=10_000))
    start = time.monotonic()
    got = p.check(Deadline.after(0.05))
    assert time.monotonic() - start < 1
    assert got[0].reason == base.REASON_TIMEOUT and not got[0].ready


def test_checks_false_has_no_checker():
    assert not isinstance(new("f", FakeConfig(checks=False)), base.Checker)
    assert isinstance(new("f", FakeConfig()), base.Checker)


class TestFakeChecker(conformance.CheckerConformance):
    """The fake has no wire: it can be healthy, scripted down, or slow."""

    checker_states = (conformance.HEALTHY, conformance.UNREACHABLE, conformance.HANGS)

    @pytest.fixture
    def make_checker(self):
        names = ("a", "b", "c")

        def make(state: str):
            if state == conformance.UNREACHABLE:
                return new("f", FakeConfig(targets=[FakeTarget(name=n, ready=False) for n in names]))
            latency = 600_000 if state == conformance.HANGS else 0
            return new("f", FakeConfig(targets=[FakeTarget(name=n) for n in names], latencyMs=latency))

        return make
