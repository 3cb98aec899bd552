"""The controller against fakeredis and the HTTP-level fake of the
CustomObjects API, through the real kubernetes client."""

import dataclasses
import logging

import fakeredis
import pytest
from kubernetes import client

from fleet.config import parse
from fleet.health.recording import Controller
from fleet.health.results import CheckResult, rfc3339
from fleet.kube import PROVIDER_HEALTH, UNCHANGED, Skip, Writer, labels_for, selector_for
from fleet.settings import Settings
from fleet.store import Store, keys
from providers.base import TargetStatus
from providers.kubernetes.client import load_configuration

T0 = 1_789_225_200.0
INSTALLATION = "fleet-test"
PH = "/apis/crawl.example.com/v1alpha1/providerhealths"


def res(provider="kvm-home", at=T0, ready=True, reason="Reachable"):
    return CheckResult(provider, "fake", True, at, (TargetStatus("nas1", "nas1:22", ready, reason),))


def config(*names):
    return parse({"providers": [{"name": n, "type": "fake"} for n in names]})


@pytest.fixture
def redis_client():
    return fakeredis.FakeRedis()


@pytest.fixture
def make(kubeapi, redis_client):
    def make(names=("kvm-home", "local"), interval=60.0, writer=True, installation=INSTALLATION, redis=None, cache=False,
             heartbeat=None):
        store = Store(redis or redis_client)
        w = Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), installation,
                   store.statuses if cache else None) if writer else None
        settings = Settings(provider_check_interval=interval, installation=installation,
                            **({} if heartbeat is None else {"status_heartbeat": heartbeat}))
        return Controller(settings, config(*names), store, w)

    return make


def managed(name, installation=INSTALLATION, labels=None, **status):
    return {"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProviderHealth",
            "metadata": {"name": name, "labels": labels_for(installation) if labels is None else labels},
            **({"status": status} if status else {})}


def test_record_creates_labelled_object_and_patches_status(make, kubeapi):
    assert make().record(res()) == "patched"
    obj = kubeapi.objects["kvm-home"]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "egress-proxies-operator",
                                         "fleet.crawl.example.com/installation": INSTALLATION}
    st = obj["status"]
    assert (st["targetsReady"], st["lastCheckTime"], st["conditions"][0]["status"]) == ("1/1", rfc3339(T0), "True")
    methods = [(r.method, r.path) for r in kubeapi.requests]
    assert methods == [("GET", f"{PH}/kvm-home"), ("POST", PH), ("PATCH", f"{PH}/kvm-home/status")]
    patch = kubeapi.requests[-1]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["metadata"]["resourceVersion"]  # optimistic concurrency


def test_patched_only_when_changed(make, kubeapi):
    ctl = make()
    ctl.record(res(at=T0))
    writes = len(kubeapi.writes())
    assert ctl.writer.publish(PROVIDER_HEALTH, "kvm-home", None, lambda current: Skip(UNCHANGED)) == "unchanged"
    assert len(kubeapi.writes()) == writes
    assert ctl.record(res(at=T0 + 60)) == "not-due"  # only lastCheckTime moved, within --status-heartbeat
    assert len(kubeapi.writes()) == writes
    ctl.record(res(at=T0 + 120, reason="Reachable again"))
    assert len(kubeapi.writes()) == writes + 1
    # the target stayed ready: its transition time is kept
    assert kubeapi.objects["kvm-home"]["status"]["targets"][0]["lastTransitionTime"] == rfc3339(T0)


def test_stale_or_redelivered_result_writes_nothing(make, kubeapi):
    ctl = make()
    ctl.record(res(at=T0 + 60))
    n = len(kubeapi.requests)
    assert ctl.record(res(at=T0 + 60)) == "stale"  # redelivery
    assert ctl.record(res(at=T0)) == "stale"  # out of order
    assert len(kubeapi.requests) == n
    assert ctl.results.latest("kvm-home").checked_at == T0 + 60


def test_older_result_than_the_object_is_not_written(make, kubeapi, redis_client):
    # another replica already wrote a newer status (and this one's store lost it)
    kubeapi.add(managed("kvm-home", lastCheckTime=rfc3339(T0 + 120)))
    assert make().record(res(at=T0)) == "stale"
    assert kubeapi.writes() == []


def test_conflicts_are_retried(make, kubeapi):
    kubeapi.add(managed("kvm-home"))
    kubeapi.conflicts = 2
    assert make().record(res()) == "patched"
    patches = [r for r in kubeapi.requests if r.method == "PATCH"]
    assert len(patches) == 3
    assert kubeapi.objects["kvm-home"]["status"]["lastCheckTime"] == rfc3339(T0)


