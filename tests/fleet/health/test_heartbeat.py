"""Issue 24: ProviderHealth status writes a real cluster can afford, applied.

Through the real recording path (`Controller.record` and `sweep_overdue`,
the `fleet.kube.Writer` with its Redis status cache, the real kubernetes
client) on the HTTP-level fake API, whose request log counts the writes:
a status is written when its verdicts, reasons or conditions change, else
once per --status-heartbeat; latency jitter is no change; a restarted
controller does not rewrite; the round's freshness stays in Redis, `fleet
get ph` and the gauges; CheckOverdue turns Unknown on time, judged from the
stored results, not the last written lastCheckTime.
"""

import json

import fakeredis
import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from fleet import cli, serving
from fleet.config import parse
from fleet.health.metrics import collector_for
from fleet.health.recording import Controller
from fleet.health.results import CheckResult, rfc3339
from fleet.kube import Writer
from fleet.settings import Settings
from fleet.store import Store, keys
from providers.base import TargetStatus
from providers.kubernetes.client import load_configuration

T0 = 1_789_225_200.0
INTERVAL = 60.0
HEARTBEAT = 300.0
NAMES = ("kvm-home", "local")


def res(provider, at, ready=True, reason="Reachable", latency=0.100):
    return CheckResult(provider, "fake", True, at, (TargetStatus("nas1", "nas1:22", ready, reason, latency=latency),))


@pytest.fixture
def redis_client():
    return fakeredis.FakeRedis()


@pytest.fixture
def make(kubeapi, redis_client):
    """A controller process as `Controller.from_settings` builds it: its
    writer caches statuses in the shared Redis."""
    def make(heartbeat=HEARTBEAT):
        store = Store(redis_client)
        writer = Writer(client.ApiClient(load_configuration(kubeapi.kubeconfig_path)), "fleet-test", store.statuses)
        settings = Settings(provider_check_interval=INTERVAL, status_heartbeat=heartbeat, installation="fleet-test")
        return Controller(settings, parse({"providers": [{"name": n, "type": "fake"} for n in NAMES]}), store, writer)

    return make


def status_writes(kubeapi, name=None):
    return [r for r in kubeapi.writes(name) if r.method == "PATCH" and r.path.endswith("/status")]


def round_(ctl, at, **kw):
    """One check round: every provider's result recorded."""
    return {n: ctl.record(res(n, at, **kw)) for n in NAMES}


def gauge(ctl, name, provider):
    reg = CollectorRegistry()
    reg.register(collector_for(ctl))
    return reg.get_sample_value(name, {"provider": provider, "target": "nas1"})


