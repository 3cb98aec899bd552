"""fleet.pools.standalone as applied: ProxyPool documents in the `--proxies`
manifests, the same PoolController and decision as a cluster's over
`InRedis`, and the real standalone Proxy `Reconciler` provisioning the
members on fake providers (tests/fleet/proxies/test_standalone.py's world:
one fakeredis, a clock the test moves, a "worker" running each sent call).

A pool of 3 reaches 3 Running members; `fleet scale pool`'s override holds
across re-reads until the manifest's replicas changes; removing the pool
retires every member (their instances deleted) and drops its record, but
not while a manifest fails to read; members are never retired by the
Proxies' sync and no manifest may take a member's name."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from fleet.pools.controller import PoolController
from fleet.pools.standalone import InRedis, declared_pools, effective, set_replicas
from fleet.proxies.model import LABEL_POOL, POOL_OWNER
from fleet.store import keys
from tests.fleet.proxies.test_standalone import SENTINEL, every_value, manifest, world  # noqa: F401

POOL = """\
apiVersion: crawl.example.com/v1alpha1
kind: ProxyPool
metadata: {{name: web, namespace: crawl}}
spec:
  replicas: {replicas}
  providers: [{{provider: edge, weight: 2}}, {{provider: other, weight: 1}}]
  template:
    port: 3128
    cloudInit: {{inline: "#cloud-config {SENTINEL}-pool"}}