def test_conflict_from_a_concurrent_write_rereads(make, kubeapi):
    """A write between our GET and PATCH bumps resourceVersion: 409, re-read, retry."""
    ctl = make()
    ctl.record(res(at=T0))
    bumped = {"done": False}

    def sneak(req):
        if not bumped["done"]:
            bumped["done"] = True
            obj = kubeapi.objects["kvm-home"]
            kubeapi._store(obj)  # someone else's write: new resourceVersion
        return None

    kubeapi.script("PATCH", "/status$", sneak)
    assert ctl.record(res(at=T0 + 60, ready=False)) == "patched"
    assert len([r for r in kubeapi.requests if r.method == "PATCH"]) == 3  # first, conflicted, retried


def test_cleanup_deletes_only_labelled_unconfigured(make, kubeapi):
    kubeapi.add(managed("kvm-home"))
    kubeapi.add(managed("retired"))
    kubeapi.add({"metadata": {"name": "foreign"}})
    make(names=("kvm-home",)).start()
    assert sorted(kubeapi.objects) == ["foreign", "kvm-home"]
    (sel,) = [r.query.get("labelSelector") for r in kubeapi.requests if r.method == "GET" and r.path == PH]
    assert sel == [selector_for(INSTALLATION)]
    assert sel == [f"app.kubernetes.io/managed-by=egress-proxies-operator,fleet.crawl.example.com/installation={INSTALLATION}"]


def test_cleanup_lists_a_page_at_a_time(make, kubeapi):
    """Issue 24: start-up's cleanup holds CLEANUP_PAGE objects at once, not all
    of them (300 ProviderHealths of 50 targets had peaked the controller at
    148 MiB), and still sees every page."""
    from fleet.kube.writer import CLEANUP_PAGE

    for i in range(2 * CLEANUP_PAGE + 7):
        kubeapi.add(managed(f"old-{i:03d}"))
    kubeapi.add(managed("kvm-home"))
    make(names=("kvm-home",)).start()
    assert sorted(kubeapi.objects) == ["kvm-home"]
    lists = [r for r in kubeapi.requests if r.method == "GET" and r.path == PH]
    assert len(lists) == 3 and all(r.query.get("limit") == [str(CLEANUP_PAGE)] for r in lists)


def test_checks_off_cleans_up_everything_labelled(make, kubeapi, redis_client):
    kubeapi.add(managed("kvm-home"))
    kubeapi.add({"metadata": {"name": "foreign"}})
    ctl = make(interval=0)
    ctl.results.save_if_newer(res())
    ctl.start()
    assert sorted(kubeapi.objects) == ["foreign"]
    assert ctl.results.latest("kvm-home") is None


def test_start_forgets_results_of_unconfigured_providers(make, redis_client):
    ctl = make(names=("kvm-home",), writer=False)
    ctl.results.save_if_newer(res("gone"))
    ctl.results.save_if_newer(res("kvm-home"))
    ctl.start()
    assert sorted(ctl.results.all()) == ["kvm-home"]


def test_a_reloaded_config_is_tracked_and_removed_providers_are_cleaned_up(make, kubeapi):
    ctl = make(names=("kvm-home", "local"))
    assert ctl.record(res("kvm-home")) == "patched"
    assert ctl.record(res("local")) == "patched"
    assert ctl.record(res("late")) == "dropped"  # not configured yet
    kubeapi.add({"metadata": {"name": "foreign"}})

    assert ctl.reconfigure(config("kvm-home", "late")) == ["local"]
    assert sorted(kubeapi.objects) == ["foreign", "kvm-home"]  # local's object deleted, as at start; not ours kept
    assert sorted(ctl.results.all()) == ["kvm-home"]
    assert ctl.record(res("late", at=T0 + 1)) == "patched"  # the added provider is recorded
    assert ctl.record(res("local", at=T0 + 1)) == "dropped"  # the removed one's worker still running
    assert "late" in kubeapi.objects and "local" not in kubeapi.objects
    # an added provider without a result is expected: CheckOverdue after the overdue time
    ctl.reconfigure(config("kvm-home", "late", "new"))
    ctl.store.marks.first_seen("new", T0)
    assert "new" in ctl.sweep_overdue(now=T0 + ctl.settings.overdue_after + 1)


