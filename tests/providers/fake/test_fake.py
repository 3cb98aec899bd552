import threading
import time

import pytest
from pydantic import ValidationError

from providers import base
from providers.base import Deadline
from providers.fake import FLAP_MESSAGE, MAX_LATENCY_MS, FakeConfig, FakeTarget, flappers, new, plan
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


# -- round-to-round variation (latencyJitterMs, flapRatio, flapEvery, seed) ------------------------------------


def _rounds(p, n):
    return [p.check(Deadline.after(5)) for _ in range(n)]


def _verdicts(results):
    return [[(t.name, t.ready, t.reason, t.message) for t in r] for r in results]


def test_without_variation_every_round_is_the_same():
    cfg = FakeConfig(targetCount=5)
    assert {plan(cfg, "f", r).latency_ms for r in range(20)} == {0.0}
    assert all(not plan(cfg, "f", r).down for r in range(20))
    v = _verdicts(_rounds(new("f", cfg), 4))
    assert all(r == v[0] for r in v)


def test_uniform_jitter_is_bounded_and_varies():
    cfg = FakeConfig(latencyMs=100, latencyJitterMs=20)
    got = [plan(cfg, "f", r).latency_ms for r in range(200)]
    assert all(100 <= x <= 120 for x in got)
    assert len(set(got)) == 200


def test_lognormal_jitter_is_positive_and_capped():
    cfg = FakeConfig(latencyJitterMs=10, latencyJitter="lognormal")
    got = [plan(cfg, "f", r).latency_ms for r in range(500)]
    assert all(0 < x <= 100 for x in got)
    assert 7 < sorted(got)[250] < 14  # median ≈ latencyJitterMs


def test_total_latency_is_capped():
    cfg = FakeConfig(latencyMs=MAX_LATENCY_MS, latencyJitterMs=MAX_LATENCY_MS)
    assert plan(cfg, "f", 0).latency_ms == MAX_LATENCY_MS


def test_variation_is_deterministic_per_seed_name_and_round():
    cfg = FakeConfig(targetCount=20, latencyJitterMs=5, flapRatio=0.25, seed=7)
    assert [plan(cfg, "f", r) for r in range(10)] == [plan(cfg, "f", r) for r in range(10)]
    other_seed = cfg.model_copy(update={"seed": 8})
    assert [plan(cfg, "f", r).latency_ms for r in range(10)] != [plan(other_seed, "f", r).latency_ms for r in range(10)]
    assert [plan(cfg, "f", r).latency_ms for r in range(10)] != [plan(cfg, "g", r).latency_ms for r in range(10)]
    # two instances (two worker processes) go through the same sequence
    a, b = new("f", cfg), new("f", cfg)
    assert _verdicts(_rounds(a, 4)) == _verdicts(_rounds(b, 4))


def test_the_check_takes_the_planned_latency():
    cfg = FakeConfig(targetCount=1, latencyMs=5, latencyJitterMs=30, seed=1)
    p = new("f", cfg)
    for r in range(3):
        start = time.monotonic()
        got = p.check(Deadline.after(5))
        took = time.monotonic() - start
        want = plan(cfg, "f", r).latency_ms / 1000
        assert want <= got[0].latency <= took
        assert got[0].latency < want + 0.5


def test_flapping_targets_flip_every_flap_every_rounds():
    cfg = FakeConfig(targetCount=10, flapRatio=0.4, flapEvery=3, seed=2)
    flap = flappers(cfg, "f")
    assert len(flap) == 4 and sorted(flap.values()) == [0, 0, 1, 1]  # half start down
    results = _rounds(new("f", cfg), 9)
    downs = [frozenset(t.name for t in r if not t.ready) for r in results]
    assert downs == [plan(cfg, "f", r).down for r in range(9)]
    assert downs[0] == downs[1] == downs[2] and downs[3] == downs[4] == downs[5] and downs[6] == downs[0]
    assert downs[0] | downs[3] == set(flap) and not downs[0] & downs[3]
    for r in results:
        for t in r:
            if not t.ready:
                assert (t.reason, t.message) == (base.REASON_UNREACHABLE, FLAP_MESSAGE)
            else:
                assert t.reason == base.REASON_REACHABLE


def test_any_positive_flap_ratio_flaps_one_target_at_least():
    cfg = FakeConfig(targets=[FakeTarget(name="only")], flapRatio=0.01)
    assert list(flappers(cfg, "f")) == ["only"]
    assert [t[0].ready for t in _rounds(new("f", cfg), 4)] in ([True, False, True, False], [False, True, False, True])


def test_a_flapping_target_reports_its_configured_verdict_off_phase():
    cfg = FakeConfig(targets=[FakeTarget(name="a", reason="Custom", message="m", details={"k": "v"})], flapRatio=1.0)
    got = [r[0] for r in _rounds(new("f", cfg), 2)]
    up = next(t for t in got if t.ready)
    down = next(t for t in got if not t.ready)
    assert (up.reason, up.message, up.details) == ("Custom", "m", {"k": "v"})
    assert (down.reason, down.message, down.details) == (base.REASON_UNREACHABLE, FLAP_MESSAGE, {})


def test_the_deadline_still_wins_over_flapping():
    cfg = FakeConfig(targetCount=4, flapRatio=1.0, latencyMs=10_000)
    got = new("f", cfg).check(Deadline.after(0.05))
    assert all(t.reason == base.REASON_TIMEOUT for t in got)