"""


def pool_manifest(replicas: int) -> str:
    return POOL.format(replicas=replicas, SENTINEL=SENTINEL)


@pytest.fixture
def pw(world):  # noqa: F811
    def due(keys_):
        for k in keys_:
            world.store.proxies.schedule(k, world.clock.t)

    world.where = InRedis(world.store.pools, world.objects, str(world.dir), "test", clock=world.clock, on_change=due)
    world.ctl = PoolController(world.where, clock=world.clock, rng=random.Random(3))

    def cycle(n: int = 1, seconds: float = 10.0) -> None:
        for _ in range(n):
            world.step(seconds)
            world.ctl.run_once()
            world.step()

    world.cycle = cycle
    return world


def members(w, pool="web"):
    return sorted(p.name for p in w.objects.all() if p.pool == pool and POOL_OWNER in p.annotations and not p.deleting)


def instances(w):
    return {n: len(w.workers.instances(n)) for n in ("edge", "other")}


def record(w, key="crawl/web"):
    raw = w.store.pools.records().get(key)
    return json.loads(raw) if raw else None


def test_a_pool_of_3_reaches_3_running_members_spread_by_weight_and_its_status_is_in_redis(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(3) + "---\n" + manifest("solo"))
    pw.cycle(4)
    names = members(pw)
    assert len(names) == 3 and all(n.startswith("web-") for n in names)
    assert all(pw.proxy(n).status.phase == "Running" for n in names)
    assert instances(pw) == {"edge": 3, "other": 1}  # solo (edge) + 2 edge members, 1 other member (2:1)
    assert sorted(pw.proxy(n).spec.provider for n in names) == ["edge", "edge", "other"]
    st = record(pw)["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"]) == (3, 3, 3)
    assert pw.proxy("solo").status.phase == "Running"  # the Proxy beside the pool is untouched
    assert f"#cloud-config {SENTINEL}-pool" in pw.workers.cloud_init  # the template's text reached the create
    assert not any(SENTINEL.encode() in v for v in every_value(pw.redis))  # and is nowhere in Redis
    pw.cycle(2)  # more syncs and passes change nothing
    assert members(pw) == names


def test_a_scale_override_holds_across_re_reads_until_the_manifests_replicas_changes(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(3))
    pw.cycle(4)
    before = members(pw)
    assert set_replicas(pw.store.pools, str(pw.dir), "crawl", "web", 1) is not None
    pw.cycle(3)
    assert len(members(pw)) == 1 and set(members(pw)) < set(before)
    assert sum(instances(pw).values()) == 1  # the two deleted members' instances are gone
    gen = record(pw)["generation"]
    (pw.dir / "web.yaml").write_text(pool_manifest(3) + "\n")  # re-applied, replicas unchanged: the scale holds
    pw.cycle(2)
    assert len(members(pw)) == 1 and record(pw)["generation"] == gen
    (pw.dir / "web.yaml").write_text(pool_manifest(2))  # the manifest's replicas changed: it wins
    pw.cycle(4)
    assert len(members(pw)) == 2 and keys.text(pw.redis.hget(keys.POOL_SCALE, "crawl/web") or b"") == ""


@pytest.mark.parametrize("replicas, override, holds", [
    (3, None, False),
    (3, {"replicas": 1, "manifest": 3}, True),
    (4, {"replicas": 1, "manifest": 3}, False),  # the manifest moved since the scale
    (None, {"replicas": 1, "manifest": None}, True),  # unset both times
    (3, {"replicas": "1", "manifest": 3}, False),  # not a count: ignored
])
def test_the_override_rule(tmp_path, replicas, override, holds):
    spec = "" if replicas is None else f"  replicas: {replicas}\n"
    (tmp_path / "p.yaml").write_text("apiVersion: crawl.example.com/v1alpha1\nkind: ProxyPool\nmetadata: {name: p}\n"
                                     f"spec:\n{spec}  providers: [{{provider: edge}}]\n  template: {{port: 3128}}\n")
    (d,) = declared_pools(str(tmp_path)).pools
    obj, rec, got = effective(d, None, override, "uid-1", 0.0)
    assert got == holds
    assert obj["spec"].get("replicas") == (override["replicas"] if holds else replicas)
    assert obj["metadata"]["namespace"] == "default" and rec["generation"] == 1


def test_removing_the_pool_deletes_every_member_and_its_instance_but_not_while_a_manifest_is_broken(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(3))
    (pw.dir / "solo.yaml").write_text(manifest("solo"))
    pw.cycle(4)
    assert len(members(pw)) == 3
    (pw.dir / "web.yaml").unlink()
    (pw.dir / "solo.yaml").write_text("kind: [unclosed\n")  # a broken file: nothing may be deleted
    pw.cycle(3)
    assert len(members(pw)) == 3 and pw.ctl.counters.deletes == {} and record(pw) is not None
    (pw.dir / "solo.yaml").write_text(manifest("solo"))
    pw.cycle(4)
    assert members(pw) == [] and pw.ctl.counters.deletes == {"orphan": 3}
    assert instances(pw) == {"edge": 1, "other": 0}  # solo's only
    assert [p.name for p in pw.objects.all()] == ["solo"]  # the members released after their instances
    assert record(pw) is None


def test_a_bad_pool_document_is_reported_and_deletes_nothing(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(2))
    pw.cycle(3)
    (pw.dir / "web.yaml").write_text(pool_manifest(2).replace("weight: 2", "weight: 0"))
    pw.cycle(2)
    assert len(members(pw)) == 2
    assert any("spec.providers[0].weight" in e and "web.yaml#1" in e for e in pw.where.errors)


def test_no_manifest_takes_a_members_name_or_its_owner_annotation(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(1))
    pw.cycle(3)
    (name,) = members(pw)
    before = pw.proxy(name)
    (pw.dir / "steal.yaml").write_text(manifest(name, provider="other", port=4000))
    (pw.dir / "fake.yaml").write_text(manifest("fake").replace("namespace: crawl}",
                                                               f"namespace: crawl, annotations: {{{POOL_OWNER}: x}}}}"))
    pw.cycle(2)
    after = pw.proxy(name)
    assert (after.spec, after.uid, after.annotations) == (before.spec, before.uid, before.annotations)
    assert pw.proxy("fake") is None
    why = [str(e) for e in pw.objects.errors]
    assert any("is a ProxyPool member's name" in e for e in why) and any("set by fleet on ProxyPool members" in e for e in why)
    assert members(pw) == [name]


def test_members_carry_the_pool_label_for_get_px_and_the_lease_filter(pw):
    (pw.dir / "web.yaml").write_text(pool_manifest(2))
    pw.cycle(3)
    eps = {keys.text(k): json.loads(v) for k, v in pw.store.proxies.endpoints().items()}
    assert sorted(k.split("/")[1] for k, e in eps.items() if e.get("pool") == "web") == members(pw)
    assert all(pw.proxy(n).pool == "web" for n in members(pw))
    assert LABEL_POOL == "crawl.example.com/pool"


def test_the_pool_loop_parses_changed_manifests_once_with_the_proxies_sync(pw, monkeypatch):
    """Issue 24: a fleet's manifests are parsed once per change, by the Proxies' sync; the pool loop takes its
    documents (waiting at most FOLLOW_WAIT for them), reads no Proxy while no pool exists, and parses itself
    only when it follows nothing."""
    from fleet.pools import standalone as pools_standalone
    from fleet.proxies import standalone as proxies_standalone

    parses = []
    real = proxies_standalone.load_all
    monkeypatch.setattr(proxies_standalone, "load_all", lambda path: parses.append("proxies") or real(path))
    monkeypatch.setattr(pools_standalone, "load_all", lambda path: parses.append("pools") or real(path))
    reads = []
    monkeypatch.setattr(pw.objects, "all", lambda: reads.append(1) or [])
    follower = InRedis(pw.store.pools, pw.objects, str(pw.dir), "test", clock=pw.clock, follow=True)
    (pw.dir / "solo.yaml").write_text(manifest("solo"))
    pw.objects.sync()
    follower.list(None)  # the first pass: the sync's read
    assert parses == ["proxies"] and reads == []  # no pool declared nor recorded: no Proxy read

    (pw.dir / "web.yaml").write_text(pool_manifest(2))
    assert follower.list(None).pools == []  # moved, not read by the sync yet: what it had
    pw.objects.sync()
    assert [o["metadata"]["name"] for o in follower.list(None).pools] == ["web"]
    assert parses == ["proxies", "proxies"] and reads == [1]

    alone = InRedis(pw.store.pools, pw.objects, str(pw.dir), "test", clock=pw.clock)  # as `fleet scale pool` builds it
    (pw.dir / "web.yaml").write_text(pool_manifest(3))
    assert alone.list(None).pools[0]["spec"]["replicas"] == 3
    assert parses[-1] == "pools"

    monkeypatch.setattr(pools_standalone, "FOLLOW_WAIT", 0.0)
    (pw.dir / "web.yaml").write_text(pool_manifest(4) + "# a longer file: another size\n")
    assert follower.list(None).pools[0]["spec"]["replicas"] == 4  # the sync never came in time: read by itself
    assert parses[-1] == "pools"


def test_a_pass_reads_again_only_the_members_that_changed(pw, monkeypatch):
    """A steady pool's pass builds no member object and reads no member again (at 1,000 members that
    had been two thirds of a pass every 2 s); a member whose status moves is read again, and its new
    state reaches the decision."""
    from fleet.pools import controller, standalone

    (pw.dir / "web.yaml").write_text(pool_manifest(3))
    pw.cycle(4)
    assert len(members(pw)) == 3
    built, read = [], []
    real_object, real_member = standalone.member_object, controller.member_of
    monkeypatch.setattr(standalone, "member_object", lambda p: built.append(p.name) or real_object(p))
    monkeypatch.setattr(controller, "member_of", lambda o, *a: read.append(o["metadata"]["name"]) or real_member(o, *a))
    pw.ctl.run_once()
    pw.ctl.run_once()
    assert built == [] and read == []
    victim = members(pw)[0]
    p = pw.proxy(victim)
    pw.objects.write_status(p, dataclasses.replace(p.status, phase="Failed"))  # as a latched failure would leave it
    pw.ctl.run_once()
    assert built[0] == victim and read[0] == victim
    assert victim not in members(pw)  # the decision saw it Failed: replaced