def test_transition_logs_are_not_repeated_by_a_second_replica(make, caplog):
    a, b = make(writer=False), make(writer=False)  # same Redis, two replicas
    caplog.set_level(logging.INFO, logger="fleet.controller")
    a.record(res(at=T0, ready=False, reason="Unreachable"))
    b.record(res(at=T0, ready=False, reason="Unreachable"))  # the same result again
    b.record(res(at=T0 + 60, ready=False, reason="Unreachable"))  # steady: quiet
    a.record(res(at=T0 + 120, ready=True))
    msgs = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "fleet.controller"]
    assert msgs == [("WARNING", "provider target not ready"), ("INFO", "provider target ready")]


def test_standalone_stores_without_a_cluster(make):
    ctl = make(writer=False)
    assert ctl.record(res()) == "stored"
    stored = ctl.results.latest("kvm-home")
    assert stored.recorded_at >= stored.checked_at
    assert dataclasses.replace(stored, recorded_at=None) == res()


def test_overdue_sweep(make, kubeapi, caplog, redis_client):
    ctl = make(names=("kvm-home", "local"))
    ctl.record(res("kvm-home", at=T0))
    ctl.store.marks.first_seen("local", now=T0)
    caplog.set_level(logging.WARNING, logger="fleet.controller")
    assert ctl.sweep_overdue(now=T0 + 100) == []  # within 2 × 60s + 15s
    later = T0 + 136
    redis_client.set(keys.BEAT_LAST_ROUND, repr(later - 5))  # beat sends rounds: the workers are the suspects
    assert ctl.sweep_overdue(now=later) == ["kvm-home", "local"]
    for name in ("kvm-home", "local"):
        cond = kubeapi.objects[name]["status"]["conditions"][0]
        assert (cond["status"], cond["reason"]) == ("Unknown", "CheckOverdue")
        assert f"provider.{name}" in cond["message"]
    assert "last check: never" in kubeapi.objects["local"]["status"]["conditions"][0]["message"]
    writes = len(kubeapi.writes())
    assert ctl.sweep_overdue(now=later + 60) == ["kvm-home", "local"]
    assert len(kubeapi.writes()) == writes, "a steady overdue status is not rewritten"
    assert [r.getMessage() for r in caplog.records].count("provider check overdue") == 2  # once each
    # a fresh result brings it back
    ctl.record(res("kvm-home", at=later + 61))
    assert kubeapi.objects["kvm-home"]["status"]["conditions"][0]["status"] == "True"


def test_overdue_sweep_without_rounds_blames_beat(make, kubeapi, redis_client):
    """The sweep runs on the controller's clock: with beat's last round as old
    as the results (or none), the message says rounds stopped."""
    ctl = make(names=("kvm-home",))
    ctl.record(res("kvm-home", at=T0))
    for last_round, said in ((None, "none on record"), (T0, rfc3339(T0))):
        if last_round is not None:
            redis_client.set(keys.BEAT_LAST_ROUND, repr(last_round))
        assert ctl.sweep_overdue(now=T0 + 136) == ["kvm-home"]
        msg = kubeapi.objects["kvm-home"]["status"]["conditions"][0]["message"]
        assert f"no check round sent since {said}: is fleet beat running?" in msg, msg


# --- issue 9: crafted or clock-skewed messages ---------------------------------

def dropped(ctl, reason):
    from prometheus_client import CollectorRegistry

    from fleet import serving

    reg = CollectorRegistry()
    for c in ctl.counters.collectors():
        reg.register(c)
    return reg.get_sample_value(serving.RESULTS_DROPPED, {"reason": reason})


CRAFTED = [
    ({"checkedAt": 95_000_000_000.0}, "future"),  # year 5024
    ({"checkedAt": float("inf")}, "invalid"),
    ({"checkedAt": float("nan")}, "invalid"),
    ({"checkedAt": 1e12}, "future"),
    ({"checkedAt": "tomorrow"}, "invalid"),
    ({"targets": [{"name": f"t{i}"} for i in range(5000)]}, "too_large"),
    ({"supported": "yes"}, "invalid"),
]


@pytest.mark.parametrize("override, reason", CRAFTED)
def test_a_crafted_result_is_dropped_counted_and_a_real_one_wins(make, kubeapi, caplog, override, reason):
    import time

    ctl = make()
    now = time.time()
    caplog.set_level(logging.DEBUG, logger="fleet.controller")
    crafted = {**res(ready=True, at=now).to_dict(), **override}
    assert ctl.record_message((crafted,), {}) == "dropped"
    assert ctl.record_message((crafted,), {}) == "dropped"
    assert dropped(ctl, reason) == 2
    assert ctl.results.latest("kvm-home") is None and "kvm-home" not in kubeapi.objects
    warns = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warns) == 1 and warns[0].fields["reason"] == reason and warns[0].fields["field"]  # once, with the field
    real = res(ready=False, reason="Unreachable", at=now).to_dict()
    assert ctl.record_message((real,), {}) == "patched"
    cond = kubeapi.objects["kvm-home"]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "TargetsNotReady")