def test_writes_follow_changes_and_the_heartbeat_not_rounds(make, kubeapi, redis_client, capsys, monkeypatch, tmp_path):
    ctl = make()
    # 6 steady rounds, latency jittering under max(10 ms, 20%): one write each (the first)
    for i, latency in enumerate((0.100, 0.104, 0.097, 0.112, 0.091, 0.108)):
        round_(ctl, T0 + INTERVAL * i, latency=latency)
    assert {n: len(status_writes(kubeapi, n)) for n in NAMES} == {"kvm-home": 1, "local": 1}
    st = kubeapi.objects["kvm-home"]["status"]
    assert (st["lastCheckTime"], st["targets"][0]["latencyMillis"]) == (rfc3339(T0), 100)
    last = T0 + INTERVAL * 5

    # freshness between heartbeats: Redis, `fleet get ph` and the gauges have every round
    assert ctl.results.latest("kvm-home").checked_at == last
    assert gauge(ctl, serving.CHECK_TIMESTAMP, "kvm-home") == last
    assert gauge(ctl, serving.CHECK_DURATION, "kvm-home") == pytest.approx(0.108)
    monkeypatch.setattr(Store, "from_url", classmethod(lambda cls, url, **_: cls(redis_client)))
    config = tmp_path / "providers.yaml"
    config.write_text(json.dumps({"providers": [{"name": n, "type": "fake"} for n in NAMES]}))
    assert cli.main(["get", "ph", "kvm-home", "-c", str(config), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["checkedAt"] == rfc3339(last)

    # the 7th round: kvm-home's verdict changes (written at once); local's heartbeat is due
    # (more than 300 s since T0), so it is written too, with its lastCheckTime and latency
    t = T0 + INTERVAL * 6
    assert ctl.record(res("kvm-home", t, ready=False, reason="Refused")) == "patched"
    assert kubeapi.objects["kvm-home"]["status"]["conditions"][0]["status"] == "False"
    assert ctl.record(res("local", t, latency=0.105)) == "patched"
    patch = status_writes(kubeapi, "local")[-1].body["status"]
    assert patch == {"lastCheckTime": rfc3339(t), "targets": [{**st["targets"][0], "latencyMillis": 105}]}
    assert (len(status_writes(kubeapi, "kvm-home")), len(status_writes(kubeapi, "local"))) == (2, 2)

    # small latency jitter, down and up: nothing
    n = len(kubeapi.writes())
    assert ctl.record(res("kvm-home", t + INTERVAL, ready=False, reason="Refused", latency=0.095)) == "not-due"
    assert ctl.record(res("local", t + INTERVAL, latency=0.099)) == "not-due"
    assert len(kubeapi.writes()) == n

    # a controller restart in the middle: the new process decides against the
    # cached written status, so no storm; with the cache gone, a GET each and still no write
    ctl = make()
    assert round_(ctl, t + 2 * INTERVAL, ready=False, reason="Refused") == {"kvm-home": "not-due", "local": "patched"}
    assert len(kubeapi.writes()) == n + 1  # local's verdict changed: its one write
    redis_client.delete(*(keys.status("providerhealths", None, n) for n in NAMES))  # the cache entries expired
    ctl = make()
    gets = len([r for r in kubeapi.requests if r.method == "GET"])
    assert round_(ctl, t + 3 * INTERVAL, ready=False, reason="Refused") == {"kvm-home": "not-due", "local": "not-due"}
    assert len(kubeapi.writes()) == n + 1
    assert len([r for r in kubeapi.requests if r.method == "GET"]) == gets + 2

    # heartbeat elapsed (kvm-home written at T0 + 360): written at T0 + 720, not at T0 + 660
    assert ctl.record(res("kvm-home", T0 + 660, ready=False, reason="Refused")) == "not-due"
    assert ctl.record(res("kvm-home", T0 + 720, ready=False, reason="Refused")) == "patched"
    assert kubeapi.objects["kvm-home"]["status"]["lastCheckTime"] == rfc3339(T0 + 720)

    # and a large latency move is a change
    assert ctl.record(res("local", T0 + 660, ready=False, reason="Refused", latency=0.250)) == "patched"
    assert kubeapi.objects["local"]["status"]["targets"][0]["latencyMillis"] == 250


def test_restart_of_every_provider_writes_at_most_once_each(make, kubeapi, redis_client):
    """A restart with a lost cache, the heartbeat due for all: one write per provider, not more."""
    ctl = make()
    for i in range(6):
        round_(ctl, T0 + INTERVAL * i)
    redis_client.flushall()  # Redis lost too: the results and the cache
    ctl = make()
    before = len(kubeapi.writes())
    for i in range(6, 12):
        round_(ctl, T0 + INTERVAL * i)
    assert len(kubeapi.writes()) - before == 2  # due at T0 + 360 for each (more than 300 s after T0), then not again by T0 + 660


def test_check_overdue_turns_unknown_on_time_without_a_heartbeat(make, kubeapi, redis_client):
    """The written lastCheckTime is up to a heartbeat old; overdue is judged
    from the stored results, so it is neither early nor late."""
    ctl = make()
    for i in range(5):  # the last result at T0 + 240; the last write at T0
        round_(ctl, T0 + INTERVAL * i)
    last = T0 + INTERVAL * 4
    redis_client.set(keys.BEAT_LAST_ROUND, repr(last))
    n = len(kubeapi.writes())
    assert kubeapi.objects["kvm-home"]["status"]["lastCheckTime"] == rfc3339(T0)
    due = last + ctl.settings.overdue_after  # 2 × 60 s + 15 s after the last result
    assert ctl.sweep_overdue(now=due - 1) == []  # long past T0 + overdue_after, still not overdue
    assert len(kubeapi.writes()) == n
    assert ctl.sweep_overdue(now=due + 1) == list(NAMES)
    for name in NAMES:
        cond = kubeapi.objects[name]["status"]["conditions"][0]
        assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == ("Unknown", "CheckOverdue", rfc3339(due + 1))
    assert len(status_writes(kubeapi)) == 4  # the first round's two and the two transitions; no heartbeat between
    ctl.sweep_overdue(now=due + 31)
    assert len(status_writes(kubeapi)) == 4  # a steady overdue state writes nothing
    # a fresh result is a change back: written at once
    assert ctl.record(res("kvm-home", due + 40)) == "patched"
    assert kubeapi.objects["kvm-home"]["status"]["conditions"][0]["status"] == "True"


def redis_commands(redis_client, monkeypatch):
    """The commands the store sends from now on (the round trips: no pipelines here)."""
    calls = []
    real = redis_client.execute_command
    monkeypatch.setattr(redis_client, "execute_command", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    return calls


def test_a_record_costs_one_redis_round_trip_before_its_write(make, kubeapi, redis_client, monkeypatch):
    """Issue 24: the compare-and-set, the previous result and the status cache
    entry come back in one script call; a steady record within the heartbeat
    costs that round trip and no request; a change adds its PATCH and the
    cache's update."""
    ctl = make()
    round_(ctl, T0)  # creates the objects, fills the cache
    calls = redis_commands(redis_client, monkeypatch)
    n = len(kubeapi.requests)
    assert ctl.record(res("local", T0 + INTERVAL, latency=0.101)) == "not-due"
    assert calls == ["EVALSHA"] and len(kubeapi.requests) == n
    calls.clear()
    assert ctl.record(res("local", T0 + 2 * INTERVAL, ready=False, reason="Refused")) == "patched"
    assert calls == ["EVALSHA", "EVALSHA"], "the compare-and-set (with the cache read), then the cache's update"
    assert [r.method for r in kubeapi.requests[n:]] == ["PATCH"]
    assert kubeapi.objects["local"]["status"]["conditions"][0]["status"] == "False"
