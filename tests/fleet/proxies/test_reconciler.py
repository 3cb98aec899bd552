"""The reconciler applied end to end in one process: standalone manifests,
the store on fakeredis (its Lua scripts included), a clock the test moves,
and a scripted "worker" that runs each sent call through `fleet.celery.calls.call`
on a fake provider, so outcomes have the real shape."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest

from fleet.celery import calls
from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies import decide as rules
from fleet.proxies.reconciler import Reconciler, Timing
from fleet.proxies.standalone import Standalone
from fleet.store import Store
from providers import base
from providers.fake import FakeConfig, FakeProvider
from tasks import provider_calls

PROXY = """
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl{labels}}}
spec:
  provider: {provider}
  port: {port}
  cloudInit: {{inline: "#cloud-config SENTINEL-{name}"}}
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def staged_cloud_init(store: Store, ref: str) -> str:
    """The cloud-init text a create's call staged, taken once (as the worker's GETDEL)."""
    text = store.proxies.take_cloud_init(ref)
    return text.decode() if text else ""


def run_op(p: FakeProvider, op: str, kw: dict[str, Any], deadline: base.Deadline, cloud_init: Callable[[str], str]) -> Any:
    """What a provider worker runs for one reconciler call (tasks/provider_calls.py), in-process on a fake;
    `cloud_init(ref)` answers a create's staged text."""
    if op == "create":
        req, ref = calls.request_from_dict({k: v for k, v in kw.items() if k not in ("provider", "timeout", "attempt")})
        return p.create(dataclasses.replace(req, cloud_init=cloud_init(ref)), deadline)
    if op == "get":
        return provider_calls.get_instance.run(p, deadline, kw["provider_id"])
    if op == "list":
        return provider_calls.list_instances.run(p, deadline)
    return p.delete(kw["provider_id"], deadline)