def test_wrong_call_shapes_are_dropped_not_raised(make):
    ctl = make(writer=False)
    assert ctl.record_message((), {}) == "dropped"
    assert ctl.record_message(("a", "b"), {}) == "dropped"
    assert ctl.record_message(([1, 2],), {}) == "dropped"
    assert dropped(ctl, "invalid") == 3


def test_unknown_provider_is_still_unconfigured(make):
    import time

    ctl = make(writer=False)
    assert ctl.record_message((res("nobody", at=time.time()).to_dict(),), {}) == "dropped"
    assert dropped(ctl, "unconfigured") == 1


def test_logged_pairs_are_bounded(make, caplog, monkeypatch):
    from fleet.health import recording as controller_mod
    from fleet.health.limits import Limits

    monkeypatch.setattr(controller_mod, "LIMITS", Limits(max_reported=3))
    ctl = make(writer=False)
    caplog.set_level(logging.WARNING, logger="fleet.controller")
    for i in range(10):
        ctl.record(res(f"gone-{i}"))
    assert len(caplog.records) == 3 and len(ctl._reported) == 3


@pytest.mark.parametrize("stored", [
    {"checkedAt": 95_000_000_000.0},  # stored before messages were validated: year 5024
    {"checkedAt": float("inf")},  # json.dumps writes Infinity
    {"checkedAt": 1e12},
    {"targets": "garbage"},
])
def test_a_stored_result_from_the_future_does_not_block_forever(make, kubeapi, redis_client, stored):
    import json
    import time


    now = time.time()
    redis_client.set(keys.RESULT + "kvm-home", json.dumps({**res(at=now).to_dict(), **stored}))
    # and the object it had made, with lastCheckTime in year 5024
    kubeapi.add(managed("kvm-home", lastCheckTime="5024-06-01T00:00:00Z", targetsReady="1/1"))
    ctl = make()
    assert ctl.results.latest("kvm-home") is None and ctl.results.all() == {}  # readers do not crash
    assert ctl.record(res(at=now, ready=False, reason="Unreachable")) == "patched"
    assert ctl.results.latest("kvm-home").checked_at == now
    st = kubeapi.objects["kvm-home"]["status"]
    assert (st["lastCheckTime"], st["conditions"][0]["status"]) == (rfc3339(now), "False")


def test_a_clock_within_the_skew_is_accepted(make):
    import time

    ctl = make(writer=False)
    assert ctl.record_message((res(at=time.time() + 20).to_dict(),), {}) == "stored"


def test_with_the_status_cache_a_round_costs_one_patch_and_no_get(make, kubeapi, redis_client):
    """Issue 11: the writer keeps the last written status and resourceVersion
    in Redis, so a record costs the API one PATCH (lastCheckTime moves) and
    no GET, and an unchanged status (a steady overdue sweep) no request.
    With --status-heartbeat 0 every round is a write (issue 24's rule: test_heartbeat.py)."""
    a, b = make(cache=True, heartbeat=0), make(cache=True, heartbeat=0)  # two replicas sharing one Redis
    a.record(res(at=T0))
    assert [r.method for r in kubeapi.requests] == ["GET", "POST", "PATCH"]
    n = len(kubeapi.requests)
    for i in range(1, 11):
        ctl = (a, b)[i % 2]
        assert ctl.record(res(at=T0 + 60 * i, ready=i < 6, reason="Reachable" if i < 6 else "Refused")) == "patched"
        assert [r.method for r in kubeapi.requests[n:]] == ["PATCH"], f"record {i}"
        n = len(kubeapi.requests)
    st = kubeapi.objects["kvm-home"]["status"]
    assert (st["lastCheckTime"], st["targetsReady"]) == (rfc3339(T0 + 600), "0/1")
    assert b.record(res(at=T0 + 600)) == "stale" and len(kubeapi.requests) == n  # a redelivery: nothing
    later = T0 + 600 + a.settings.overdue_after + 1
    a.sweep_overdue(now=later)  # kvm-home goes overdue; local has never reported
    writes = len(kubeapi.requests)
    for ctl in (a, b, a):
        ctl.sweep_overdue(now=later + 30)
    assert len(kubeapi.requests) == writes, "a steady overdue status costs no request"
    assert not [r for r in kubeapi.requests if r.method == "GET" and r.path.endswith("/kvm-home")][1:]