def test_rounds_are_counted_per_instance_across_threads():
    cfg = FakeConfig(targetCount=2, flapRatio=1.0)
    p = new("f", cfg)
    threads = [threading.Thread(target=p.check, args=(Deadline.after(5),)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p._round == 8


@pytest.mark.parametrize("bad", [
    {"latencyJitterMs": -1}, {"latencyJitterMs": MAX_LATENCY_MS + 1}, {"latencyJitterMs": "5"}, {"latencyJitterMs": 1.5},
    {"latencyJitter": "normal"}, {"flapRatio": -0.1}, {"flapRatio": 1.01}, {"flapRatio": "0.5"}, {"flapRatio": float("nan")},
    {"flapEvery": 0}, {"flapEvery": 10_001}, {"flapEvery": True}, {"seed": -1}, {"seed": 2**31}, {"seed": "1"},
])
def test_variation_config_is_strict_and_bounded(bad):
    with pytest.raises(ValidationError):
        FakeConfig(**bad)


def test_the_instance_table_ignores_variation():
    p = new("f", FakeConfig(targetCount=3, flapRatio=1.0, latencyJitterMs=5))
    pid = p.create(base.CreateRequest(name="x", uid="u"), Deadline.after(5))
    _rounds(p, 2)
    assert p.get(pid, Deadline.after(5)).uid == "u"
    assert [i.id for i in p.list_by_tag(Deadline.after(5))] == [pid]


def test_create_latency_is_honoured_and_bounded_by_the_deadline():
    import time as _time

    from providers import base as _base
    from providers.fake import FakeConfig as _Cfg
    from providers.fake import FakeProvider as _Fake

    p = _Fake("slow", _Cfg(createLatencyMs=200))
    req = _base.CreateRequest(name="proxy-a", uid="u")
    start = _time.monotonic()
    assert p.create(req, _base.Deadline.after(5)) == "fake/proxy-a"
    assert 0.2 <= _time.monotonic() - start < 1
    start = _time.monotonic()
    try:
        _Fake("slow", _Cfg(createLatencyMs=5000)).create(req, _base.Deadline.after(0.1))
    except _base.Transient:
        pass
    else:
        raise AssertionError("a create past its deadline must fail Transient")
    assert _time.monotonic() - start < 1


class TestFakeFileConformance(ProviderConformance):
    """The contract holds with the instance table in a file too."""

    malformed_ids = ("", "fake", "other/x", "fake/a/b")

    @pytest.fixture
    def provider(self, tmp_path):
        return new(self.provider_name, FakeConfig(stateFile=str(tmp_path / "table.json")))


def _request(name: str = "proxy-a", uid: str = "u-a") -> base.CreateRequest:
    return base.CreateRequest(name, uid, "crawl", "a", installation="test")


def test_a_file_table_outlives_the_process_that_wrote_it(tmp_path):
    cfg = FakeConfig(stateFile=str(tmp_path / "table.json"))
    pid = new("f", cfg).create(_request(), Deadline.after(5))
    again = new("f", cfg)  # a worker started after the first was killed
    got = again.get(pid, Deadline.after(5))
    assert (got.uid, got.installation, got.state) == ("u-a", "test", base.State.RUNNING)
    again.delete(pid, Deadline.after(5))
    assert new("f", cfg).list_by_tag(Deadline.after(5)) == []


def test_creates_are_idempotent_by_name_unless_told_otherwise(tmp_path):
    from providers.fake import duplicates

    same = new("f", FakeConfig())
    assert same.create(_request(), Deadline.after(5)) == same.create(_request(), Deadline.after(5))
    assert duplicates(same.list_by_tag(Deadline.after(5))) == {}
    twice = new("f", FakeConfig(idempotentCreate=False, stateFile=str(tmp_path / "t.json")))
    first, second = (twice.create(_request(), Deadline.after(5)) for _ in range(2))
    assert (first, second) == ("fake/proxy-a", "fake/proxy-a-2")
    assert duplicates(twice.list_by_tag(Deadline.after(5))) == {"u-a": ["fake/proxy-a", "fake/proxy-a-2"]}


def test_concurrent_processes_share_the_file_without_losing_a_create(tmp_path):
    cfg = FakeConfig(stateFile=str(tmp_path / "table.json"))
    workers = [new("f", cfg) for _ in range(4)]
    threads = [threading.Thread(target=lambda w=w, i=i: [w.create(_request(f"p{i}-{j}", f"u{i}-{j}"), Deadline.after(5))
                                                        for j in range(10)]) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(new("f", cfg).list_by_tag(Deadline.after(5))) == 40


@pytest.mark.parametrize("path", ["relative/table.json", "/nul\x00l"])
def test_the_state_file_must_be_an_absolute_path(path):
    with pytest.raises(ValidationError, match="absolute path"):
        FakeConfig(stateFile=path)


def test_the_faults_file_fails_the_ops_it_names_while_it_does(tmp_path):
    faults = tmp_path / "faults.json"
    p = new("f", FakeConfig(faultsFile=str(faults)))
    pid = p.create(_request(), Deadline.after(5))  # no file: nothing fails
    faults.write_text('{"list": "Transient", "get": "NotFound"}')
    with pytest.raises(base.Transient, match="injected fault"):
        p.list_by_tag(Deadline.after(5))
    with pytest.raises(base.NotFound):
        p.get(pid, Deadline.after(5))
    p.delete(pid, Deadline.after(5))  # not named: runs
    faults.write_text("")
    assert p.list_by_tag(Deadline.after(5)) == []
    faults.write_text('{"list": "Sometimes"}')  # not a fault it knows: every call says so, none runs unfaulted
    with pytest.raises(base.Permanent, match="faultsFile"):
        p.create(_request("proxy-b"), Deadline.after(5))
    faults.unlink()
    assert p.list_by_tag(Deadline.after(5)) == []