class Worker:
    """Runs sent calls on a provider (a FakeProvider, or an upstream one) when told to (`drain`); can fail them."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.fail: dict[str, type[base.ProviderError]] = {}
        self.cloud_init: list[str] = []

    def send(self, task: str, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
        self.sent.append((task, dict(kwargs), link))

    def take_cloud_init(self, store: Store) -> Callable[[str], str]:
        def take(ref: str) -> str:
            self.cloud_init.append(staged_cloud_init(store, ref))
            return self.cloud_init[-1]
        return take

    def run(self, rec: Reconciler, store: Store) -> list[str]:
        ran = []
        while self.sent:
            task, kw, link = self.sent.pop(0)
            op = task.removeprefix("fleet.").removesuffix("_instance")
            ran.append(op)

            def fn(p: FakeProvider, deadline: base.Deadline, op: str = op, kw: dict[str, Any] = kw) -> Any:
                if op in self.fail:
                    raise base.wrap(self.fail[op], op, "edge", kw.get("provider_id", ""), "injected")
                return run_op(p, op, kw, deadline, self.take_cloud_init(store))

            out = calls.call("edge", op, fn, timeout=5, attempt=kw["attempt"], build=lambda _: self.provider,
                             recorder=calls.CallMetrics())
            rec.record(link["key"], link["call_id"], link["provider"], out)
        return ran


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, ProviderConfig("edge", "fake", FakeConfig()), FakeProvider("edge", FakeConfig()))


def make_world(tmp_path, pc: ProviderConfig, provider: Any) -> Any:
    """Provider `edge` configured as `pc`, its calls run on `provider`, manifests in tmp_path/proxies."""
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    store = Store(fakeredis.FakeRedis())
    clock = Clock()
    config = ProvidersConfig((pc,))
    worker = Worker(provider)
    objects = Standalone(store.proxies, str(manifests), "test", clock=clock)
    rec = Reconciler(store.proxies, objects, config, worker.send, Timing(poll=10, resync=60, call_timeout=5, max_calls=3),
                     clock=clock)

    class World:
        pass

    w = World()
    w.__dict__.update(dir=manifests, store=store, clock=clock, provider=provider, worker=worker, objects=objects, rec=rec)

    def declare(name: str, provider: str = "edge", port: int = 3128, pool: str | None = None) -> None:
        labels = f", labels: {{crawl.example.com/pool: {pool!r}}}" if pool is not None else ""
        (manifests / f"{name}.yaml").write_text(PROXY.format(name=name, provider=provider, port=port, labels=labels))

    def step(seconds: float = 0.0) -> list[str]:
        """Move the clock, sync the manifests, reconcile what is due, run the calls."""
        clock.t += seconds
        for key in objects.sync():
            store.proxies.schedule(key, clock.t)
        ran = []
        for _ in range(20):
            rec.run_once()
            got = worker.run(rec, store)
            ran += got
            if not got:
                break
        return ran

    def proxy(name: str):
        return objects.get(f"crawl/{name}")

    w.declare, w.step, w.proxy = declare, step, proxy
    return w


def test_pending_to_running_in_three_writes_and_then_quiet(world):
    world.declare("a")
    assert world.step() == ["create"]
    p = world.proxy("a")
    assert (p.status.phase, p.status.provider_id) == ("Provisioning", f"fake/{base.name_from_uid(p.uid)}")
    assert world.step(9) == []  # the 10 s poll is not due yet
    assert world.step(1) == ["get"]
    p = world.proxy("a")
    assert (p.status.phase, p.status.ip, p.status.port) == ("Running", "127.0.0.1", 3128)
    assert p.status.condition("Ready").status == "True"
    assert p.resource_version == "4"  # declared (1), then three writes: finalizer, Provisioning, Running
    # steady state: one Get per resync, no write
    assert world.step(60) == ["get"]
    assert world.proxy("a").resource_version == "4"
    assert world.store.proxies.phases() == {"crawl/a": b"Running|1000010.000"}  # Running since the clock's 1000010
    (endpoint,) = world.store.proxies.endpoints().values()
    assert json.loads(endpoint) == {"uid": p.uid, "ip": "127.0.0.1", "port": 3128, "provider": "edge", "region": "", "zone": "",
                                    "instance": p.status.provider_id, "pool": ""}
    assert p.status.member == "own"  # written with Running: no write of its own


def upstream_world(tmp_path, entry: str) -> Any:
    from providers.upstream.config import UpstreamConfig
    from providers.upstream.provider import UpstreamProvider

    tmp_path.mkdir()
    (tmp_path / "list").write_text(entry + "\n")
    cfg = UpstreamConfig.model_validate({"mode": "list", "listFile": str(tmp_path / "list"), "stateDir": str(tmp_path / "state")})
    return make_world(tmp_path, ProviderConfig("edge", "upstream", cfg), UpstreamProvider("edge", cfg))


@pytest.mark.parametrize(("entry", "member", "scheme"), [
    (None, "own", None),  # the fake: a proxy fleet made
    ("http://203.0.113.1:8080", "upstream/http", "http"),
    ("socks5://203.0.113.2:1080", "upstream/socks5", "socks5"),
])
def test_a_running_member_says_what_kind_it_is_as_its_endpoint_does(world, tmp_path, entry, member, scheme):
    """status.member is read off the endpoint the reconciler writes: a scheme there (an upstream provider's dial
    hook) is a bought proxy and how it is spoken to; none is one of fleet's own."""
    w = world if entry is None else upstream_world(tmp_path / "up", entry)
    w.declare("a")
    w.step()
    assert w.proxy("a").status.member == ""  # Provisioning: no endpoint yet, nothing said
    w.step(10)
    p = w.proxy("a")
    endpoint = json.loads(w.store.proxies.endpoints()["crawl/a"])
    assert (p.status.phase, p.status.member, endpoint.get("scheme")) == ("Running", member, scheme)
    version = p.resource_version
    w.step(60)  # the resync's Get: nothing changed, nothing written
    assert w.proxy("a").resource_version == version


def test_a_running_proxy_without_a_member_gets_it_at_its_next_step(world):
    """A Proxy that went Running before status.member existed: its next reconcile writes it."""
    world.declare("a")
    world.step()
    world.step(10)
    p = world.proxy("a")
    world.objects.write_status(p, dataclasses.replace(p.status, member=""))
    world.step(60)
    assert world.proxy("a").status.member == "own"


@pytest.mark.parametrize(("label", "pool"), [("web", "web"), ("Not_A-Pool", ""), (None, "")])
def test_the_endpoint_names_the_pool_of_its_label(world, label, pool):
    """What the lease script's pool filter reads: the member's pool label, when it can be a ProxyPool's name."""
    world.declare("a", pool=label)
    world.step()
    world.step(10)
    assert world.proxy("a").pool == pool
    (endpoint,) = world.store.proxies.endpoints().values()
    assert json.loads(endpoint)["pool"] == pool
    if label is None:
        world.declare("a", pool="api")  # a label added later reaches the endpoint at the next reconcile
        world.step(60)
        assert json.loads(world.store.proxies.endpoints()["crawl/a"])["pool"] == "api"


