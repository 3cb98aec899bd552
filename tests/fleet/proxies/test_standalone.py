"""Standalone mode keeps the CRD's rules and no cloud-init text in Redis,
applied: `Standalone` and the real `Reconciler` on one store (fakeredis,
its Lua scripts included), two fake providers each with its own instances,
a clock the test moves, and a "worker" that runs every sent call through
`fleet.celery.calls.call` on the provider the message names -- the way a real
worker on `provider.<name>` would -- taking the staged cloud-init as
tasks/provider_calls.py does (once)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import fakeredis
import pytest

from fleet.celery import calls
from fleet.config import ProviderConfig, ProvidersConfig
from fleet.proxies.model import CloudInit, InlineDigest, Proxy
from fleet.proxies.reconciler import CloudInitUnavailable, Reconciler, Timing
from fleet.proxies.standalone import Standalone, decode, encode
from fleet.store import Store, keys
from providers import base
from providers.fake import FakeConfig, FakeProvider

SENTINEL = "SENTINEL-9c2e-cloud-init"

PROXY = """\
apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {{name: {name}, namespace: crawl}}
spec:
  provider: {provider}
  port: {port}
  cloudInit: {{inline: "#cloud-config {SENTINEL}-{name}"}}
"""


def manifest(name: str, provider: str = "edge", port: int = 3128) -> str:
    return PROXY.format(name=name, provider=provider, port=port, SENTINEL=SENTINEL)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Workers:
    """One fake backend per provider; runs each sent call on the provider its message names."""

    def __init__(self, store: Store, *names: str) -> None:
        self.store = store
        self.providers = {n: FakeProvider(n, FakeConfig()) for n in names}
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.calls: list[tuple[str, str]] = []  # (provider, op), in order
        self.cloud_init: list[str] = []
        self.redeliver = False  # run each create twice, as a redelivered message would be

    def send(self, task: str, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
        self.sent.append((task, dict(kwargs), link))

    def instances(self, name: str) -> list[Any]:
        return self.providers[name].list_by_tag(base.Deadline.after(5))

    def run(self, rec: Reconciler) -> list[str]:
        ran = []
        while self.sent:
            task, kw, link = self.sent.pop(0)
            op = task.removeprefix("fleet.").removesuffix("_instance")
            name = kw["provider"]
            for _ in range(2 if self.redeliver and op == "create" else 1):
                ran.append(op)
                self.calls.append((name, op))
                out = calls.call(name, op, lambda p, d, op=op, kw=kw: self._op(p, d, op, kw), timeout=5,
                                 attempt=kw["attempt"], build=lambda n: self.providers[n], recorder=calls.CallMetrics())
                rec.record(link["key"], link["call_id"], link["provider"], out)
        return ran

    def _op(self, p: FakeProvider, deadline: base.Deadline, op: str, kw: dict[str, Any]) -> Any:
        if op == "create":
            req, ref = calls.request_from_dict({k: v for k, v in kw.items() if k not in ("provider", "timeout", "attempt")})
            text = self.store.proxies.take_cloud_init(ref)
            if text is None:
                raise base.wrap(base.Transient, "create", p.name, req.name, "the staged cloud-init is gone")
            self.cloud_init.append(text.decode())
            return p.create(dataclasses.replace(req, cloud_init=self.cloud_init[-1], installation="test"), deadline)
        if op == "get":
            return calls.instance_dict(p.get(kw["provider_id"], deadline))
        return p.delete(kw["provider_id"], deadline)


@pytest.fixture
def world(tmp_path):
    manifests = tmp_path / "proxies"
    manifests.mkdir()
    client = fakeredis.FakeRedis()
    store = Store(client)
    clock = Clock()
    config = ProvidersConfig((ProviderConfig("edge", "fake", FakeConfig()), ProviderConfig("other", "fake", FakeConfig())))
    workers = Workers(store, "edge", "other")
    objects = Standalone(store.proxies, str(manifests), "test", clock=clock)
    rec = Reconciler(store.proxies, objects, config, workers.send, Timing(poll=10, resync=60, call_timeout=5, max_calls=3),
                     clock=clock)

    class World:
        pass

    w = World()
    w.__dict__.update(dir=manifests, store=store, redis=client, clock=clock, workers=workers, objects=objects, rec=rec)

    def step(seconds: float = 0.0) -> list[str]:
        clock.t += seconds
        for key in objects.sync():
            store.proxies.schedule(key, clock.t)
        ran = []
        for _ in range(20):
            rec.run_once()
            got = workers.run(rec)
            ran += got
            if not got:
                break
        return ran

    w.step = step
    w.proxy = lambda name: objects.get(f"crawl/{name}")
    return w


def with_cloud_init(p: Proxy, ci: CloudInit) -> Proxy:
    return dataclasses.replace(p, spec=dataclasses.replace(p.spec, cloud_init=ci))


def running(world, name: str) -> bool:
    p = world.proxy(name)
    return p is not None and p.status.phase == "Running"


# --- spec.provider is immutable ---------------------------------------------------------------


def test_a_provider_edit_is_reported_and_not_applied_and_the_instance_stays_with_its_provider(world):
    (world.dir / "a.yaml").write_text(manifest("a") + "---\n" + manifest("b"))
    world.step()
    world.step(10)
    assert running(world, "a") and running(world, "b")
    before = world.proxy("a")
    (instance,) = [i for i in world.workers.instances("edge") if i.uid == before.uid]

    # one file: a's provider, port and text edited, b's port edited -- b applies, a is refused whole
    (world.dir / "a.yaml").write_text(manifest("a", provider="other", port=8080).replace("#cloud-config", "#cloud-config v2")
                                      + "---\n" + manifest("b", port=8081))
    world.workers.calls.clear()
    world.step()
    (err,) = world.objects.errors
    assert str(err).startswith(f"{world.dir}/a.yaml#1: spec.provider: is immutable: crawl/a was created on provider "
                               "'edge', got 'other'; the edit is not applied")
    assert (err.source, err.path) == (f"{world.dir}/a.yaml#1", "spec.provider")
    after = world.proxy("a")
    assert (after.spec, after.generation, after.uid) == (before.spec, before.generation, before.uid)
    assert world.proxy("b").spec.port == 8081  # the other document of the same file still applied

    # a's resync Get, and later its deletion, go to the provider that made it
    for _ in range(3):
        world.step(60)
    assert running(world, "a")
    assert {p for p, _ in world.workers.calls} == {"edge"}
    assert world.workers.instances("other") == []
    assert instance in world.workers.instances("edge")

    # its instance vanishes: created again on edge, with the text it was applied with (not the refused edit's)
    world.workers.providers["edge"].delete(instance.id, base.Deadline.after(5))
    for _ in range(4):
        world.step(60)
    assert running(world, "a") and world.workers.cloud_init[-1] == f"#cloud-config {SENTINEL}-a"
    assert [i.uid for i in world.workers.instances("edge")].count(before.uid) == 1
    assert world.workers.instances("other") == []

    (world.dir / "a.yaml").write_text(manifest("b", port=8081))  # a removed: deleted on edge
    for _ in range(4):
        world.step(10)
    assert world.proxy("a") is None
    assert [i.uid for i in world.workers.instances("edge")] == [world.proxy("b").uid]
    assert world.workers.instances("other") == [] and world.objects.errors == []


def test_a_removed_proxy_declared_again_on_another_provider_is_a_new_proxy(world):
    """Removed and declared again in one edit is an edit (standalone cannot
    tell them apart); removed, then declared while it is deleted, is new."""
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    world.step(10)
    (world.dir / "a.yaml").unlink()
    world.step()
    assert world.proxy("a").deleting
    (world.dir / "a2.yaml").write_text(manifest("a", provider="other"))  # while it is deleted: waits, no error
    world.step()
    assert world.objects.errors == []
    for _ in range(4):
        world.step(10)
    assert running(world, "a") and world.proxy("a").spec.provider == "other"
    assert world.workers.instances("edge") == [] and len(world.workers.instances("other")) == 1


# --- cloud-init: never in Redis objects, staged for one read ---------------------------------


def every_value(client) -> list[bytes]:
    """Every key and every value Redis holds, whatever its type."""
    out = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "hash":
            for k, v in client.hgetall(key).items():
                out += [k, v]
        elif kind == "list":
            out += client.lrange(key, 0, -1)
        elif kind == "set":
            out += list(client.smembers(key))
        elif kind == "zset":
            out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        else:
            raise AssertionError(f"{key!r}: a {kind} the scan does not read")
    return out


def test_inline_cloud_init_is_stored_as_its_digest_and_reaches_the_create(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    assert world.workers.cloud_init == [f"#cloud-config {SENTINEL}-a"]
    raw = world.store.proxies.object("crawl/a")
    stored = json.loads(raw)["spec"]["cloudInit"]
    assert stored == {"inlineDigest": {"sha256": InlineDigest.of(f"#cloud-config {SENTINEL}-a").sha256,
                                       "bytes": len(f"#cloud-config {SENTINEL}-a"), "file": f"{world.dir}/a.yaml"}}
    world.step(10)
    assert running(world, "a")
    assert not any(SENTINEL.encode() in v for v in every_value(world.redis))
    assert list(world.redis.scan_iter(match=keys.CLOUD_INIT + "*")) == []  # taken by the create


def test_the_last_applied_annotation_is_stored_redacted(world):
    last = json.dumps({"spec": {"cloudInit": {"inline": SENTINEL}}})
    text = manifest("a").replace("namespace: crawl}", "namespace: crawl, annotations: {kubectl.kubernetes.io/"
                                                      f"last-applied-configuration: '{last}'}}}}")
    (world.dir / "a.yaml").write_text(text)
    world.step()
    p = world.proxy("a")
    assert p.annotations["kubectl.kubernetes.io/last-applied-configuration"] == f"<redacted: {len(last)} bytes>"
    assert SENTINEL.encode() not in world.store.proxies.object("crawl/a")


def test_an_edit_of_the_text_replaces_and_a_move_to_another_file_changes_nothing(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    world.step(10)
    gen = world.proxy("a").generation
    (world.dir / "a.yaml").unlink()
    (world.dir / "moved.yaml").write_text(manifest("a"))
    world.workers.calls.clear()
    world.step()
    p = world.proxy("a")
    assert (p.generation, p.spec.cloud_init.digest.file) == (gen, f"{world.dir}/moved.yaml")
    assert {op for _, op in world.workers.calls} <= {"get"}  # no replacement

    (world.dir / "moved.yaml").write_text(manifest("a").replace("#cloud-config", "#cloud-config v2"))
    for _ in range(4):
        world.step(10)
    assert world.proxy("a").generation == gen + 1 and running(world, "a")
    assert world.workers.cloud_init[-1] == f"#cloud-config v2 {SENTINEL}-a"


def test_a_replica_that_has_not_read_an_edit_reads_the_file_again(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    other = Standalone(world.store.proxies, str(world.dir), "test", clock=world.clock)  # never synced
    assert other.cloud_init(world.proxy("a")) == f"#cloud-config {SENTINEL}-a"
    (world.dir / "a.yaml").write_text(manifest("a").replace("#cloud-config", "#cloud-config v2"))
    with pytest.raises(CloudInitUnavailable, match="no longer holds the text applied") as exc:
        Standalone(world.store.proxies, str(world.dir), "test").cloud_init(world.proxy("a"))
    assert SENTINEL not in str(exc.value)


def test_a_digest_pointing_outside_the_manifests_is_not_read(world, tmp_path):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(manifest("a"))
    p = world.proxy("a")
    moved = InlineDigest(p.spec.cloud_init.digest.sha256, p.spec.cloud_init.digest.size, str(outside))
    fresh = Standalone(world.store.proxies, str(world.dir), "test")
    with pytest.raises(CloudInitUnavailable, match="is not under --proxies"):
        fresh.cloud_init(with_cloud_init(p, CloudInit(digest=moved)))


def test_an_object_stored_with_its_text_by_an_older_version_is_rewritten_without_a_new_generation(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    world.step(10)
    p = world.proxy("a")
    legacy = json.loads(world.store.proxies.object("crawl/a"))
    legacy["spec"]["cloudInit"] = {"inline": f"#cloud-config {SENTINEL}-a"}
    world.redis.hset(keys.PX_OBJECTS, "crawl/a", json.dumps(legacy))
    assert world.proxy("a").spec.cloud_init.digest.file == ""  # read as its digest at once
    world.workers.calls.clear()
    world.step(1)
    assert SENTINEL.encode() not in world.store.proxies.object("crawl/a")
    assert world.proxy("a").generation == p.generation
    assert {op for _, op in world.workers.calls} <= {"get"}  # no replacement


def test_encode_refuses_text_and_decode_reads_the_digest_back(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    p = world.proxy("a")
    assert decode(encode(p), "x") == p
    with pytest.raises(ValueError, match="never stored"):
        encode(with_cloud_init(p, CloudInit(inline=SENTINEL)))


@pytest.mark.parametrize("digest", [
    {"sha256": "x", "bytes": 1, "file": "f"},
    {"sha256": "a" * 64, "bytes": -1, "file": "f"},
    {"sha256": "a" * 64, "bytes": True, "file": "f"},
    {"sha256": "a" * 64, "bytes": 1},
    "a" * 64,
])
def test_a_corrupt_digest_in_redis_is_an_unreadable_object(world, digest):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.step()
    doc = json.loads(world.store.proxies.object("crawl/a"))
    doc["spec"]["cloudInit"] = {"inlineDigest": digest}
    world.redis.hset(keys.PX_OBJECTS, "crawl/a", json.dumps(doc))
    assert world.proxy("a") is None


def test_a_redelivered_create_finds_its_token_gone_and_a_new_create_follows(world):
    """GETDEL: the second delivery of one create cannot read the text; its
    Transient answer makes the reconciler send a new create with a new token."""
    world.workers.redeliver = True
    (world.dir / "a.yaml").write_text(manifest("a"))
    ran = world.step()
    assert ran[:2] == ["create", "create"]
    assert world.workers.cloud_init == [f"#cloud-config {SENTINEL}-a"]  # read once
    for _ in range(4):
        world.step(10)
    assert running(world, "a")
    assert len(world.workers.instances("edge")) == 1
    assert list(world.redis.scan_iter(match=keys.CLOUD_INIT + "*")) == []


def test_the_staged_text_lives_no_longer_than_the_call_timeout(world):
    (world.dir / "a.yaml").write_text(manifest("a"))
    world.objects.sync()
    world.store.proxies.schedule("crawl/a", world.clock.t)
    world.rec.run_once()  # the create is sent, nothing runs it
    ((_, kw, _),) = world.workers.sent
    ttl = world.redis.pttl(keys.CLOUD_INIT + kw["cloud_init_ref"])
    assert 0 < ttl <= 5000  # Timing.call_timeout: the message expires then too
    assert world.store.proxies.take_cloud_init(kw["cloud_init_ref"]) == f"#cloud-config {SENTINEL}-a".encode()
    assert world.store.proxies.take_cloud_init(kw["cloud_init_ref"]) is None