def test_cloud_init_reaches_the_provider_but_never_a_message(world):
    world.declare("a")
    world.store.proxies.schedule("crawl/a", world.clock.t)
    for key in world.objects.sync():
        world.store.proxies.schedule(key, world.clock.t)
    world.rec.run_once()
    assert "SENTINEL" not in json.dumps(world.worker.sent)
    world.worker.run(world.rec, world.store)
    assert world.worker.cloud_init == ["#cloud-config SENTINEL-a"]


def test_a_port_change_replaces_under_the_same_name(world):
    world.declare("a")
    world.step()
    world.step(10)
    pid = world.proxy("a").status.provider_id
    world.declare("a", port=3130)
    assert world.step(1) == ["delete"]
    assert world.proxy("a").status.phase == "Replacing"
    assert world.step(10) == ["get", "create"]
    p = world.proxy("a")
    assert (p.status.phase, p.status.provider_id, p.generation) == ("Provisioning", pid, 2)
    world.step(10)
    assert (world.proxy("a").status.phase, world.proxy("a").status.port) == ("Running", 3130)


def test_removing_the_manifest_deletes_the_instance_then_the_object(world):
    world.declare("a")
    world.step()
    world.step(10)
    (world.dir / "a.yaml").unlink()
    assert world.step(1) == ["delete"]
    assert world.proxy("a").status.phase == "Deleting" and world.provider.list_by_tag(None) == []
    assert world.step(10) == ["get"]
    assert world.proxy("a") is None and world.store.proxies.phases() == {}


def test_an_unconfigured_provider_fails_with_its_name(world):
    world.declare("a", provider="nowhere")
    assert world.step() == []
    p = world.proxy("a")
    assert p.status.phase == "Failed" and "'nowhere'" in p.status.message


def test_quota_waits_five_minutes_on_the_injected_clock(world):
    world.worker.fail["create"] = base.QuotaExceeded
    world.declare("a")
    assert world.step() == ["create"]
    assert world.proxy("a").status.condition("Provisioned").reason == "QuotaExceeded"
    del world.worker.fail["create"]
    assert world.step(299) == []
    assert world.step(1) == ["create"]
    assert world.proxy("a").status.phase == "Provisioning"


def test_a_lost_answer_is_asked_again_once_the_call_lapses(world):
    world.declare("a")
    world.step()
    world.clock.t += 10
    world.rec.run_once()
    assert [t for t, _, _ in world.worker.sent] == ["fleet.get_instance"]
    world.worker.sent.clear()  # the worker died with the message
    assert world.step(10 - 1) == []
    assert world.step(1) == ["get"]
    assert world.proxy("a").status.phase == "Running"


def test_a_late_answer_for_a_lapsed_call_is_dropped(world):
    world.declare("a")
    world.step()
    world.clock.t += 10
    world.rec.run_once()
    _, _, link = world.worker.sent.pop()
    world.step(10)  # lapsed: asked again and answered
    assert world.rec.record(link["key"], link["call_id"], link["provider"], {"ok": True, "op": "get"}) == "stale"


def test_at_most_max_calls_per_provider_in_flight(world):
    for i in range(5):
        world.declare(f"p{i}")
    for key in world.objects.sync():
        world.store.proxies.schedule(key, world.clock.t)
    world.rec.run_once()
    assert len(world.worker.sent) == 3
    assert world.store.proxies.in_flight("edge", world.clock.t) == 3
    world.worker.run(world.rec, world.store)
    world.step(2)
    assert all(world.proxy(f"p{i}").status.phase == "Provisioning" for i in range(5))


def test_one_replica_at_a_time(world):
    world.declare("a")
    for key in world.objects.sync():
        world.store.proxies.schedule(key, world.clock.t)
    assert world.store.proxies.claim("crawl/a", "other-replica", 30)
    assert world.rec.reconcile("crawl/a") == "claimed"
    assert world.worker.sent == []


def test_a_bad_manifest_keeps_the_proxies_its_file_declared(world):
    world.declare("a")
    world.step()
    (world.dir / "a.yaml").write_text("apiVersion: [unclosed")
    world.step(1)
    assert world.proxy("a") is not None and not world.proxy("a").deleting
    assert any("a.yaml" in str(e) for e in world.objects.errors)


def test_redis_losing_its_data_converges_on_the_same_instance(world):
    world.declare("a")
    world.step()
    world.step(10)
    pid = world.proxy("a").status.provider_id
    world.store._redis.flushall()
    world.step(1)
    world.step(10)
    p = world.proxy("a")
    assert p.status.phase == "Running" and p.status.provider_id == pid and len(world.provider.list_by_tag(None)) == 1


def test_skip_cleanup_releases_without_deleting(world):
    (world.dir / "a.yaml").write_text(PROXY.format(name="a", provider="edge", port=3128, labels="").replace(
        "metadata: {name: a, namespace: crawl}",
        "metadata: {name: a, namespace: crawl, annotations: {crawl.example.com/skip-cleanup: 'true'}}"))
    world.step()
    world.step(10)
    (world.dir / "a.yaml").unlink()
    assert world.step(1) == []
    assert world.proxy("a") is None and len(world.provider.list_by_tag(None)) == 1


def test_deletion_removes_the_finalizer_only_after_not_found(world):
    world.declare("a")
    world.step()
    world.step(10)
    world.worker.fail["delete"] = base.Transient
    (world.dir / "a.yaml").unlink()
    world.step(1)
    p = world.proxy("a")
    assert p is not None and p.status.phase == "Deleting" and rules.FINALIZER in p.finalizers


def test_an_impossible_placement_is_failed_with_field_and_value_before_any_call(world):
    from providers.gcp.config import GcpConfig

    gcp = ProviderConfig("gce", "gcp", GcpConfig(project="my-project-1", zones=("europe-west1-b",)))
    world.rec.config = ProvidersConfig((*world.rec.config.providers, gcp))
    (world.dir / "g.yaml").write_text(PROXY.format(name="g", provider="gce", port=3128, labels="").replace(
        "  port: 3128", "  port: 3128\n  placement: {zone: mars-1a, machineType: e2-small, image: debian-12}"))
    assert world.step() == []
    p = world.proxy("g")
    assert p.status.phase == "Failed" and p.status.condition("Provisioned").reason == "InvalidPlacement"
    assert "placement.zone 'mars-1a'" in p.status.message


def test_a_malformed_manifest_is_named_and_does_not_stop_the_others(world):
    world.declare("good")
    (world.dir / "bad.yaml").write_text(PROXY.format(name="bad", provider="edge", port=70000, labels=""))
    assert world.step() == ["create"]
    assert world.proxy("good").status.phase == "Provisioning" and world.proxy("bad") is None
    (err,) = world.objects.errors
    assert "bad.yaml" in str(err) and "spec.port" in str(err) and "70000" in str(err)


def test_a_probe_verdict_sets_healthy_and_ready_and_the_egress_ip(world):
    world.declare("a")
    world.step()
    world.step(10)
    p = world.proxy("a")
    verdict = {"uid": p.uid, "healthy": False, "since": world.clock.t, "message": "CONNECT: connection refused",
               "egressIP": "198.51.100.7", "egressMismatch": True}
    world.store.proxies.put_verdict("crawl/a", json.dumps(verdict), world.clock.t)
    world.step(1)
    p = world.proxy("a")
    healthy, ready = p.status.condition("Healthy"), p.status.condition("Ready")
    assert (healthy.status, healthy.reason, healthy.message) == ("False", "ProbeFailed", "CONNECT: connection refused")
    assert (ready.status, ready.reason) == ("False", "Unhealthy") and p.status.egress_ip == "198.51.100.7"
    world.store.proxies.put_verdict("crawl/a", json.dumps({**verdict, "healthy": True, "message": ""}), world.clock.t)
    world.step(1)
    p = world.proxy("a")
    assert p.status.condition("Healthy").reason == "ProbeSucceeded" and p.status.condition("Ready").status == "True"


def test_a_verdict_about_another_uid_is_ignored(world):
    world.declare("a")
    world.step()
    world.step(10)
    version = world.proxy("a").resource_version
    world.store.proxies.put_verdict("crawl/a", json.dumps({"uid": "someone-else", "healthy": False}), world.clock.t)
    world.step(1)
    assert world.proxy("a").resource_version == version
    assert world.proxy("a").status.condition("Healthy").reason == "NotProbed"
